"""A supervised llama.cpp server child: the runtime fetched on first use (runtime.py, in a
thread, so the gateway serves at once), the child started on a free loopback port, watched until
it answers `/health`, restarted with backoff when it exits, stopped with the gateway.

    server = LlamaSupervisor(options, transport)
    server.start()                        # in the event loop; returns at once
    base_url = await server.wait_serving(60)   # or EmbeddedModelStarting past the wait
    ...
    await server.aclose()                 # SIGTERM, then SIGKILL, to its process group

The child is llama.cpp's server from the `xllamacpp` wheel (child.py), or a `llama-server`
binary of one's own (`llama_server`). Nothing waits forever: a request while the runtime is
fetched or the child (re)starts waits a bounded time, then gets 503 `embedded_model_starting`
saying how far it is. A child that dies with SIGILL (a CPU the wheel cannot run on) is not
restarted: the model is "failed", with a sentence saying to point codexgate at a model server.
The child dies with its gateway (PR_SET_PDEATHSIG); a binary of one's own cannot be told to, so
each child's PID is also written under the root's `run/` with its gateway's PID, and the next
start of any gateway kills children whose gateway is gone (checked against the command line, so a
reused PID is left alone).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from codexgate.backends.embedded.runtime import Fetcher, RuntimeUnavailable, find_runtime
from codexgate.backends.http.transport import Transport
from codexgate.backends.server_info import fetch_json
from codexgate.errors import Code, NoUpstream, UpstreamError

__all__ = ["EmbeddedModelStarting", "Launch", "LlamaOptions", "LlamaSupervisor", "State"]

log = logging.getLogger("codexgate.backends.embedded.fallback")

State = Literal["idle", "downloading", "starting", "serving", "restarting", "failed", "stopped"]

_STOP_GRACE = 5.0
_HEALTH_POLL = 0.1
_CRASH_WINDOW = 60.0
CHILD_MODULE = "codexgate.backends.embedded.child"
# Tokens of the prompt read in one batch (llama-server's -b; its default is 2048): the server
# reports its progress after each, so a CPU's minute-long prefill is reported every few seconds.
# 512 is its physical batch (-ub) anyway: the work done, and its speed, are the same.
PROMPT_BATCH = 512
_UNSUPPORTED = (
    "Point codexgate at a model server with --upstream URL (Ollama, llama.cpp, vLLM...), or set "
    "llama_server to a llama-server built for this machine."
)


class EmbeddedModelStarting(UpstreamError):
    """The embedded model is being fetched or started; the message says how far it is."""

    status = 503
    default_code = Code.EMBEDDED_MODEL_STARTING


@dataclass(frozen=True, slots=True)
class LlamaOptions:
    """How to run the child. `model`/`server` None: the runtime's SmolLM2 and llama.cpp server."""

    root: Path  # where the runtime lives (runtime.llama_root)
    alias: str  # the model id it serves
    context_window: int = 8192
    threads: int | None = None  # None: llama.cpp's default (every core)
    model: Path | None = None
    server: Path | None = None  # a llama-server binary of one's own instead of the runtime's
    health_timeout: float = 120.0  # seconds from spawn to a 200 from /health
    max_failed_starts: int = 5  # in a row, never healthy: then give up ("failed")
    restart_backoff: float = 0.5  # doubled per failure in a row, at most max_backoff
    max_backoff: float = 30.0


@dataclass(frozen=True, slots=True)
class Launch:
    """How to start one child: the command before llama-server's flags, the model, the
    environment's additions, and what of its command line identifies it (for the orphan reaper)."""

    command: tuple[str, ...]
    model: Path
    env: dict[str, str]
    marker: str


