"""Giving memory back to the system after a burst.

CPython frees what a request allocated, but the C allocator keeps the freed pages: the
process's resident memory stays at the high-water mark of its busiest moment. After 128
concurrent Codex-sized requests that is some 30 MB more than the gateway needs idle
(bench/under_load.py, "RSS before"), and every later burst grows from there. glibc's
`malloc_trim` returns free pages, those between live allocations too. It costs about a
millisecond on the event loop, so it runs when a burst has ended (the open responses fell to
half of the most since the last trim), or every half minute under a steady load; never when
nothing was served since the last time.

And only when the process grew by `GROWTH_TO_TRIM` since the last trim (or since the least it
held after it). A trim hands back the free pages the next requests would have reused, and
each page then costs them a fault to get back. Without that bound the burst rule fired after
every turn of a quiet gateway (one stream open, then none), where there was little to give
back: ~0.1 ms for the trim, then ~60 more page faults and 180-240 us more CPU for the next
turn, 28-110 us of it before its upstream request was written (in process, trimmed before
every other turn).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import os
from collections.abc import Callable

log = logging.getLogger("codexgate.memory")

CHECK_INTERVAL = 1.0  # seconds between two looks at the load
TRIM_AT_LEAST_EVERY = 30.0  # seconds: under a steady load, trim this often
GROWTH_TO_TRIM = 8 * 1024 * 1024  # bytes of resident memory gained since the last trim


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None where there is none (musl, macOS)."""
    for name in ("libc.so.6", ctypes.util.find_library("c")):
        if name is None:
            continue
        try:
            trim = ctypes.CDLL(name).malloc_trim
        except (OSError, AttributeError):
            continue
        trim.argtypes = [ctypes.c_size_t]
        trim.restype = ctypes.c_int
        return trim
    return None


def give_back_now() -> None:
    """Return the allocator's free pages at once: after startup, what loading left free
    (building the settings' validators is most of it: ~5 MB) goes back to the system."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def resident_bytes() -> int | None:
    """This process's resident memory (Linux); None where it cannot be read."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


async def give_back_memory(
    open_now: Callable[[], int],
    served: Callable[[], int],
    resident: Callable[[], int | None] = resident_bytes,
) -> None:
    """Until cancelled: return the allocator's free pages to the system after a burst.
    `open_now()`: responses in flight; `served()`: responses begun, ever; `resident()`: the
    process's resident bytes (None: unknown, then a trim goes ahead)."""
    trim = _malloc_trim()
    if trim is None:
        log.debug("no malloc_trim here: resident memory stays at its high-water mark")
        return
    loop = asyncio.get_running_loop()
    last_served, most, last_trim = served(), 0, loop.time()
    floor = resident()  # what the process held after the last trim
    while True:
        await asyncio.sleep(CHECK_INTERVAL)
        now = open_now()
        most = max(most, now)
        if served() == last_served:
            continue
        if now * 2 > most and loop.time() - last_trim < TRIM_AT_LEAST_EVERY:
            continue
        size = resident()
        if size is not None and floor is not None:
            floor = min(floor, size)  # the process shrank by itself
            if size - floor < GROWTH_TO_TRIM:
                continue  # little to give back, and the next requests would fault to reuse it
        trim(0)
        last_served, most, last_trim = served(), now, loop.time()
        floor = resident()
