"""The meter (store/meter.py) in the SQLite store's file: every gateway process on the machine
(`serve --workers N`, several `serve`s on one file) counts in the same tables.

An admission runs on the store's writer thread inside its write transaction (BEGIN IMMEDIATE
takes the file's write lock), so the read and the update of a key's counters are one step for
every process; admissions that arrive together share one commit with whatever else the writer
had pending. Reads of the ledger run on the store's readers.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

from codexgate.store.meter import Admit, Charge, KeyState, UsageRow, Verdict, decide

if TYPE_CHECKING:
    from codexgate.store.sqlite import SqliteStore

_SCHEMA = (
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

_STATE_COLUMNS = "minute, minute_requests, minute_tokens, day, day_tokens"
_SAVE_STATE = (
    f"INSERT INTO key_state (key, {_STATE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO UPDATE"
    " SET minute = excluded.minute, minute_requests = excluded.minute_requests,"
    " minute_tokens = excluded.minute_tokens, day = excluded.day, day_tokens = excluded.day_tokens"
)
_ADD_USAGE = (
    "INSERT INTO usage VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (date, key, model, upstream) DO UPDATE"
    " SET requests = requests + excluded.requests, input_tokens = input_tokens + excluded.input_tokens,"
    " cached_tokens = cached_tokens + excluded.cached_tokens,"
    " output_tokens = output_tokens + excluded.output_tokens,"
    " reasoning_tokens = reasoning_tokens + excluded.reasoning_tokens"
)
_USAGE = (
    "SELECT key, date, model, upstream, requests, input_tokens, cached_tokens, output_tokens,"
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


class SqliteMeter:
    def __init__(self, store: SqliteStore) -> None:
        self._store = store

    async def open(self) -> None:
        def create(conn: sqlite3.Connection) -> None:
            for statement in _SCHEMA:  # one by one: executescript would commit the writer's transaction
                conn.execute(statement)

        await self._store._write(create)

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

        return await self._store._write(admit)

    async def release(self, key: str, lease: str) -> None:
        def release(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM key_leases WHERE key = ? AND lease = ?", (key, lease))

        await self._store._write(release)

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
            order = " ORDER BY date, key, model, upstream"
            return [UsageRow(*row) for row in conn.execute(f"{_USAGE} WHERE {where}{order}", params)]

        return await self._store._read(usage)

    async def prune(self, before: str) -> None:
        def prune(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM usage WHERE date < ?", (before,))

        await self._store._write(prune)
