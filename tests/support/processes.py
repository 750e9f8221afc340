"""Processes in tests: a free port, a process gone or a condition met (each waited for under a
deadline), a child stopped, and `codexgate serve` run as a subprocess.

    with serve_process("--upstream", upstream + "/v1", "--no-discover") as gw:
        httpx.get(gw.base + "/healthz")
        gw.signal(signal.SIGTERM)
        assert gw.wait(20) == 0
"""

from __future__ import annotations

import asyncio
import os
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

STARTUP_SECONDS = 30.0
# uvicorn's line once it serves, or under --workers the supervisor's (its socket is listening:
# a connection waits for a worker to take it)
RUNNING_ON = re.compile(r"running on (http://\S+)|\d+ workers on (\S+:\d+)", re.IGNORECASE)


def free_port() -> int:
    """A loopback port free right now, for a server that cannot bind port 0 and report it back
    (or a port meant to stay closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


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
