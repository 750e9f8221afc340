"""The allocator's free pages go back to the system after a burst (server/malloc_trim.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from codexgate.server import malloc_trim as memory
from tests.support.processes import until


class _Load:
    """The gateway's load as give_back_memory reads it, counting its checks (each reads
    `open_now` first), so a test can let some checks pass instead of some time."""

    def __init__(self) -> None:
        self.open = 0
        self.served = 0
        self.checks = 0

    def open_now(self) -> int:
        self.checks += 1
        return self.open

    async def checked(self, times: int = 5) -> None:
        """Until `times` more checks have run."""
        wanted = self.checks + times
        await until(lambda: self.checks >= wanted, what="give_back_memory stopped checking")


async def test_a_trim_follows_the_end_of_a_burst_and_none_follows_idleness(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trims: list[int] = []
    monkeypatch.setattr(memory, "_malloc_trim", lambda: lambda pad: trims.append(pad) or 1)
    monkeypatch.setattr(memory, "CHECK_INTERVAL", 0.001)
    load, resident = _Load(), {"now": 100 * 2**20}
    task = asyncio.create_task(
        memory.give_back_memory(load.open_now, lambda: load.served, lambda: resident["now"])
    )
    try:
        await load.checked()
        assert trims == []  # nothing served: nothing to give back
        load.open, load.served, resident["now"] = 100, 100, 130 * 2**20  # the burst's pages
        await load.checked()
        assert trims == []  # a steady load: no trim before TRIM_AT_LEAST_EVERY
        load.open, load.served = 10, 120  # the burst ended
        await until(lambda: trims == [0], what="no trim after the burst")
        await load.checked()
        assert trims == [0]  # nothing new served since
    finally:
        task.cancel()


async def test_no_trim_follows_turns_that_left_little_to_give_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """A quiet gateway: each turn opens one stream, then none (the burst rule holds every
    time), and reuses the pages the last one freed: trimming them would cost it the faults."""
    trims: list[int] = []
    monkeypatch.setattr(memory, "CHECK_INTERVAL", 0.001)
    load = _Load()
    size = {"now": 100 * 2**20}

    def resident() -> int:
        return size["now"]

    def trim(pad: int) -> int:  # what a trim does: the free pages leave
        trims.append(pad)
        size["now"] -= 4 * 2**20
        return 1

    monkeypatch.setattr(memory, "_malloc_trim", lambda: trim)
    task = asyncio.create_task(memory.give_back_memory(load.open_now, lambda: load.served, resident))
    try:
        for turn in range(1, 6):  # each turn a little more resident, not GROWTH_TO_TRIM
            load.open, load.served = 1, turn
            size["now"] += 2**20
            await load.checked(3)
            load.open = 0
            await load.checked(3)
        assert trims == []
        size["now"] += memory.GROWTH_TO_TRIM  # now a burst's worth
        load.served = 6
        await until(lambda: trims == [0], what="no trim after a burst's growth")
        # Measured from what it held after that trim: growing a little again is no reason.
        size["now"] += 2**20
        load.served = 7
        await load.checked()
        assert trims == [0]
    finally:
        task.cancel()


def test_resident_memory_is_read_on_linux() -> None:
    size = memory.resident_bytes()
    assert size is not None and 10 * 2**20 < size < 4 * 2**30


def test_the_real_malloc_trim_is_found_on_glibc() -> None:
    trim = memory._malloc_trim()
    assert trim is not None and trim(0) in (0, 1)


def test_startup_gives_back_what_loading_freed(monkeypatch: pytest.MonkeyPatch) -> None:
    """serve.run's garbage-collector tuning ends with a trim: building the settings'
    validators leaves some 5 MB of freed pages behind."""
    from codexgate.server import serve

    trims: list[int] = []
    monkeypatch.setattr(memory, "_malloc_trim", lambda: lambda pad: trims.append(pad) or 1)
    monkeypatch.setattr(serve.gc, "freeze", lambda: None)  # not this test process's objects
    monkeypatch.setattr(serve.gc, "set_threshold", lambda *threshold: None)
    serve.tune_garbage_collector()
    assert trims == [0]


class _Probe:
    """A value whose lifetime a weak reference can follow."""


async def test_a_sent_batch_is_not_held_while_the_stream_waits_for_the_next() -> None:
    """The first batch (the response twice, with the request's echo) used to stay referenced
    by the delivery loop through the model's whole prefill (server/response.py `relay`)."""
    import weakref

    from codexgate.redact import Redactor
    from codexgate.server.delivery import StreamEncoder, StreamOutput
    from codexgate.server.exchange import Exchange
    from codexgate.server.response import relay

    class Encoder(StreamEncoder):
        def batch(self, events: list[Any]) -> bytes:
            return b"x" * 1000

    sent: list[Any] = []
    first_gone: list[bool] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def events() -> Any:
        probe = _Probe()
        seen = weakref.ref(probe)
        yield [{"type": "response.created", "response": {"probe": probe}}]
        del probe
        await asyncio.sleep(0)  # the model's prefill: the first batch is out
        first_gone.append(seen() is None)
        yield [{"type": "response.completed", "response": {}}]

    exchange = Exchange(None, "responses")
    await relay(events(), StreamOutput(Encoder(), send, exchange), exchange, Redactor([]))
    assert first_gone == [True]
    assert sent[-1]["type"] == "http.response.body" and not sent[-1].get("more_body")
