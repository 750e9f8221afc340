"""The allocator's free pages go back to the system after a burst (server/memory.py)."""

from __future__ import annotations

import asyncio

import pytest

from codexgate.server import memory


async def test_a_trim_follows_the_end_of_a_burst_and_none_follows_idleness(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trims: list[int] = []
    monkeypatch.setattr(memory, "_malloc_trim", lambda: lambda pad: trims.append(pad) or 1)
    monkeypatch.setattr(memory, "CHECK_INTERVAL", 0.01)
    load = {"open": 0, "served": 0}
    task = asyncio.create_task(memory.give_back_memory(lambda: load["open"], lambda: load["served"]))
    try:
        await asyncio.sleep(0.05)
        assert trims == []  # nothing served: nothing to give back
        load.update(open=100, served=100)
        await asyncio.sleep(0.05)
        assert trims == []  # a steady load: no trim before TRIM_AT_LEAST_EVERY
        load.update(open=10, served=120)  # the burst ended
        await asyncio.sleep(0.05)
        assert trims == [0]
        await asyncio.sleep(0.05)
        assert trims == [0]  # nothing new served since
    finally:
        task.cancel()


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
