"""The contract of store/meter.py, held by every meter: each test runs against the SQLite, Redis
and PostgreSQL stores' meters (conftest.py), the process-local MemoryMeter too where one process
is enough. Times are given, never read: a window is 60 s from t=6000 (window 100), a day is
day 0 unless said."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from codexgate.store import meter_of
from codexgate.store.meter import (
    MAX_CONCURRENT,
    REQUESTS_PER_MINUTE,
    TOKENS_PER_DAY,
    TOKENS_PER_MINUTE,
    Admit,
    Charge,
    KeyLimits,
    MemoryMeter,
    Meter,
    UsageRow,
)
from tests.store.conftest import backend_for

T0 = 6000.0  # the start of window 100 (60 s windows), day 0
WINDOW = 60.0

MakeMeter = Callable[[], Awaitable[Meter]]


@pytest.fixture(params=["sqlite", "redis", "postgres", "memory"])
async def new_meter(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[MakeMeter]:
    """Makes meters on one storage, as several gateway processes would (memory: one only)."""
    if request.param == "memory":
        only = MemoryMeter()

        async def same() -> Meter:
            return only

        yield same
        return
    backend = backend_for(request.param, request, tmp_path)

    meters: list[Meter] = []

    async def make() -> Meter:
        meter = meter_of(await backend.open())
        await meter.open()
        meters.append(meter)
        return meter

    yield make
    for made in meters:
        await made.close()
    for store in backend.made:
        await store.close()


@pytest.fixture
async def meter(new_meter: MakeMeter) -> Meter:
    return await new_meter()


def ask(limits: KeyLimits, now: float = T0, key: str = "alice", lease: str = "", until: float = 0.0) -> Admit:
    return Admit(key, limits, now, WINDOW, lease, until or now + 60)


async def test_requests_past_the_limit_are_refused_until_the_next_window(meter: Meter) -> None:
    limits = KeyLimits(requests_per_minute=3)
    verdicts = [await meter.admit(ask(limits, T0 + n)) for n in range(5)]
    assert [v.refused for v in verdicts] == [None, None, None, REQUESTS_PER_MINUTE, REQUESTS_PER_MINUTE]
    assert [v.minute_requests for v in verdicts] == [1, 2, 3, 3, 3]
    assert (await meter.admit(ask(limits, T0 + WINDOW))).minute_requests == 1  # a new window
    assert (await meter.admit(ask(limits, T0 + 5, key="bob"))).admitted  # each key its own


async def test_a_clock_behind_counts_into_the_newer_window(meter: Meter) -> None:
    limits = KeyLimits(requests_per_minute=2)
    assert (await meter.admit(ask(limits, T0 + WINDOW))).admitted  # window 101 opened
    assert (await meter.admit(ask(limits, T0 + WINDOW - 0.5))).minute_requests == 2  # 100: into 101
    assert (await meter.admit(ask(limits, T0 + WINDOW - 0.5))).refused == REQUESTS_PER_MINUTE


async def test_processes_sharing_a_store_admit_exactly_the_limit_together(new_meter: MakeMeter) -> None:
    meters = [await new_meter() for _ in range(3)]
    limits = KeyLimits(requests_per_minute=25)
    verdicts = await asyncio.gather(*(meters[n % 3].admit(ask(limits, T0 + n / 100)) for n in range(60)))
    assert sum(v.admitted for v in verdicts) == 25
    assert sorted(v.minute_requests for v in verdicts if v.admitted) == list(range(1, 26))


async def test_leases_bound_the_responses_in_flight(meter: Meter) -> None:
    limits = KeyLimits(max_concurrent=2)
    first, second = [await meter.admit(ask(limits, lease=name)) for name in ("a", "b")]
    assert (first.in_flight, second.in_flight) == (1, 2)
    third = await meter.admit(ask(limits, lease="c"))
    assert (third.refused, third.in_flight) == (MAX_CONCURRENT, 2)
    await meter.release("alice", "a")
    await meter.release("alice", "a")  # twice: nothing more happens
    assert (await meter.admit(ask(limits, lease="c"))).in_flight == 2
    assert (await meter.admit(ask(limits, lease="d"))).refused == MAX_CONCURRENT


async def test_a_lease_not_renewed_expires(meter: Meter) -> None:
    limits = KeyLimits(max_concurrent=1)
    assert (await meter.admit(ask(limits, lease="a", until=T0 + 30))).admitted
    assert (await meter.admit(ask(limits, T0 + 29, lease="b"))).refused == MAX_CONCURRENT
    await meter.renew([("alice", "a"), ("alice", "gone")], T0 + 90)
    assert (await meter.admit(ask(limits, T0 + 60, lease="b"))).refused == MAX_CONCURRENT
    assert (await meter.admit(ask(limits, T0 + 91, lease="b"))).admitted  # a's lease ran out


async def test_spent_tokens_refuse_past_the_minute_and_the_day(meter: Meter) -> None:
    limits = KeyLimits(tokens_per_minute=1000, tokens_per_day=1500)
    assert (await meter.admit(ask(limits))).admitted
    await meter.charge([Charge("alice", 100, 0, 600)], [])
    assert (await meter.admit(ask(limits))).minute_tokens == 600
    await meter.charge([Charge("alice", 100, 0, 400)], [])
    verdict = await meter.admit(ask(limits))
    assert (verdict.refused, verdict.minute_tokens, verdict.day_tokens) == (TOKENS_PER_MINUTE, 1000, 1000)
    assert (await meter.admit(ask(limits, T0 + WINDOW))).admitted  # the next window
    await meter.charge([Charge("alice", 99, 0, 500)], [])  # late, for a past window: the day only
    verdict = await meter.admit(ask(limits, T0 + WINDOW))
    assert (verdict.refused, verdict.minute_tokens, verdict.day_tokens) == (TOKENS_PER_DAY, 0, 1500)
    assert (await meter.admit(ask(limits, T0 + 86_400))).admitted  # the next day


async def test_charges_of_several_windows_and_keys_in_one_batch(meter: Meter) -> None:
    charges = [Charge("alice", 100, 0, 10), Charge("alice", 101, 0, 20), Charge("bob", 100, 0, 5)]
    await meter.charge(charges, [])
    limits = KeyLimits(tokens_per_minute=1000)
    alice = await meter.admit(ask(limits, T0 + WINDOW))
    assert (alice.minute_tokens, alice.day_tokens) == (20, 30)
    assert (await meter.admit(ask(limits, key="bob"))).minute_tokens == 5


def row(key: str, date: str, model: str = "coder", n: int = 1, face: str = "responses") -> UsageRow:
    return UsageRow(key, date, model, "local", face, n, 100 * n, 50 * n, 10 * n, 3 * n)


async def test_the_ledger_sums_rows_and_answers_by_key_and_dates(meter: Meter) -> None:
    await meter.charge([], [row("alice", "2026-03-01"), row("bob", "2026-03-01"), row("alice", "2026-03-02")])
    await meter.charge([], [row("alice", "2026-03-01", n=2), row("alice", "2026-03-01", "codex")])
    alice = await meter.usage("alice", "2026-03-01", "2026-03-01")
    assert alice == [row("alice", "2026-03-01", n=3), row("alice", "2026-03-01", "codex")]
    every = await meter.usage(None, "2026-02-01", "2026-03-31")
    assert [(r.date, r.key, r.model) for r in every] == [
        ("2026-03-01", "alice", "coder"), ("2026-03-01", "alice", "codex"), ("2026-03-01", "bob", "coder"),
        ("2026-03-02", "alice", "coder"),
    ]  # fmt: skip
    await meter.prune("2026-03-02")
    assert [r.date for r in await meter.usage(None, "2026-01-01", "2026-12-31")] == ["2026-03-02"]


async def test_rows_of_two_faces_stay_apart_and_each_sums_its_own(meter: Meter) -> None:
    """The same key, route and upstream on one day, spoken to through two faces: two rows."""
    await meter.charge([], [row("alice", "2026-03-01", face="messages"), row("alice", "2026-03-01")])
    await meter.charge(
        [], [row("alice", "2026-03-01", n=2, face="messages"), row("alice", "2026-03-01", n=4)]
    )
    await meter.charge([], [row("alice", "2026-03-01", face="chat"), row("alice", "2026-03-01", face="")])
    assert await meter.usage("alice", "2026-03-01", "2026-03-01") == [
        row("alice", "2026-03-01", face=""),  # a face not known sorts first
        row("alice", "2026-03-01", face="chat"),
        row("alice", "2026-03-01", n=3, face="messages"),
        row("alice", "2026-03-01", n=5, face="responses"),
    ]


async def test_names_with_separators_survive_the_ledger(meter: Meter) -> None:
    odd = UsageRow("a b:c", "2026-03-01", "m/o del%20", "up stream", "fa ce%3A", 1, 2, 0, 3, 0)
    await meter.charge([], [odd])
    assert await meter.usage("a b:c", "2026-03-01", "2026-03-01") == [odd]


async def test_sqlite_admits_without_waiting_on_the_loop_when_another_writer_holds_the_file(
    tmp_path: Path,
) -> None:
    """The event loop's connection takes the lock only when it is free at once; held by another
    process, the admission waits on the writer thread while the loop goes on."""
    import sqlite3

    from codexgate.store.base import Retention
    from codexgate.store.sqlite import SqliteStore

    store = SqliteStore(tmp_path / "s.sqlite3", Retention())
    await store.open()
    meter = meter_of(store)
    await meter.open()
    other = sqlite3.connect(tmp_path / "s.sqlite3", isolation_level=None)
    try:
        limits = KeyLimits(requests_per_minute=5)
        assert (await meter.admit(ask(limits))).minute_requests == 1  # the lock was free: at once
        other.execute("BEGIN IMMEDIATE")  # another process writing
        waiting = asyncio.ensure_future(meter.admit(ask(limits)))
        ticks = 0
        while ticks < 20:  # the loop runs on meanwhile
            await asyncio.sleep(0.005)
            ticks += 1
        assert not waiting.done()
        other.execute("COMMIT")
        assert (await asyncio.wait_for(waiting, 5)).minute_requests == 2
    finally:
        other.close()
        await meter.close()
        await store.close()
