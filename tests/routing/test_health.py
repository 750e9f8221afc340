"""Members' health (routing/health.py): cooling down with a growing backoff, half-open after it,
and a full member's queue served fairly across callers."""

from __future__ import annotations

import asyncio
import logging

import pytest

from codexgate.backends.base import ModelList
from codexgate.routing import health
from codexgate.routing.health import HealthBoard, MemberHealth


def test_a_failing_member_cools_down_longer_each_time_then_lets_one_request_try(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [100.0]
    monkeypatch.setattr(health.time, "monotonic", lambda: now[0])
    board = HealthBoard()
    member = board.member("a")
    assert board.can_take("a") and member.state == "usable"
    board.failed(member, "upstream_unreachable")
    assert member.state == "cooling" and not member.can_take() and board.cooldowns["a"] == 1
    now[0] += health.COOLDOWN_FIRST
    assert member.state == "probing" and member.can_take()  # half-open: one request may try
    slot = member.take()
    assert slot is not None and not member.can_take()  # the one trying is the only one
    slot.release()
    board.failed(member, "upstream_unreachable")
    now[0] += health.COOLDOWN_FIRST
    assert member.state == "cooling"  # twice as long the second time
    now[0] += health.COOLDOWN_FIRST
    member.succeeded()
    assert member.state == "usable" and member.failures == 0


async def test_a_full_members_freed_places_go_to_each_caller_in_turn() -> None:
    member = MemberHealth("a", max_concurrent=2)  # queues up to 8
    held, other = member.take(), member.take()
    assert held is not None and other is not None and member.take() is None
    served: list[str] = []

    async def request(caller: str) -> None:
        slot = await member.wait(caller, 10)
        assert slot is not None
        served.append(caller)
        await asyncio.sleep(0)
        slot.release()

    # One key queues five requests before another key queues its one.
    waiting = [asyncio.create_task(request("busy-key")) for _ in range(5)]
    await asyncio.sleep(0)
    waiting.append(asyncio.create_task(request("other-key")))
    await asyncio.sleep(0)
    assert member.queued == 6
    held.release()
    await asyncio.gather(*waiting)
    assert served.index("other-key") == 1  # right after the first of the busy key's, not sixth
    other.release()
    assert member.in_flight == 0


async def test_a_waiter_that_gives_up_passes_its_place_on() -> None:
    member = MemberHealth("a", max_concurrent=1)
    held = member.take()
    assert held is not None
    gone = asyncio.create_task(member.wait("x", 10))
    await asyncio.sleep(0)
    later = asyncio.create_task(member.wait("y", 10))
    await asyncio.sleep(0)
    gone.cancel()
    held.release()
    slot = await later
    assert slot is not None and member.in_flight == 1
    slot.release()
    assert member.in_flight == 0
    assert await member.wait("z", 0.01) is not None  # room again


async def test_a_full_line_or_a_long_wait_gives_no_place_and_another_key_still_waits() -> None:
    member = MemberHealth("a", max_concurrent=1)
    assert member.take() is not None
    assert await member.wait("x", 0.01) is None and member.queued == 0  # timed out, and gone
    waiters = [asyncio.create_task(member.wait("x", 10)) for _ in range(health.QUEUE_PER_SLOT)]
    await asyncio.sleep(0)
    assert member.queue_full("x") and await member.wait("x", 10) is None  # x's line is full
    other = asyncio.create_task(member.wait("y", 10))  # y still gets in line
    await asyncio.sleep(0)
    assert member.queued == health.QUEUE_PER_SLOT + 1 and not member.queue_full("y")
    member.hand_over()  # x was in line first
    member.hand_over()  # then y's turn, before x's other three
    assert await waiters[0] is not None and await other is not None
    for waiter in waiters:
        waiter.cancel()


def test_a_member_that_stays_down_is_logged_going_down_at_growing_intervals_and_coming_back(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="codexgate.routing")
    now = [0.0]
    monkeypatch.setattr(health.time, "monotonic", lambda: now[0])
    board = HealthBoard()
    member = board.member("a")
    for _ in range(2 * 60 * 2):  # two hours of probes every 30 s (the longest cooldown)
        board.failed(member, "upstream_unreachable: refused the connection")
        now[0] += 30
    member.succeeded()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert warnings[0].startswith("upstream a is down (upstream_unreachable: refused the connection)")
    # Reminders 1, 2, 4, 8, 16 and 32 minutes apart; the next would be an hour after the last.
    assert [w.split(" (")[0] for w in warnings[1:]] == [
        f"upstream a is still down after {span}"
        for span in ("1 min", "3 min", "7 min", "15 min", "31 min", "1 h 3 min")
    ]
    assert infos == ["upstream a answers again after 2 h down (240 failures): usable"]
    assert board.cooldowns["a"] == 240


async def test_the_probe_trusts_no_listing_from_before_the_last_failure() -> None:
    board = HealthBoard()
    member = board.member("a")
    board.failed(member, "upstream_unreachable")
    member.cooling_until = 0.0  # the cooldown is over: half-open, the probe asks
    listings = [
        ModelList("http://a", 200, ["m"], checked_at=member.failed_at - 1),  # cached from before
        ModelList("http://a", 200, ["m"]),
    ]
    asked: list[ModelList] = []
    more = asyncio.Event()

    async def probe() -> ModelList:
        asked.append(listings[0] if len(asked) < 3 else listings[1])
        more.set()
        return asked[-1]

    board.watch("a", probe)
    health_every = health.PROBE_EVERY
    health.PROBE_EVERY = 0.001
    try:
        board.start()
        async with asyncio.timeout(5):
            while len(asked) < 3:
                await more.wait()
                more.clear()
            assert member.state == "probing"  # three stale listings: no news either way
            while member.state != "usable":
                await more.wait()
                more.clear()
    finally:
        health.PROBE_EVERY = health_every
        await board.aclose()
    assert member.failures == 0 and member.listing is listings[1]
