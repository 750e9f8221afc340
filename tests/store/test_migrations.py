"""Schema migrations (store/sqlite.py and store/postgres.py `migrate`): applied in order, each
recorded by name in the transaction that applies it, never applied twice, and one that fails
undoes itself with the record of those before it in the same transaction."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import asyncpg
import pytest

from codexgate.store import postgres, sqlite


def _sqlite_step(sql: str) -> Callable[[sqlite3.Connection], None]:
    def step(conn: sqlite3.Connection) -> None:
        conn.execute(sql)

    return step


def test_sqlite_applies_what_is_not_recorded_in_order_and_records_it(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "m.db", isolation_level=None)
    first = [("one", _sqlite_step("CREATE TABLE t (a TEXT)"))]
    later = [*first, ("two", _sqlite_step("ALTER TABLE t ADD COLUMN b TEXT"))]
    try:
        conn.execute("BEGIN IMMEDIATE")
        assert sqlite.migrate(conn, first) == ["one"]
        conn.execute("COMMIT")
        conn.execute("BEGIN IMMEDIATE")
        assert sqlite.migrate(conn, later) == ["two"]  # "one" is not run again (its table exists)
        assert sqlite.migrate(conn, later) == []
        conn.execute("COMMIT")
        assert [row[1] for row in conn.execute("PRAGMA table_info(t)")] == ["a", "b"]
        assert [name for (name,) in conn.execute("SELECT name FROM migrations ORDER BY name")] == [
            "one",
            "two",
        ]
    finally:
        conn.close()


def test_sqlite_a_failing_migration_is_undone_with_its_transaction(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "m.db", isolation_level=None)
    steps = [
        ("one", _sqlite_step("CREATE TABLE t (a TEXT)")),
        ("two", _sqlite_step("ALTER TABLE nope ADD x")),
    ]
    try:
        conn.execute("BEGIN IMMEDIATE")
        with pytest.raises(sqlite3.OperationalError):
            sqlite.migrate(conn, steps)
        conn.execute("ROLLBACK")
        assert (
            conn.execute("SELECT name FROM sqlite_master WHERE name IN ('t', 'migrations')").fetchall() == []
        )
    finally:
        conn.close()


async def test_postgres_applies_what_is_not_recorded_in_order_and_records_it(postgres_dsn: str) -> None:
    conn = await asyncpg.connect(postgres_dsn)
    first = [("one", "CREATE TABLE t (a TEXT)")]
    later = [*first, ("two", "ALTER TABLE t ADD COLUMN b TEXT")]
    try:
        async with conn.transaction():
            assert await postgres.migrate(conn, first) == ["one"]
        async with conn.transaction():
            assert await postgres.migrate(conn, later) == ["two"]
            assert await postgres.migrate(conn, later) == []
        with pytest.raises(asyncpg.UndefinedTableError):
            async with conn.transaction():
                await postgres.migrate(conn, [*later, ("three", "ALTER TABLE nope ADD x TEXT")])
        columns = await conn.fetch(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 't'"
        )
        assert sorted(row[0] for row in columns) == ["a", "b"]
        names = await conn.fetch("SELECT name FROM codexgate_migrations ORDER BY name")
        assert [row[0] for row in names] == ["one", "two"]
    finally:
        await conn.close()
