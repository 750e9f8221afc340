"""`serve --workers N`: N gateway processes on one port, under a supervisor.

The supervisor binds and listens once, then forks the workers, which inherit the listening
socket and accept from it: the kernel hands each connection to one of them. A shared socket
rather than SO_REUSEPORT sockets of their own, because a worker that dies with connections in
its own SO_REUSEPORT queue loses them, while connections waiting on the shared socket go to
the others. Each worker builds its own app after the fork (event loops, threads and upstream
connections do not survive a fork), so what is kept in memory is per worker: the history
cache, a WebSocket connection's memory, the live view, the counters of /metrics. What must be
shared is outside the processes: the store (SQLite's file, Redis, PostgreSQL), the API keys
(each reads the same config; SIGHUP is passed on), the limits (max_connections is divided
between the workers).

The supervisor replaces a worker that dies (after a pause if workers keep dying at once),
passes SIGTERM, SIGINT and SIGHUP on, and exits once every worker has.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import socket
import time
from collections.abc import Callable
from types import FrameType

from codexgate.config import ConfigError, Settings

log = logging.getLogger("codexgate.workers")

WORKER_ENV = "CODEXGATE_WORKER"  # which worker a process is ("1".."N"): in its logs and /metrics
_FAST_DEATH_SECONDS = 5.0  # a worker dying sooner than this after its start...
_RESPAWN_PAUSE = 1.0  # ...is replaced after this pause, so a broken config does not spin


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def worker_id() -> str | None:
    """This process's worker number under `serve --workers`, or None."""
    return os.environ.get(WORKER_ENV)


def listen(settings: Settings) -> socket.socket:
    """The listening socket the workers share (port 0: the kernel picks one, told in the log).
    Raises ConfigError when the address cannot be had (bind_error)."""
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((settings.host.strip("[]"), settings.port))
    except OSError as exc:
        sock.close()
        raise bind_error(exc, settings.host, settings.port) from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def check_address(host: str, port: int) -> None:
    """Bind each address `host` names, as the server will, and let go: an address that cannot
    be had is one line before anything starts (ConfigError), not uvicorn's `[Errno 98]` after
    "Application startup complete". Port 0 always can. As asyncio does, an address of a family
    the machine has switched off (IPv6's ::1 for localhost) is passed over while another binds."""
    if port == 0:
        return
    try:
        flags = socket.AI_PASSIVE
        found = socket.getaddrinfo(host.strip("[]") or None, port, type=socket.SOCK_STREAM, flags=flags)
    except socket.gaierror:
        raise ConfigError(f"cannot listen on {host}: no such address; give one with --host ADDRESS") from None
    unavailable: OSError | None = None
    bound = 0
    for family, kind, proto, _, address in found:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:  # as asyncio binds it: IPv6 only
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
                bound += 1
            except OSError as exc:
                if exc.errno != errno.EADDRNOTAVAIL:
                    raise bind_error(exc, host, port) from None
                unavailable = exc
    if not bound and unavailable is not None:
        raise bind_error(unavailable, host, port)


def bind_error(exc: OSError, host: str, port: int) -> ConfigError:
    """Why the gateway cannot listen on host:port, and what to do, in one line."""
    if exc.errno == errno.EADDRINUSE:
        return ConfigError(
            f"port {port} on {host} is in use (by another program); choose another with --port N"
        )
    if exc.errno == errno.EACCES:
        return ConfigError(
            f"port {port} on {host} needs privileges this user lacks (ports below 1024 do); "
            "choose another with --port N"
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return ConfigError(
            f"{host} is not an address of this machine; give one with --host ADDRESS "
            "(127.0.0.1: this machine only; 0.0.0.0: every interface)"
        )
    return ConfigError(f"cannot listen on {host} port {port}: {exc.strerror or exc}")


class Supervisor:
    """Forks `count` workers running `work(sock)` (its return value is the worker's exit
    status) and keeps them running until a signal stops them all."""

    def __init__(self, count: int, work: Callable[[socket.socket], int], sock: socket.socket) -> None:
        self.count = count
        self.work = work
        self.sock = sock
        self.workers: dict[int, tuple[int, float]] = {}  # pid -> (worker number, start time)
        self.stopping: int | None = None

    def run(self) -> int:
        previous = {
            sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
        }
        try:
            for number in range(1, self.count + 1):
                self._spawn(number)
            while self.workers:
                try:
                    pid, status = os.wait()
                except ChildProcessError:
                    break
                except InterruptedError:
                    continue
                self._reaped(pid, status)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.sock.close()
        return 130 if self.stopping == signal.SIGINT else 0

    def _spawn(self, number: int) -> None:
        pid = os.fork()
        if pid == 0:  # the worker
            status = 1
            try:
                for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                    signal.signal(sig, signal.SIG_DFL)
                os.environ[WORKER_ENV] = str(number)
                status = self.work(self.sock)
            except BaseException:
                log.exception("worker %d failed", number)
            finally:
                logging.shutdown()
                os._exit(status)
        self.workers[pid] = (number, time.monotonic())
        log.info("worker %d started (pid %d)", number, pid)

    def _reaped(self, pid: int, status: int) -> None:
        entry = self.workers.pop(pid, None)
        if entry is None:
            return  # not a worker (a grandchild reparented to us)
        number, started = entry
        if self.stopping is not None:
            return
        code = os.waitstatus_to_exitcode(status)
        log.warning("worker %d (pid %d) ended with %s; starting another", number, pid, _describe(code))
        if time.monotonic() - started < _FAST_DEATH_SECONDS:
            time.sleep(_RESPAWN_PAUSE)
        if self.stopping is None:
            self._spawn(number)

    def _on_signal(self, sig: int, frame: FrameType | None) -> None:
        if sig != signal.SIGHUP and self.stopping is None:
            self.stopping = sig
        for pid in list(self.workers):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass


def _describe(code: int) -> str:
    return f"signal {signal.Signals(-code).name}" if code < 0 else f"status {code}"
