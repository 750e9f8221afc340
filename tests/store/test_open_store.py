"""`open_store` and the errors a user sees when the store cannot be used."""

from __future__ import annotations

from pathlib import Path

import pytest

from codexgate.store import open_store
from codexgate.store.base import Retention, StoreError
from codexgate.store.postgres import PostgresStore
from codexgate.store.redis import RedisStore
from codexgate.store.sqlite import SqliteStore, default_path
from tests.store import servers


def test_open_store_picks_the_implementation(tmp_path: Path) -> None:
    retention = Retention()
    sqlite = open_store("sqlite", path=tmp_path / "s.db", url=None, retention=retention)
    assert isinstance(sqlite, SqliteStore) and sqlite.path == tmp_path / "s.db"
    assert isinstance(open_store("redis", path=None, url="redis://h/0", retention=retention), RedisStore)
    assert isinstance(
        open_store("postgres", path=None, url="postgresql://h/db", retention=retention), PostgresStore
    )


def test_the_default_sqlite_path_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_path() == tmp_path / "codexgate" / "store.sqlite3"
    store = open_store("sqlite", path=None, url=None, retention=Retention())
    assert isinstance(store, SqliteStore) and store.path == default_path()
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_path() == tmp_path / "home" / ".local" / "share" / "codexgate" / "store.sqlite3"


def test_a_bad_kind_or_a_missing_url_is_named() -> None:
    with pytest.raises(StoreError, match="unknown store 'mongo'.*sqlite, redis, postgres"):
        open_store("mongo", path=None, url=None, retention=Retention())
    for kind in ("redis", "postgres"):
        with pytest.raises(StoreError, match=f"the {kind} store needs a URL"):
            open_store(kind, path=None, url=None, retention=Retention())


async def test_sqlite_creates_the_directory_and_names_an_unusable_path(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "a" / "b" / "store.sqlite3", Retention())
    await store.open()
    await store.close()
    assert (tmp_path / "a" / "b" / "store.sqlite3").is_file()
    (tmp_path / "file").write_text("not a directory")
    bad = tmp_path / "file" / "store.sqlite3"
    with pytest.raises(StoreError, match=f"cannot open the SQLite store at {bad}"):
        await SqliteStore(bad, Retention()).open()


@pytest.mark.parametrize("kind", ["redis", "postgres"])
async def test_an_unreachable_server_is_named_without_its_password(kind: str) -> None:
    port = servers.free_port()  # nothing listens there
    scheme = "redis" if kind == "redis" else "postgresql"
    store = open_store(
        kind, path=None, url=f"{scheme}://user:hunter2@127.0.0.1:{port}/0", retention=Retention()
    )
    with pytest.raises(StoreError) as caught:
        await store.open()
    message = str(caught.value)
    assert f"127.0.0.1:{port}" in message and "cannot reach" in message
    assert "hunter2" not in message


def test_a_missing_server_skips_or_fails_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODEXGATE_REDIS_SERVER", "/nonexistent/redis-server")
    monkeypatch.setenv("CODEXGATE_PG_BIN", "/nonexistent")
    monkeypatch.delenv("CODEXGATE_REQUIRE_SERVERS", raising=False)
    for start in (servers.redis_server, servers.postgres_server):
        with pytest.raises(pytest.skip.Exception), start():
            pass
    monkeypatch.setenv("CODEXGATE_REQUIRE_SERVERS", "1")
    with pytest.raises(pytest.fail.Exception, match=r"Debian package: redis-server"), servers.redis_server():
        pass
    with pytest.raises(pytest.fail.Exception, match=r"Debian package: postgresql"), servers.postgres_server():
        pass
