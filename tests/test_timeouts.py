"""codexgate.timeouts: asyncio.timeout's meaning with one shared loop timer. Each test waits at
most a fraction of a second."""

from __future__ import annotations

import asyncio

import pytest

from codexgate import timeouts


async def test_a_block_that_outlasts_its_deadline_raises_timeout_error() -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError):
        with timeouts.timeout(0.05) as scope:
            await asyncio.sleep(5)
    assert scope.expired()
    assert 0.04 <= loop.time() - started < 1.0
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_a_block_that_ends_in_time_is_left_alone_and_its_timer_fires_harmlessly() -> None:
    with timeouts.timeout(0.2) as scope:  # wide: a loaded machine may pause the loop a while
        await asyncio.sleep(0)
    assert not scope.expired()
    await asyncio.sleep(0.25)  # the shared timer fires with nothing due
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
    await asyncio.sleep(0)  # and no stray cancellation reaches this task


async def test_an_earlier_deadline_opened_later_fires_first() -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    with timeouts.timeout(5) as outer:
        with pytest.raises(TimeoutError):
            with timeouts.timeout(0.05) as inner:
                await asyncio.sleep(5)
        assert inner.expired() and not outer.expired()
    assert loop.time() - started < 1.0


async def test_the_timer_re_arms_for_later_deadlines_once_earlier_ones_are_gone() -> None:
    with timeouts.timeout(0.01):
        pass  # leaves the timer armed at 10 ms with nothing open
    with pytest.raises(TimeoutError):
        with timeouts.timeout(0.08):
            await asyncio.sleep(5)


async def test_concurrent_tasks_each_get_their_own_deadline() -> None:
    async def wait(deadline: float, sleep: float) -> str:
        try:
            with timeouts.timeout(deadline):
                await asyncio.sleep(sleep)
        except TimeoutError:
            return "timed out"
        return "done"

    # 0.1 s either side of the sleep: a loaded machine may pause the loop a while.
    results = await asyncio.gather(*(wait((0.05, 0.3, 0.6)[i % 3], 0.15) for i in range(30)))
    assert results == ["timed out", "done", "done"] * 10


async def test_someone_elses_cancellation_goes_on_as_cancellation() -> None:
    entered = asyncio.Event()

    async def waiting() -> None:
        with timeouts.timeout(5):
            entered.set()
            await asyncio.sleep(5)

    task = asyncio.create_task(waiting())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_cancellation_that_comes_with_the_deadline_is_not_swallowed() -> None:
    """Both fired before the task ran again: its owner asked to cancel too, so cancellation wins
    (as asyncio's)."""
    opened: list[timeouts.Timeout] = []

    async def waiting() -> None:
        with timeouts.timeout(5) as scope:
            opened.append(scope)
            await asyncio.sleep(5)

    task = asyncio.create_task(waiting())
    await asyncio.sleep(0)
    opened[0].expire()  # as the shared timer does when due
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_no_deadline_and_a_deadline_in_the_past() -> None:
    with timeouts.timeout(None) as scope:
        await asyncio.sleep(0.01)
    assert not scope.expired()
    loop = asyncio.get_running_loop()
    with pytest.raises(TimeoutError):
        with timeouts.timeout_at(loop.time() - 1):
            await asyncio.sleep(1)


def test_outside_a_task_it_is_refused() -> None:
    with pytest.raises(RuntimeError):
        timeouts.timeout_at(1.0).__enter__()
