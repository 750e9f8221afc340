"""The response store (see store/base.py): `open_store` picks the implementation by name.

Each implementation's driver is imported only when chosen, so a gateway on SQLite never loads
the Redis or PostgreSQL client.
"""

from __future__ import annotations

from pathlib import Path

from codexgate.store.base import Retention, Store, StoreError
from codexgate.store.meter import MemoryMeter, Meter

KINDS = ("sqlite", "redis", "postgres")


def open_store(kind: str, *, path: Path | None, url: str | None, retention: Retention) -> Store:
    """The store of `kind`, built but not yet opened: `await store.open()` connects (and
    raises StoreError naming the server or file when it cannot)."""
    if kind == "sqlite":
        from codexgate.store.sqlite import SqliteStore, default_path

        return SqliteStore(path or default_path(), retention)
    if kind not in KINDS:
        raise StoreError(f"unknown store {kind!r}: use one of {', '.join(KINDS)}")
    if not url:
        example = "redis://localhost:6379/0" if kind == "redis" else "postgresql://user@localhost/codexgate"
        raise StoreError(f"the {kind} store needs a URL (store_url), such as {example}")
    if kind == "redis":
        from codexgate.store.redis import RedisStore

        return RedisStore(url, retention)
    from codexgate.store.postgres import PostgresStore

    return PostgresStore(url, retention)


def meter_of(store: Store | None) -> Meter:
    """The meter (store/meter.py) that counts where `store` keeps its data, not yet opened; a
    process's own without a store."""
    if store is None:
        return MemoryMeter()
    if store.name == "sqlite":
        from codexgate.store.sqlite import SqliteStore
        from codexgate.store.sqlite_meter import SqliteMeter

        assert isinstance(store, SqliteStore)
        return SqliteMeter(store)
    if store.name == "redis":
        from codexgate.store.redis import RedisStore
        from codexgate.store.redis_meter import RedisMeter

        assert isinstance(store, RedisStore)
        return RedisMeter(store)
    from codexgate.store.postgres import PostgresStore
    from codexgate.store.postgres_meter import PostgresMeter

    assert isinstance(store, PostgresStore)
    return PostgresMeter(store)


__all__ = ["KINDS", "Meter", "Retention", "Store", "StoreError", "meter_of", "open_store"]
