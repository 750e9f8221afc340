"""A store whose ledger was written by a release before the ledger recorded faces: the meter
opens it, its rows are read with the face not known (meter.UNKNOWN_FACE, ""), new rows of the
same key, route and upstream stay apart from them, and its counters count on. On SQLite and
PostgreSQL that is a migration (store/sqlite.py, store/postgres.py `migrate`), applied once
however many gateways open the store at once and recorded; on Redis, fields of the old shape.

The old tables are made here with that release's SQL (as it was, not as the code now reads)."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from codexgate.store import meter_of
from codexgate.store.meter import UNKNOWN_FACE, Admit, KeyLimits, Meter, UsageRow
from codexgate.store.postgres import PostgresStore
from codexgate.store.redis import RedisStore
from codexgate.store.sqlite import SqliteStore
from tests.store.conftest import Backend, backend_for

# The meter's SQLite tables before faces (store/sqlite_meter.py at f3cd815).
OLD_SQLITE = (
    """CREATE TABLE IF NOT EXISTS key_state (
        key TEXT PRIMARY KEY, minute INTEGER NOT NULL, minute_requests INTEGER NOT NULL,
        minute_tokens INTEGER NOT NULL, day INTEGER NOT NULL, day_tokens INTEGER NOT NULL
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS key_leases (
        key TEXT NOT NULL, lease TEXT NOT NULL, expires_at REAL NOT NULL, PRIMARY KEY (key, lease)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS usage (
        date TEXT NOT NULL, key TEXT NOT NULL, model TEXT NOT NULL, upstream TEXT NOT NULL,
        requests INTEGER NOT NULL, input_tokens INTEGER NOT NULL, cached_tokens INTEGER NOT NULL,
        output_tokens INTEGER NOT NULL, reasoning_tokens INTEGER NOT NULL,
        PRIMARY KEY (date, key, model, upstream)
    ) WITHOUT ROWID""",
)

# The meter's PostgreSQL tables before faces (store/postgres_meter.py at f3cd815).
OLD_POSTGRES = """
CREATE TABLE IF NOT EXISTS codexgate_key_state (
    key TEXT PRIMARY KEY, minute BIGINT NOT NULL DEFAULT 0,
    minute_requests BIGINT NOT NULL DEFAULT 0, minute_tokens BIGINT NOT NULL DEFAULT 0,
    day BIGINT NOT NULL DEFAULT 0, day_tokens BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS codexgate_key_leases (
    key TEXT NOT NULL, lease TEXT NOT NULL, expires_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (key, lease)
);
CREATE TABLE IF NOT EXISTS codexgate_usage (
    date TEXT NOT NULL, key TEXT NOT NULL, model TEXT NOT NULL, upstream TEXT NOT NULL,
    requests BIGINT NOT NULL, input_tokens BIGINT NOT NULL, cached_tokens BIGINT NOT NULL,
    output_tokens BIGINT NOT NULL, reasoning_tokens BIGINT NOT NULL,
    PRIMARY KEY (date, key, model, upstream)
);
"""

# What the old release had written: alice's day on two routes, and her minute's counters.
OLD_ROWS = [
    ("2026-03-01", "alice", "coder", "local", 3, 300, 150, 30, 9),
    ("2026-03-01", "alice", "other", "", 1, 10, 0, 5, 0),
]
MINUTE, DAY = 100, 0  # alice's window and day: 1 request, 70 tokens in each
OLD_STATE = ("alice", MINUTE, 1, 70, DAY, 70)


def old(date: str, key: str, model: str, upstream: str, *counts: int) -> UsageRow:
    return UsageRow(key, date, model, upstream, UNKNOWN_FACE, *counts)


async def write_old_ledger(backend: Backend, tmp_path: Path) -> None:
    """The store as the old release left it: its own tables, and the meter's of that release."""
    store = await backend.open()
    if isinstance(store, SqliteStore):
        conn = sqlite3.connect(store.path, isolation_level=None)
        try:
            for statement in OLD_SQLITE:
                conn.execute(statement)
            conn.executemany("INSERT INTO usage VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", OLD_ROWS)
            conn.execute("INSERT INTO key_state VALUES (?, ?, ?, ?, ?, ?)", OLD_STATE)
        finally:
            conn.close()
    elif isinstance(store, PostgresStore):
        conn = await asyncpg.connect(store.dsn)
        try:
            await conn.execute(OLD_POSTGRES)
            await conn.executemany(
                "INSERT INTO codexgate_usage VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)", OLD_ROWS
            )
            await conn.execute("INSERT INTO codexgate_key_state VALUES ($1, $2, $3, $4, $5, $6)", *OLD_STATE)
        finally:
            await conn.close()
    else:  # Redis: the fields "{key} {model} {upstream} {n}" of the day's hash
        assert isinstance(store, RedisStore)
        db, prefix = store._db, store.prefix
        for date, key, model, upstream, *counts in OLD_ROWS:
            for n, count in enumerate(counts):
                await db.hincrby(f"{prefix}u:{date}", f"{key} {model} {upstream} {n}", count)
            await db.zadd(f"{prefix}u", {date: dt.date.fromisoformat(date).toordinal()})
        key, minute, requests, tokens, day, day_tokens = OLD_STATE
        await db.hset(f"{prefix}k:{key}", mapping={"m": minute, "mr": requests, "mt": tokens, "d": day,
                                                    "dt": day_tokens})  # fmt: skip


async def migrations_recorded(backend: Backend) -> list[str]:
    store = backend.made[0]
    if isinstance(store, SqliteStore):
        conn = sqlite3.connect(store.path)
        try:
            return [name for (name,) in conn.execute("SELECT name FROM migrations ORDER BY applied_at, name")]
        finally:
            conn.close()
    assert isinstance(store, PostgresStore)
    conn = await asyncpg.connect(store.dsn)
    try:
        rows = await conn.fetch("SELECT name FROM codexgate_migrations ORDER BY applied_at, name")
        return [row[0] for row in rows]
    finally:
        await conn.close()


@pytest.fixture(params=["sqlite", "redis", "postgres"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    made = backend_for(request.param, request, tmp_path)
    yield made
    for store in made.made:
        await store.close()


@pytest.fixture
async def meters(backend: Backend) -> AsyncIterator[list[Meter]]:
    """The meters a test opened, closed before their stores."""
    opened: list[Meter] = []
    yield opened
    for meter in opened:
        await meter.close()


async def new_meter(backend: Backend, meters: list[Meter]) -> Meter:
    """A gateway's meter on the backend's storage, not yet opened."""
    meter = meter_of(await backend.open())
    meters.append(meter)
    return meter


async def test_rows_of_the_release_before_faces_are_read_with_the_face_not_known(
    backend: Backend, meters: list[Meter], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await write_old_ledger(backend, tmp_path)
    caplog.set_level(logging.INFO, "codexgate.store")
    meter = await new_meter(backend, meters)
    await meter.open()
    assert await meter.usage("alice", "2026-03-01", "2026-03-01") == [old(*row) for row in OLD_ROWS]
    new = UsageRow("alice", "2026-03-01", "coder", "local", "responses", 1, 100, 50, 10, 3)
    await meter.charge([], [new, UsageRow("alice", "2026-03-01", "coder", "local", "", 1, 1, 0, 1, 0)])
    assert await meter.usage(None, "2026-03-01", "2026-03-01") == [
        old("2026-03-01", "alice", "coder", "local", 4, 301, 150, 31, 9),  # a face not known sums with them
        new,
        old(*OLD_ROWS[1]),
    ]
    # Its counters count on: the window's one request and 70 tokens are still there.
    verdict = await meter.admit(Admit("alice", KeyLimits(requests_per_minute=5), MINUTE * 60.0 + 1, 60.0))
    assert (verdict.minute_requests, verdict.minute_tokens, verdict.day_tokens) == (2, 70, 70)
    if backend.kind != "redis":
        assert await migrations_recorded(backend) == ["meter_tables", "usage_face"]
        said = [r.getMessage() for r in caplog.records if r.name == "codexgate.store"]
        assert [line.rsplit(" ", 2)[-2] for line in said] == ["meter_tables", "usage_face"], said


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)  # Redis has no schema
async def test_gateways_opening_an_old_store_at_once_migrate_it_once(
    backend: Backend, meters: list[Meter], tmp_path: Path
) -> None:
    await write_old_ledger(backend, tmp_path)
    gateways = [await new_meter(backend, meters) for _ in range(3)]
    await asyncio.gather(*(meter.open() for meter in gateways))
    await gateways[2].close()
    await gateways[2].open()  # opened again: nothing left to apply
    assert await migrations_recorded(backend) == ["meter_tables", "usage_face"]
    for meter in gateways:
        assert await meter.usage(None, "2026-03-01", "2026-03-01") == [old(*row) for row in OLD_ROWS]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_a_new_store_gets_the_ledger_with_faces_and_records_its_migrations(
    backend: Backend, meters: list[Meter]
) -> None:
    meter = await new_meter(backend, meters)
    await meter.open()
    rows = [UsageRow("bob", "2026-03-02", "coder", "local", face, 1, 2, 0, 3, 0)
                       for face in ("messages", "chat")]  # fmt: skip
    await meter.charge([], rows)
    assert await meter.usage("bob", "2026-03-02", "2026-03-02") == sorted(rows, key=lambda r: r.face)
    assert await migrations_recorded(backend) == ["meter_tables", "usage_face"]
