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

import logging
import os
import signal
import socket
import time
from collections.abc import Callable
from types import FrameType

from codexgate.config import Settings

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
    """The listening socket the workers share (port 0: the kernel picks one, told in the log)."""
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((settings.host.strip("[]"), settings.port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


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
