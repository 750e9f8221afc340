"""Throwaway Redis and PostgreSQL servers for the store's contract tests.

Each runs as a child process of the test session on a free loopback port, with its data in a
temporary directory, and is stopped by its PID at the end. A missing server binary skips the
tests that need it, unless `CODEXGATE_REQUIRE_SERVERS=1` (set by CI) makes it a failure that
names the Debian package to install.

Binaries: `redis-server` on PATH (or `CODEXGATE_REDIS_SERVER`); PostgreSQL's `initdb` and
`postgres` on PATH or under /usr/lib/postgresql/*/bin, where Debian's `postgresql` package puts
them (or the directory `CODEXGATE_PG_BIN`). PostgreSQL refuses to run as root: as root, both
run as the `postgres` user (which the Debian package creates), with the data directory its own.

PostgreSQL is started as `postgres` itself rather than through `pg_ctl start`, so the child's
PID is the postmaster's and stopping it needs no pid file.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import pytest
import redis

from tests.support.processes import free_port

T = TypeVar("T")

STARTUP_SECONDS = 30.0


def unavailable(reason: str) -> None:
    """Skip, or in CI fail: the store must be tested against every server there."""
    if os.environ.get("CODEXGATE_REQUIRE_SERVERS") == "1":
        pytest.fail(f"{reason} (CODEXGATE_REQUIRE_SERVERS=1)", pytrace=False)
    pytest.skip(reason)


def redis_binary() -> str | None:
    override = os.environ.get("CODEXGATE_REDIS_SERVER")
    if override is not None:
        return override if Path(override).is_file() else None
    return shutil.which("redis-server")


def postgres_bin_dir() -> Path | None:
    """The directory holding `initdb` and `postgres` of one PostgreSQL version."""
    override = os.environ.get("CODEXGATE_PG_BIN")
    candidates = [Path(override)] if override is not None else []
    if override is None:
        on_path = shutil.which("initdb")
        if on_path:
            candidates.append(Path(on_path).resolve().parent)
        versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: _version(p.parent.name))
        candidates += reversed(versions)
    for directory in candidates:
        if (directory / "initdb").is_file() and (directory / "postgres").is_file():
            return directory
    return None


def _version(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in name.split(".") if part.isdigit())


def run_async(fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run `fn()` to completion on an event loop of its own, in a thread of its own: callable
    from sync fixtures without touching the event loop pytest-asyncio keeps for the tests."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(fn())).result()


def _wait(ready: Callable[[], bool], process: subprocess.Popen[bytes], what: str, log: Path) -> None:
    """Poll `ready` until it holds, failing early if the server died (bounded)."""
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}:\n{_tail(log)}")
        if ready():
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} not ready after {STARTUP_SECONDS:.0f}s:\n{_tail(log)}")


def _tail(log: Path) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-20:])
    except OSError:
        return "(no log)"


def _stop(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """Stop the server by its PID: `sig` first (a clean shutdown), SIGKILL if it lingers."""
    if process.poll() is None:
        os.kill(process.pid, sig)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


@contextmanager
def redis_server() -> Iterator[str]:
    """A running redis-server; yields its URL."""
    binary = redis_binary()
    if binary is None:
        unavailable("redis-server is not installed (Debian package: redis-server)")
        raise AssertionError("unreachable")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="codexgate-redis-") as tmp:
        log = Path(tmp) / "redis.log"
        args = [binary, "--save", "", "--appendonly", "no", "--port", str(port), "--bind", "127.0.0.1"]
        args += ["--dir", tmp, "--logfile", str(log)]
        process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        try:
            client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1)

            def pong() -> bool:
                try:
                    return bool(client.ping())
                except redis.RedisError:
                    return False

            _wait(pong, process, f"redis-server on port {port}", log)
            client.close()
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            _stop(process, signal.SIGTERM)


@contextmanager
def postgres_server() -> Iterator[str]:
    """A running PostgreSQL cluster; yields the DSN of its `postgres` database for the
    superuser `postgres` (trust authentication, loopback only)."""
    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        unavailable("PostgreSQL is not installed (Debian package: postgresql)")
        raise AssertionError("unreachable")
    user: str | None = None
    if os.geteuid() == 0:
        try:
            pw = pwd.getpwnam("postgres")
        except KeyError:
            unavailable("running as root and there is no `postgres` user to run PostgreSQL as")
            raise AssertionError("unreachable") from None
        user = "postgres"
    port = free_port()
    # Not under pytest's tmp_path: its parents are private to root, and the server may run as
    # another user.
    tmp = Path(tempfile.mkdtemp(prefix="codexgate-pg-"))
    try:
        data, log = tmp / "data", tmp / "postgres.log"
        if user is not None:
            os.chown(tmp, pw.pw_uid, pw.pw_gid)
        as_user: dict[str, Any] = {"user": user, "group": user, "extra_groups": []} if user else {}
        initdb = [str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"]
        done = subprocess.run(initdb, stdin=subprocess.DEVNULL, capture_output=True, **as_user)
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed:\n{done.stdout.decode()}{done.stderr.decode()}")
        args = [str(bin_dir / "postgres"), "-D", str(data), "-p", str(port), "-k", str(tmp)]
        args += ["-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200"]
        with log.open("wb") as out:
            process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=out, **as_user)
        dsn = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        try:

            def accepting() -> bool:
                # The port opens before the cluster accepts logins: log in for real.
                async def login() -> None:
                    conn = await asyncpg.connect(dsn, timeout=2)
                    await conn.close()

                try:
                    run_async(login)
                except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError):
                    return False
                return True

            _wait(accepting, process, f"PostgreSQL on port {port}", log)
            yield dsn
        finally:
            _stop(process, signal.SIGQUIT)  # immediate shutdown: the cluster is thrown away
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
