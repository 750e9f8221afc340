"""Processes in tests: a free port, a process gone or a condition met (each waited for under a
deadline: `wait_until` from sync code, `until` in a coroutine), a child stopped, and `codexgate
serve` run as a subprocess.

    with serve_process("--upstream", upstream + "/v1", "--no-discover") as gw:
        httpx.get(gw.base + "/healthz")
        gw.signal(signal.SIGTERM)
        assert gw.wait(20) == 0
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from codexgate.backends.discovery import LOCAL_SERVERS

STARTUP_SECONDS = 30.0
# uvicorn's line once it serves, or under --workers the supervisor's (its socket is listening:
# a connection waits for a worker to take it)
RUNNING_ON = re.compile(r"running on (http://\S+)|\d+ workers on (\S+:\d+)", re.IGNORECASE)


# Ports free_port() hands out lie below the kernel's ephemeral range (where port 0 and outgoing
# connections get theirs) from this floor up, split between the run's workers.
PORT_FLOOR = 10000


def free_port() -> int:
    """A loopback port free right now, for a server that cannot bind port 0 and report it back
    (or a port meant to stay closed).

    The tests run in several workers at once (pytest-xdist), each starting servers: a port the
    kernel picked and that was closed again could be picked again for another worker's server
    (or a connection) before this one's binds it. So the port comes from below the ephemeral
    range, which the kernel never picks from, out of a slice of that space of this worker's own
    (PYTEST_XDIST_WORKER), taken in turn from a random start (other test runs on the machine
    start elsewhere), skipping any port in use and those `serve` looks for model servers on.
    Without room below the ephemeral range: one the kernel picks."""
    global _ports
    if _ports is None:
        _ports = _worker_ports()
    for port in itertools.islice(_ports, 1000):
        if port in _LOOKED_FOR:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use, or lingering in TIME_WAIT: the next
            return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        picked: int = sock.getsockname()[1]
        return picked


_ports: Iterator[int] | None = None
# Where `serve` looks for a local model server (Ollama's 11434...): a test's server there would
# be found by another test's discovery.
_LOOKED_FOR = {int(url.rsplit(":", 1)[1].split("/")[0]) for _, url in LOCAL_SERVERS}


def _worker_ports() -> Iterator[int]:
    """This worker's slice of [PORT_FLOOR, the ephemeral range), round and round; nothing when
    there is no room."""
    try:
        ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768  # Linux's default
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    count = max(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")), index + 1)
    size = (ephemeral - PORT_FLOOR) // count
    if size < 100:
        return iter(())
    low = PORT_FLOOR + index * size
    start = random.randrange(size)
    return (low + (start + n) % size for n in itertools.count())


def dead(pid: int) -> bool:
    """Gone, or a zombie nobody has reaped yet (a container's init may never reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def wait_until(check: Callable[[], bool], seconds: float = 20.0, what: str = "timed out") -> None:
    """Until `check()` holds, polled; fails the test with `what` after `seconds`."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


async def until(check: Callable[[], bool], seconds: float = 20.0, what: str = "timed out") -> None:
    """Until `check()` holds, polled every couple of milliseconds with the loop running on
    meanwhile; fails the test with `what` after `seconds`. For what has no event to await."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.002)


async def wait_for_exit(pid: int, timeout: float = 10.0) -> None:
    """Until process `pid` has terminated (any parent): a pidfd becomes readable then."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    loop.add_reader(fd, lambda: done.done() or done.set_result(None))
    try:
        async with asyncio.timeout(timeout):
            await done
    finally:
        loop.remove_reader(fd)
        os.close(fd)


def stop(process: subprocess.Popen[bytes] | subprocess.Popen[str], timeout: float = 10.0) -> None:
    """SIGTERM (a clean shutdown), then SIGKILL if it lingers past `timeout`; reaped either way."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@dataclass
class ServedGateway:
    """A `codexgate serve` subprocess: its base URL, the process, and the lines it printed so
    far (all of them once it has exited)."""

    base: str
    process: subprocess.Popen[bytes]
    output: list[str] = field(default_factory=list)
    _reader: threading.Thread | None = None

    def signal(self, sig: int) -> float:
        """Send `sig` to the gateway's process group (as a terminal's Ctrl-C reaches it);
        returns when."""
        os.killpg(self.process.pid, sig)
        return time.monotonic()

    def wait(self, timeout: float) -> int:
        """The exit status, once all it printed is in `output`."""
        status = self.process.wait(timeout=timeout)
        if self._reader is not None:
            self._reader.join(timeout)
        return status


@contextmanager
def serve_process(*args: str, env: Mapping[str, str] | None = None) -> Iterator[ServedGateway]:
    """`codexgate serve ARGS` in its own process group on a port of its choosing (the line that
    names it is read: a port picked here could be taken before the gateway binds it); the
    environment is this one without CODEXGATE_UPSTREAM, plus `env`. Its output is read all
    along (a full pipe would stall it). On exit: SIGTERM, then SIGKILL if it lingers."""
    command = [sys.executable, "-m", "codexgate.cli", "serve", "--port", "0", *args]
    environ = {**os.environ, "PYTHONUNBUFFERED": "1"}
    environ.pop("CODEXGATE_UPSTREAM", None)
    environ.update(env or {})
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=environ,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    served = ServedGateway("", process)
    started = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for raw in process.stdout:  # ends when the process does
            line = raw.decode(errors="replace").rstrip("\n")
            served.output.append(line)
            found = None if served.base else RUNNING_ON.search(line)
            if found:
                served.base = found.group(1) or f"http://{found.group(2)}"
                started.set()
        started.set()

    served._reader = threading.Thread(target=read, daemon=True)
    served._reader.start()
    try:
        if not started.wait(STARTUP_SECONDS) or not served.base:
            raise RuntimeError("the gateway did not start:\n" + "\n".join(served.output))
        yield served
    finally:
        stop(process)
        served._reader.join(10)
        if process.stdout is not None:
            process.stdout.close()
