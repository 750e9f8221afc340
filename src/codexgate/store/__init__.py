"""The response store (see store/base.py): `open_store` picks the implementation by name.

Each implementation's driver is imported only when chosen, so a gateway on SQLite never loads
the Redis or PostgreSQL client.
"""

from __future__ import annotations

from pathlib import Path

from codexgate.store.base import Retention, Store, StoreError

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


__all__ = ["KINDS", "Retention", "Store", "StoreError", "open_store"]