class LlamaSupervisor:
    def __init__(self, options: LlamaOptions, transport: Transport) -> None:
        self.options = options
        self._transport = transport
        self._state: State = "idle"
        self.error: str | None = None
        self.restarts = 0
        self.port: int | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._fetcher: Fetcher | None = None
        self._task: asyncio.Task[None] | None = None
        self._serving = asyncio.Event()
        self._closing = False
        self._tail: deque[str] = deque(maxlen=30)
        self._exits: list[float] = []  # monotonic times the child exited, in the last minute

    # -- what the backend asks

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.returncode is None else None

    @property
    def state(self) -> State:
        """What it is doing; a child that has just died is "restarting" at once, before the
        loop has noticed."""
        if self._state == "serving" and (self._proc is None or self._proc.returncode is not None):
            return "restarting"
        return self._state

    @property
    def serving(self) -> bool:
        return self.state == "serving"

    def start(self) -> None:
        """Begin fetching (if needed) and running the child; returns at once. Idempotent."""
        if self._task is None and not self._closing:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="embedded-llama-server")

    async def wait_serving(self, timeout: float) -> str:
        """The child's base URL once it answers. Raises EmbeddedModelStarting after `timeout`
        seconds of fetching or starting, NoUpstream when it cannot run."""
        self.start()
        if self.state in ("failed", "stopped"):
            raise NoUpstream(self.describe())
        if self._serving.is_set() and not self.serving:
            self._serving.clear()  # it died a moment ago: wait for the next one
        if not self._serving.is_set():
            try:
                async with asyncio.timeout(timeout):
                    await self._serving.wait()
            except TimeoutError:
                if self.state in ("failed", "stopped"):
                    raise NoUpstream(self.describe()) from None
                raise EmbeddedModelStarting(self.describe()) from None
        return self.base_url

    def describe(self) -> str:
        """Where the embedded model is, in a sentence for a person (logs, /healthz, errors)."""
        if self.state == "downloading":
            fetcher = self._fetcher
            seconds = time.monotonic() - fetcher.started if fetcher else 0.0
            return (
                "The embedded model is being downloaded, once for this user (llama.cpp's runtime "
                f"and SmolLM2-135M, about 130 MB, into {self.options.root}): {seconds:.0f} s so far. "
                "Retry in a moment, or point codexgate at a running model server with --upstream URL."
            )
        if self.state in ("idle", "starting", "restarting"):
            return f"The embedded model is starting (llama.cpp server, {self.restarts} restarts so far)."
        if self.state == "serving":
            return f"The embedded model is serving at {self.base_url} (pid {self.pid})."
        if self.state == "failed":
            return f"The embedded model cannot run: {self.error}"
        return "The embedded model is stopped (the gateway is shutting down)."

    async def aclose(self) -> None:
        """Stop fetching and stop the child (its whole process group). Idempotent."""
        self._closing = True
        if self._fetcher is not None:
            self._fetcher.cancel()
        await self._stop_child()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._state = "stopped"
        self._serving.clear()

    # -- the supervision loop

    async def _run(self) -> None:
        try:
            launch = await self._launch()
        except RuntimeUnavailable as exc:
            if not self._closing:
                self._fail(f"{exc} {_UNSUPPORTED}")
            return
        except Exception as exc:  # a bug, or the disk: said, never a download that seems to go on
            log.exception("embedded model: getting its runtime failed")
            self._fail(f"getting its runtime failed: {exc!r}. {_UNSUPPORTED}")
            return
        failures = 0
        while not self._closing:
            self._state = "starting" if self.restarts == 0 else "restarting"
            healthy, code = await self._serve_once(launch)
            if self._closing:
                return
            if code == -signal.SIGILL and not healthy:
                lacks = "the llama.cpp runtime died with SIGILL: this CPU lacks an instruction it uses."
                self._fail(f"{lacks} {_UNSUPPORTED}")
                return
            failures = 0 if healthy else failures + 1
            if failures >= self.options.max_failed_starts:
                last = " | ".join(list(self._tail)[-5:]) or "(no output)"
                self._fail(f"its server did not start {failures} times in a row; its last output: {last}.")
                return
            # Backoff grows with failed starts in a row, and with exits in the last minute (a
            # child that answers /health and then dies on every request).
            now = time.monotonic()
            self._exits = [t for t in self._exits if now - t < _CRASH_WINDOW] + [now]
            exponent = max(failures, len(self._exits) - 1)
            delay = min(self.options.max_backoff, self.options.restart_backoff * 2**exponent)
            self.restarts += 1
            log.warning("embedded model: its server restarts in %.1f s (restart %d)", delay, self.restarts)
            await asyncio.sleep(delay)

    def _fail(self, error: str) -> None:
        self._state, self.error = "failed", error
        log.error("%s", self.describe())

    async def _launch(self) -> Launch:
        """How to start the child: a binary of one's own, or the runtime (fetched now if needed,
        in a thread). Raises RuntimeUnavailable."""
        options = self.options
        if options.server is not None and options.model is not None:
            return Launch((str(options.server),), options.model, {}, str(options.server))
        fetcher = self._fetcher = Fetcher(options.root)
        runtime = await asyncio.to_thread(find_runtime, options.root)
        if runtime is None:
            self._state = "downloading"
            log.info(
                "embedded model: downloading llama.cpp's runtime and SmolLM2-135M once for this user "
                "into %s (about 130 MB); requests wait for it", options.root,
            )  # fmt: skip
            runtime = await asyncio.to_thread(fetcher.ensure)
            log.info("embedded model: downloaded in %.1f s", time.monotonic() - fetcher.started)
        model = options.model or runtime.model
        if options.server is not None:
            return Launch((str(options.server),), model, {}, str(options.server))
        path = os.pathsep.join(filter(None, (str(runtime.site), os.environ.get("PYTHONPATH"))))
        return Launch((sys.executable, "-m", CHILD_MODULE), model, {"PYTHONPATH": path}, CHILD_MODULE)

    def _argv(self, launch: Launch, port: int) -> list[str]:
        options = self.options
        argv = [
            *launch.command, "-m", str(launch.model), "--alias", options.alias,
            "--host", "127.0.0.1", "--port", str(port), "-c", str(options.context_window),
            "-np", "1", "--jinja", "--no-webui", "-b", str(PROMPT_BATCH),
        ]  # fmt: skip
        if options.threads:
            argv += ["-t", str(options.threads)]
        return argv

    async def _serve_once(self, launch: Launch) -> tuple[bool, int | None]:
        """One child from spawn to exit: whether it answered /health on the way, and its exit
        status."""
        _reap_orphans(self.options.root / "run")
        self.port = _free_port()
        try:
            proc = await asyncio.create_subprocess_exec(
                *self._argv(launch, self.port),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                env={**os.environ, **launch.env},
                start_new_session=True,  # its own process group, signalled whole
            )
        except OSError as exc:
            self._tail.append(f"cannot run {launch.command[0]}: {exc}")
            return False, None
        self._proc = proc
        pidfile = _write_pidfile(self.options.root / "run", proc.pid, launch.marker)
        drain = asyncio.get_running_loop().create_task(self._drain(proc))
        healthy = False
        try:
            healthy = await self._wait_healthy(proc)
            if healthy:
                self._state = "serving"
                self._serving.set()
                log.info("embedded model: serving at %s (pid %d)", self.base_url, proc.pid)
            else:
                _signal_group(proc, signal.SIGKILL)
            code = await proc.wait()
        finally:
            self._serving.clear()
            if proc.returncode is None:  # cancelled (the gateway stops): leave nothing behind
                _signal_group(proc, signal.SIGKILL)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(_STOP_GRACE):
                        await proc.wait()
            if pidfile is not None:
                with contextlib.suppress(OSError):
                    pidfile.unlink()
            await asyncio.gather(drain, return_exceptions=True)
        if not self._closing:
            last = " | ".join(list(self._tail)[-3:]) or "(no output)"
            log.warning(
                "embedded model: its server (pid %d) exited with %s; last output: %s", proc.pid, code, last
            )
        return healthy, code

    async def _wait_healthy(self, proc: asyncio.subprocess.Process) -> bool:
        url = f"http://127.0.0.1:{self.port}/health"
        deadline = time.monotonic() + self.options.health_timeout
        while proc.returncode is None and time.monotonic() < deadline and not self._closing:
            status, _ = await fetch_json(self._transport, url, {}, 2.0)
            if status == 200:
                return True
            await asyncio.sleep(_HEALTH_POLL)
        return False

    async def _drain(self, proc: asyncio.subprocess.Process) -> None:
        """Its output, kept as a short tail for error messages and logged at debug level."""
        assert proc.stdout is not None
        async for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip()
            if line:
                self._tail.append(line[:500])
                log.debug("llama-server: %s", line)

    async def _stop_child(self) -> None:
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return
        for signum in (signal.SIGTERM, signal.SIGKILL):
            _signal_group(proc, signum)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_STOP_GRACE):
                    await proc.wait()
                return


def _signal_group(proc: asyncio.subprocess.Process, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signum)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _write_pidfile(run: Path, pid: int, marker: str) -> Path | None:
    """Where the child's PID is kept for `_reap_orphans`; None when it cannot be written (the
    child is supervised all the same)."""
    path = run / f"{pid}.json"
    try:
        run.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"gateway": os.getpid(), "marker": marker}))
    except OSError as exc:
        log.debug("embedded model: cannot keep the PID in %s: %s", path, exc)
        return None
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _reap_orphans(run: Path) -> None:
    """Kill children left by gateways that died without stopping them (SIGKILL, a crash)."""
    if not run.is_dir():
        return
    for path in run.glob("*.json"):
        try:
            pid = int(path.stem)
            entry = json.loads(path.read_text())
            gateway, marker = int(entry["gateway"]), str(entry["marker"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if _alive(gateway):  # its gateway stops it (this process's own children included)
            continue
        with contextlib.suppress(OSError):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if marker.encode() in argv:  # still our child, not a reused PID
                os.killpg(pid, signal.SIGKILL)
                log.warning("embedded model: killed its server, pid %d, left by a gateway that is gone", pid)
        with contextlib.suppress(OSError):
            path.unlink()
