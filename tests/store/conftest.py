"""Fixtures of the store's contract suite: each test runs once per implementation, on storage
of its own (a fresh SQLite file, a fresh Redis key prefix, a fresh PostgreSQL database) that
several store instances can open, as several gateway processes would.

The servers start on first use only, so running the SQLite tests alone starts none."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import asyncpg
import pytest

from codexgate.store.base import Retention, Store
from codexgate.store.postgres import PostgresStore
from codexgate.store.redis import RedisStore
from codexgate.store.sqlite import SqliteStore
from tests.store.servers import postgres_server, redis_server, run_async


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


@pytest.fixture(scope="session")
def postgres_admin_dsn() -> Iterator[str]:
    with postgres_server() as dsn:
        yield dsn


@pytest.fixture
def postgres_dsn(postgres_admin_dsn: str) -> Iterator[str]:
    """A database of this test's own on the session's cluster."""
    name = f"t_{uuid.uuid4().hex}"

    async def admin(sql: str) -> None:
        conn = await asyncpg.connect(postgres_admin_dsn)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    run_async(lambda: admin(f'CREATE DATABASE "{name}"'))
    yield postgres_admin_dsn.rsplit("/", 1)[0] + "/" + name
    run_async(lambda: admin(f'DROP DATABASE "{name}" WITH (FORCE)'))


class Backend:
    """Makes store instances on one test's storage."""

    def __init__(self, kind: str, factory: Callable[[Retention], Store]) -> None:
        self.kind = kind
        self._factory = factory
        self.made: list[Store] = []

    def new(self, retention: Retention | None = None) -> Store:
        """A store instance, not yet opened."""
        store = self._factory(retention or Retention())
        self.made.append(store)
        return store

    async def open(self, retention: Retention | None = None) -> Store:
        store = self.new(retention)
        await store.open()
        return store


@pytest.fixture(params=["sqlite", "redis", "postgres"])
def backend_kind(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return backend_for(request.param, request, tmp_path)


def backend_for(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """Store instances of `kind` on storage of this test's own (its server started on first use)."""
    if kind == "sqlite":
        path = tmp_path / "data" / "store.sqlite3"
        return Backend(kind, lambda retention: SqliteStore(path, retention))
    if kind == "redis":
        url = request.getfixturevalue("redis_url")
        prefix = f"test-{uuid.uuid4().hex}:"
        return Backend(kind, lambda retention: RedisStore(url, retention, prefix=prefix))
    dsn = request.getfixturevalue("postgres_dsn")
    return Backend(kind, lambda retention: PostgresStore(dsn, retention))


@pytest.fixture
async def backend(backend_kind: Backend) -> AsyncIterator[Backend]:
    """The parametrized backend; every store it made is closed after the test (before the
    test's database is dropped)."""
    yield backend_kind
    for store in backend_kind.made:
        await store.close()


@pytest.fixture
async def store(backend: Backend) -> Store:
    return await backend.open()
