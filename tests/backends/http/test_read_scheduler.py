"""Steady streams take turns: a new stream's steps do not wait behind all of their work."""

from __future__ import annotations

import asyncio
from time import perf_counter

import pytest

from codexgate.backends.http import read_scheduler as scheduler_module
from codexgate.backends.http.read_scheduler import ReadScheduler
from tests.support.processes import until

_UNIT = 0.0005  # seconds of work a steady stream does per read


def _work(seconds: float) -> None:
    end = perf_counter() + seconds
    while perf_counter() < end:
        pass


async def _steady(turns: ReadScheduler | None, units: list[int], me: int, stop: asyncio.Event) -> None:
    """A started stream: a read's worth of work, then the next read (one loop pass later)."""
    while not stop.is_set():
        if turns is not None:
            turn = turns.wait()
            if turn is not None:
                await turn
        _work(_UNIT)
        units.append(me)
        await asyncio.sleep(0)


async def _units_before_a_new_stream(turns: ReadScheduler | None) -> int:
    """How many steady reads run between a new stream's step being scheduled and running."""
    units: list[int] = []
    stop = asyncio.Event()
    streams = [asyncio.create_task(_steady(turns, units, i, stop)) for i in range(100)]
    await until(lambda: len(units) >= 200, 30)  # well into the steady state: two passes' reads
    ran = asyncio.Event()
    mark = len(units)
    asyncio.get_running_loop().call_soon(ran.set)  # stands for a new request's next step
    await ran.wait()
    waited = len(units) - mark
    stop.set()
    await asyncio.gather(*streams)
    return waited


async def test_a_new_streams_step_runs_within_about_a_slice_of_steady_work() -> None:
    without = await _units_before_a_new_stream(None)
    with_turns = await _units_before_a_new_stream(ReadScheduler(asyncio.get_running_loop()))
    # Without turns the step waits for every stream's read of the pass (100 x 0.5 ms); with
    # them for about one slice (2 ms, 4 reads), whatever the batch size has grown to.
    assert without >= 90
    assert with_turns <= 40


async def test_every_steady_stream_gets_its_turns_in_order() -> None:
    turns = ReadScheduler(asyncio.get_running_loop())
    units: list[int] = []
    stop = asyncio.Event()
    streams = [asyncio.create_task(_steady(turns, units, i, stop)) for i in range(50)]
    await until(lambda: len(units) >= 50 * 12, 30)  # a dozen reads each, were they fair
    stop.set()
    await asyncio.gather(*streams)
    counts = [units.count(i) for i in range(50)]
    assert min(counts) >= 5  # nobody starves
    assert max(counts) - min(counts) <= 3  # and nobody gets ahead: oldest first


async def test_a_cancelled_waiter_gives_its_place_to_the_next() -> None:
    turns = ReadScheduler(asyncio.get_running_loop())
    assert turns.wait() is None  # opens a slice
    _work(0.003)  # past the slice: the next ones queue
    first, second = turns.wait(), turns.wait()
    assert first is not None and second is not None
    first.cancel()
    await asyncio.wait_for(second, 1.0)  # woken by the next pass's tick


def test_each_loop_has_its_own_scheduler_and_closed_loops_are_forgotten() -> None:
    first, again, first_loop = asyncio.run(_turns_twice())
    second, _, _ = asyncio.run(_turns_twice())
    assert first is again
    assert second is not first
    assert first_loop not in scheduler_module._by_loop


async def _turns_twice() -> tuple[ReadScheduler, ReadScheduler, asyncio.AbstractEventLoop]:
    return scheduler_module.read_scheduler(), scheduler_module.read_scheduler(), asyncio.get_running_loop()


async def test_crowded_started_streams_rest_between_reads_and_lose_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from codexgate.backends.http.stream import HttpStream
    from tests.server.test_app import gateway
    from tests.support.fake_upstream import text_reply
    from tests.support.sse import stream_events

    rests: list[float] = []
    real_rest = HttpStream.rest

    async def counted_rest(self: HttpStream, seconds: float) -> None:
        rests.append(seconds)
        await real_rest(self, seconds)

    monkeypatch.setattr(HttpStream, "rest", counted_rest)
    text = "a steady answer in many small deltas " * 4

    async def answers() -> list[str]:
        async with gateway([text_reply(text, delay_between_chunks=0.001) for _ in range(3)]) as (
            client,
            _,
            _,
        ):
            runs = [stream_events(client, {"model": "m", "input": "hi"}) for _ in range(3)]
            done = await asyncio.gather(*runs)
        return [events[-1]["response"]["output"][0]["content"][0]["text"] for events in done]

    assert await answers() == [text] * 3
    assert rests == []  # three streams: nobody rests
    monkeypatch.setattr(scheduler_module, "REST_ABOVE", 1)
    assert await answers() == [text] * 3
    assert rests and set(rests) == {scheduler_module.REST}


async def test_a_flood_of_new_work_slows_started_streams_but_does_not_stall_them() -> None:
    """Passes made long by new streams' work shrink the batch to its floor: a thirty-second of
    the queue, so every queued stream still gets a turn within 32 passes."""
    turns = ReadScheduler(asyncio.get_running_loop())
    units: list[int] = []
    stop = asyncio.Event()

    passes = [0]

    async def flood() -> None:  # new streams' steps: 5 ms of work in every pass
        while not stop.is_set():
            _work(0.005)
            passes[0] += 1
            await asyncio.sleep(0)

    flooding = asyncio.create_task(flood())
    streams = [asyncio.create_task(_steady(turns, units, i, stop)) for i in range(128)]
    await until(lambda: passes[0] >= 150, 60)  # one turn each per pass would be ~1
    stop.set()
    await asyncio.gather(flooding, *streams)
    assert min(units.count(i) for i in range(128)) >= 3
