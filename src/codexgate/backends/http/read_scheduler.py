"""The order in which streams read their upstreams: steady streams take turns, so a new
stream's first bytes do not queue behind them.

An event loop runs, in each pass, every callback that became ready during the last one. Under
load that is every open stream's next upstream read: with 128 streams busy a pass lasts tens of
milliseconds, and a new request needs several passes before its first token (its body read,
its upstream request written, the upstream's headers, the first chunk), each one behind all
the others' deltas. Measured at 128 concurrent streams on one core: passes of 20 ms on average,
140 ms at p99, and 160 ms from a request to its upstream's headers, most of it waiting.

So a stream whose model already produced output asks for a turn before it works on the next
read (backends/http/backend.py): within the first `SLICE` seconds of steady work in a pass it
goes on at once; past that it queues, and each following pass lets through as many queued
streams as fit in one slice (measured from how long the last pass took), and never fewer than
a thirty-second of the queue: a flood of new requests slows the started streams down but cannot
stall them (each gets a turn within 32 passes). Streams still starting never queue. The CPU
stays busy (queued work runs in the next pass, right after the new streams' steps), so the
throughput is the same; only the order changes, oldest first among the steady ones.

When more than REST_ABOVE streams are started at once, each also rests REST seconds between
reads with its upstream socket paused: the events that come meanwhile are read, translated and
written in one go, not one wake-up, read and write each.
"""

from __future__ import annotations

import asyncio
from collections import deque
from time import perf_counter

__all__ = ["REST", "REST_ABOVE", "ReadScheduler", "read_scheduler"]

SLICE = 0.002  # seconds of steady work per pass of the loop, at most, when streams queue
_MAX_BATCH = 256
# With more started streams than this open at once, each rests REST seconds between reads:
# its upstream's next events wait in the socket and come in one read and go out in one write.
# A delta is at most 20 ms late, which nobody reading a stream sees, and each event no longer
# costs its own wake-up, read and write: 128 paced streams (one delta per 10 ms each) take
# ~20% less CPU per event.
REST_ABOVE = 32
REST = 0.02


class ReadScheduler:
    """The turns of one event loop's steady streams."""

    __slots__ = ("_loop", "_queue", "_slice_end", "_ticking", "_last_tick", "_batch", "_started")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queue: deque[asyncio.Future[None]] = deque()
        self._slice_end = 0.0  # steady work in this pass goes on until then
        self._ticking = False  # a tick is due at the start of the next pass
        self._last_tick = 0.0
        self._batch = 8.0  # how many queued streams the next pass lets through
        self._started = 0  # streams of this loop whose model's output began, not ended

    def started(self) -> None:
        """A stream's model began its output: it is steady from its next read on."""
        self._started += 1

    def ended(self) -> None:
        """A started stream ended."""
        self._started -= 1

    @property
    def crowded(self) -> bool:
        """So many streams are started that each rests between reads (REST)."""
        return self._started > REST_ABOVE

    def wait(self) -> asyncio.Future[None] | None:
        """None: go on now. Otherwise a future to await; the stream's turn comes when it is
        done (it is never failed; cancelling the waiting task cancels it)."""
        now = perf_counter()
        if not self._ticking:
            # The first steady work of this pass opens its slice.
            self._ticking = True
            self._slice_end = now + SLICE
            self._last_tick = now
            self._loop.call_soon(self._tick)
        elif self._queue or now >= self._slice_end:
            waiter = self._loop.create_future()
            self._queue.append(waiter)
            return waiter
        return None

    def _tick(self) -> None:
        """Early in a pass: let through the next batch of queued streams (they run in the
        next pass, before fresh steady work queues behind them), and size the batch so that
        the pass it runs in lasts about one slice."""
        now = perf_counter()
        took, self._last_tick = now - self._last_tick, now
        queue = self._queue
        if not queue:
            self._ticking = False
            return
        # took is the whole pass (new streams' work included); aim the steady part at SLICE.
        scale = SLICE / took if took > 0 else 2.0
        self._batch = min(_MAX_BATCH, max(1.0, self._batch * min(2.0, max(0.5, scale))))
        let_through = max(int(self._batch), (len(queue) + 31) // 32)
        while queue and let_through:
            waiter = queue.popleft()
            if not waiter.done():  # its task was cancelled while it waited
                waiter.set_result(None)
                let_through -= 1
        self._slice_end = now  # fresh steady work in this pass queues behind the woken ones
        self._loop.call_soon(self._tick)


# One scheduler per event loop, as asyncio keeps its own state per loop: it orders every stream
# the loop serves, whichever backend or app started it (a worker process runs one loop; tests
# run many, one after another).
# (A scheduler holds its loop, so a weak mapping would keep every loop alive: closed loops are
# dropped when a new one first asks.)
_by_loop: dict[asyncio.AbstractEventLoop, ReadScheduler] = {}


def read_scheduler() -> ReadScheduler:
    """The running loop's scheduler."""
    loop = asyncio.get_running_loop()
    got = _by_loop.get(loop)
    if got is None:
        for old in [old for old in _by_loop if old.is_closed()]:
            del _by_loop[old]
        got = _by_loop[loop] = ReadScheduler(loop)
    return got
