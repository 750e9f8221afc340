"""The meter (store/meter.py) in the SQLite store's file: every gateway process on the machine
(`serve --workers N`, several `serve`s on one file) counts in the same tables.

An admission is one write transaction (BEGIN IMMEDIATE takes the file's write lock), so the read
and the update of a key's counters are one step for every process. It runs at once on the event
loop's own connection when the lock is free (some 30 us: a handful of statements and a commit
to the WAL, no fsync), and otherwise, when another writer holds the lock (another process, or
this one's writer thread committing responses), on the store's writer thread, which waits for
it (busy_timeout) and shares its commit with whatever else it had pending: the event loop never
waits for a lock. That connection never checkpoints (wal_autocheckpoint = 0): the writer
thread's commits do, as the usage written every second, so the loop never waits on an fsync.
Reads of the ledger run on the store's readers.

The tables are made and changed by the migrations in MIGRATIONS (store/sqlite.py `migrate`),
when the meter opens.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from typing import TypeVar

from codexgate.store.base import StoreError
from codexgate.store.meter import Admit, Charge, KeyState, UsageRow, Verdict, decide
from codexgate.store.sqlite import Migration, SqliteStore, migrate

log = logging.getLogger("codexgate.store")

# The meter's tables as first released (CREATE ... IF NOT EXISTS: a file made by a release
# before migrations has them already, and only the record is added).
_TABLES = (
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

_USAGE_WITH_FACE = """CREATE TABLE usage_with_face (
    date TEXT NOT NULL, key TEXT NOT NULL, model TEXT NOT NULL, upstream TEXT NOT NULL, face TEXT NOT NULL,
    requests INTEGER NOT NULL, input_tokens INTEGER NOT NULL, cached_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL, reasoning_tokens INTEGER NOT NULL,
    PRIMARY KEY (date, key, model, upstream, face)
) WITHOUT ROWID"""


def _create_tables(conn: sqlite3.Connection) -> None:
    for statement in _TABLES:  # one by one: executescript would commit the writer's transaction
        conn.execute(statement)


def _usage_face(conn: sqlite3.Connection) -> None:
    """The face becomes part of a row's key. SQLite cannot change a primary key in place: the
    rows move to a table that has it, with the face not known, '' (meter.UNKNOWN_FACE: they
    were written before)."""
    conn.execute(_USAGE_WITH_FACE)
    conn.execute(
        "INSERT INTO usage_with_face SELECT date, key, model, upstream, '', requests, input_tokens,"
        " cached_tokens, output_tokens, reasoning_tokens FROM usage"
    )
    conn.execute("DROP TABLE usage")
    conn.execute("ALTER TABLE usage_with_face RENAME TO usage")


# Forward only (store/sqlite.py `migrate`): a change to the meter's tables is a new line here.
MIGRATIONS: tuple[Migration, ...] = (
    ("meter_tables", _create_tables),
    ("usage_face", _usage_face),
)

_STATE_COLUMNS = "minute, minute_requests, minute_tokens, day, day_tokens"
_SAVE_STATE = (
    f"INSERT INTO key_state (key, {_STATE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO UPDATE"
    " SET minute = excluded.minute, minute_requests = excluded.minute_requests,"
    " minute_tokens = excluded.minute_tokens, day = excluded.day, day_tokens = excluded.day_tokens"
)
_ADD_USAGE = (
    "INSERT INTO usage (date, key, model, upstream, face, requests, input_tokens, cached_tokens,"
    " output_tokens, reasoning_tokens) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (date, key, model, upstream, face) DO UPDATE"
    " SET requests = requests + excluded.requests, input_tokens = input_tokens + excluded.input_tokens,"
    " cached_tokens = cached_tokens + excluded.cached_tokens,"
    " output_tokens = output_tokens + excluded.output_tokens,"
    " reasoning_tokens = reasoning_tokens + excluded.reasoning_tokens"
)
_USAGE = (
    "SELECT key, date, model, upstream, face, requests, input_tokens, cached_tokens, output_tokens,"
    " reasoning_tokens FROM usage"
)


def _state(conn: sqlite3.Connection, key: str) -> KeyState:
    row = conn.execute(f"SELECT {_STATE_COLUMNS} FROM key_state WHERE key = ?", (key,)).fetchone()
    return KeyState() if row is None else KeyState(*row)


def _save(conn: sqlite3.Connection, key: str, state: KeyState) -> None:
    conn.execute(
        _SAVE_STATE,
        (key, state.minute, state.minute_requests, state.minute_tokens, state.day, state.day_tokens),
    )


T = TypeVar("T")


class SqliteMeter:
    def __init__(self, store: SqliteStore) -> None:
        self._store = store
        self._now: sqlite3.Connection | None = None  # the event loop's own, for writes that need no wait

    async def open(self) -> None:
        applied = await self._store._write(lambda conn: migrate(conn, MIGRATIONS))
        for name in applied:
            log.info("the SQLite store at %s: migration %s applied", self._store.path, name)
        if self._now is None:
            conn = sqlite3.connect(self._store.path, isolation_level=None)
            conn.execute("PRAGMA busy_timeout = 0")  # a lock held elsewhere: the writer thread waits
            conn.execute("PRAGMA wal_autocheckpoint = 0")
            conn.execute("PRAGMA synchronous = NORMAL")  # as the writer's: a commit to the WAL, no fsync
            self._now = conn

    async def close(self) -> None:
        if self._now is not None:
            self._now.close()
            self._now = None

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """`fn` in a write transaction: at once when the file's write lock is free, else on the
        writer thread. Raises StoreError."""
        conn = self._now
        if conn is not None:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError:  # locked by another writer: the writer thread waits for it
                pass
            else:
                try:
                    result = fn(conn)
                    conn.execute("COMMIT")
                    return result
                except BaseException as exc:
                    conn.execute("ROLLBACK")
                    if isinstance(exc, sqlite3.Error):
                        where = self._store.path
                        raise StoreError(f"cannot count in the SQLite store at {where}: {exc}") from exc
                    raise
        return await self._store._write(fn)

    async def admit(self, ask: Admit) -> Verdict:
        def admit(conn: sqlite3.Connection) -> Verdict:
            state = _state(conn, ask.key).rolled(ask.minute, ask.day)
            in_flight = 0
            if ask.limits.max_concurrent is not None:
                conn.execute("DELETE FROM key_leases WHERE key = ? AND expires_at < ?", (ask.key, ask.now))
                counted = conn.execute("SELECT COUNT(*) FROM key_leases WHERE key = ?", (ask.key,))
                in_flight = counted.fetchone()[0]
            verdict, state = decide(state, in_flight, ask)
            if verdict.admitted:
                _save(conn, ask.key, state)
                if ask.limits.max_concurrent is not None:
                    lease = (ask.key, ask.lease, ask.lease_until)
                    conn.execute("INSERT OR REPLACE INTO key_leases VALUES (?, ?, ?)", lease)
            return verdict

        return await self._run(admit)

    async def release(self, key: str, lease: str) -> None:
        def release(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM key_leases WHERE key = ? AND lease = ?", (key, lease))

        await self._run(release)

    async def renew(self, leases: list[tuple[str, str]], until: float) -> None:
        def renew(conn: sqlite3.Connection) -> None:
            conn.executemany(
                "UPDATE key_leases SET expires_at = ? WHERE key = ? AND lease = ?",
                [(until, key, lease) for key, lease in leases],
            )

        await self._store._write(renew)

    async def charge(self, charges: list[Charge], rows: list[UsageRow]) -> None:
        def charge(conn: sqlite3.Connection) -> None:
            for spent in charges:
                _save(conn, spent.key, _state(conn, spent.key).charged(spent.minute, spent.day, spent.tokens))
            conn.executemany(_ADD_USAGE, [(*row.where, *row.counts()) for row in rows])

        await self._store._write(charge)

    async def usage(self, key: str | None, start: str, end: str) -> list[UsageRow]:
        def usage(conn: sqlite3.Connection) -> list[UsageRow]:
            where = "date >= ? AND date <= ?" + ("" if key is None else " AND key = ?")
            params = (start, end) if key is None else (start, end, key)
            order = " ORDER BY date, key, model, upstream, face"
            return [UsageRow(*row) for row in conn.execute(f"{_USAGE} WHERE {where}{order}", params)]

        return await self._store._read(usage)

    async def prune(self, before: str) -> None:
        def prune(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM usage WHERE date < ?", (before,))

        await self._store._write(prune)
