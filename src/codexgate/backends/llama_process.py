"""A supervised `llama-server` child: built on first use (backends/llama_build.py, in a thread,
so the gateway serves at once), started on a free loopback port, watched until it answers
`/health`, restarted with backoff when it exits, stopped with the gateway.

    server = LlamaSupervisor(options, transport)
    server.start()                        # in the event loop; returns at once
    base_url = await server.wait_serving(30)   # or EmbeddedModelStarting while it builds
    ...
    await server.aclose()                 # SIGTERM, then SIGKILL, to its process group

Nothing waits forever: a request during the build is refused at once with the build's progress
(503 `embedded_model_starting`), a request while the child (re)starts waits a bounded time. A
gateway killed outright cannot stop its child, so each child's PID is written under the build
root's `run/` with its gateway's PID; the next start of any gateway kills children whose gateway
is gone (checked against the binary's path, so a reused PID is left alone).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from codexgate.backends.llama_build import Builder, BuildError, BuildProgress, LlamaBuild, find_build
from codexgate.backends.server_info import fetch_json
from codexgate.backends.transport import Transport
from codexgate.errors import Code, NoUpstream, UpstreamError

__all__ = ["EmbeddedModelStarting", "LlamaOptions", "LlamaSupervisor", "State"]

log = logging.getLogger("codexgate.embedded")

State = Literal["idle", "building", "starting", "serving", "restarting", "failed", "stopped"]

_STOP_GRACE = 5.0
_HEALTH_POLL = 0.1
_LOG_EVERY_PERCENT = 10
_CRASH_WINDOW = 60.0


class EmbeddedModelStarting(UpstreamError):
    """The embedded model is being built or started; the message says how far it is."""

    status = 503
    default_code = Code.EMBEDDED_MODEL_STARTING


@dataclass(frozen=True, slots=True)
class LlamaOptions:
    """How to run the child. `model`/`server` None: the build's SmolLM2 and llama-server."""

    root: Path  # where builds live (llama_build.llama_root)
    alias: str  # the model id it serves
    context_window: int = 8192
    threads: int | None = None  # None: llama-server's default (every core)
    model: Path | None = None
    server: Path | None = None  # a llama-server of one's own: no build
    health_timeout: float = 120.0  # seconds from spawn to a 200 from /health
    max_failed_starts: int = 5  # in a row, never healthy: then give up ("failed")
    restart_backoff: float = 0.5  # doubled per failure in a row, at most max_backoff
    max_backoff: float = 30.0


class LlamaSupervisor:
    def __init__(
        self,
        options: LlamaOptions,
        transport: Transport,
        view: Callable[[BuildProgress | None], None] | None = None,
    ) -> None:
        """`view`: shown the build's progress as it goes, then None when it is over (a
        terminal's progress bar)."""
        self.options = options
        self._view = view
        self._transport = transport
        self._state: State = "idle"
        self.progress: BuildProgress | None = None
        self.error: str | None = None
        self.restarts = 0
        self.port: int | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._builder: Builder | None = None
        self._task: asyncio.Task[None] | None = None
        self._serving = asyncio.Event()
        self._closing = False
        self._tail: deque[str] = deque(maxlen=30)
        self._logged_percent = -_LOG_EVERY_PERCENT
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
        """Begin building (if needed) and running the child; returns at once. Idempotent."""
        if self._task is None and not self._closing:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="embedded-llama-server")

    async def wait_serving(self, timeout: float) -> str:
        """The child's base URL once it answers. Raises EmbeddedModelStarting at once while it
        builds, or after `timeout` seconds of starting; NoUpstream when it cannot run."""
        self.start()
        if self.state == "building":
            raise EmbeddedModelStarting(self.describe())
        if self.state in ("failed", "stopped"):
            raise NoUpstream(self.describe())
        if self._serving.is_set() and not self.serving:
            self._serving.clear()  # it died a moment ago: wait for the next one
        if not self._serving.is_set():
            try:
                async with asyncio.timeout(timeout):
                    await self._serving.wait()
            except TimeoutError:
                raise EmbeddedModelStarting(self.describe()) from None
        return self.base_url

    def describe(self) -> str:
        """Where the embedded model is, in a sentence for a person (logs, /healthz, errors)."""
        where = self.options.root
        if self.state == "building":
            done = self.progress.describe() if self.progress else "starting"
            return (
                f"The embedded model is being built, once for this user (llama.cpp's llama-server, "
                f"7 to 30 minutes on 2 cores; kept in {where}): {done}. Retry in a minute, or point "
                "codexgate at a running model server with --upstream URL."
            )
        if self.state in ("idle", "starting", "restarting"):
            return f"The embedded model is starting (llama-server, {self.restarts} restarts so far)."
        if self.state == "serving":
            return f"The embedded model is serving at {self.base_url} (pid {self.pid})."
        if self.state == "failed":
            return (
                f"The embedded model cannot run: {self.error} Point codexgate at a model server "
                "with --upstream URL."
            )
        return "The embedded model is stopped (the gateway is shutting down)."

    async def aclose(self) -> None:
        """Stop building and stop the child (its whole process group). Idempotent."""
        self._closing = True
        if self._builder is not None:
            self._builder.cancel()
        await self._stop_child()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._state = "stopped"
        self._serving.clear()

    # -- the supervision loop

    async def _run(self) -> None:
        try:
            build = await self._build()
        except BuildError as exc:
            if not self._closing:
                self._fail(str(exc))
            return
        except Exception as exc:  # a bug, or the disk: said, never a build that seems to go on
            log.exception("embedded model: the build failed")
            self._fail(f"the build failed: {exc!r}.")
            return
        failures = 0
        while not self._closing:
            self._state = "starting" if self.restarts == 0 else "restarting"
            healthy = await self._serve_once(build)
            if self._closing:
                return
            failures = 0 if healthy else failures + 1
            if failures >= self.options.max_failed_starts:
                last = " | ".join(list(self._tail)[-5:]) or "(no output)"
                self._fail(f"llama-server did not start {failures} times in a row; its last output: {last}.")
                return
            # Backoff grows with failed starts in a row, and with exits in the last minute (a
            # child that answers /health and then dies on every request).
            now = time.monotonic()
            self._exits = [t for t in self._exits if now - t < _CRASH_WINDOW] + [now]
            exponent = max(failures, len(self._exits) - 1)
            delay = min(self.options.max_backoff, self.options.restart_backoff * 2**exponent)
            self.restarts += 1
            log.warning("embedded model: llama-server restarts in %.1f s (restart %d)", delay, self.restarts)
            await asyncio.sleep(delay)

    def _fail(self, error: str) -> None:
        self._state, self.error = "failed", error
        log.error("%s", self.describe())

    async def _build(self) -> LlamaBuild:
        """The binary and model: given, found in the cache, or built now (in a thread)."""
        options = self.options
        found = find_build(options.root)
        if options.server is not None:
            model = options.model or (found.model if found else None)
            if model is None:
                raise BuildError("llama_server is set without a model: set model_path to a GGUF file too")
            return LlamaBuild(options.root, options.server, model)
        if found is None:
            self._state = "building"
            log.info(
                "embedded model: building llama.cpp's llama-server once for this user into %s "
                "(7 to 30 minutes on 2 cores); requests get 503 embedded_model_starting until then",
                options.root,
            )
            loop = asyncio.get_running_loop()

            def report(progress: BuildProgress) -> None:  # called in the build's thread
                loop.call_soon_threadsafe(self._on_progress, progress)

            self._builder = Builder(options.root, report)
            started = time.monotonic()
            try:
                found = await asyncio.to_thread(self._builder.ensure)
            finally:
                self._show(None)
            elapsed = time.monotonic() - started
            log.info("embedded model: llama-server ready in %.0f s: %s", elapsed, found.server)
        return found

    def _on_progress(self, progress: BuildProgress) -> None:
        self.progress = progress
        self._show(progress)
        if progress.percent >= self._logged_percent + _LOG_EVERY_PERCENT:
            self._logged_percent = progress.percent - progress.percent % _LOG_EVERY_PERCENT
            log.info("embedded model: %s", progress.describe())

    def _show(self, progress: BuildProgress | None) -> None:
        """Tell the view; a view that fails (a terminal gone) is dropped, the build goes on."""
        if self._view is None:
            return
        try:
            self._view(progress)
        except Exception:
            log.debug("embedded model: the progress view failed; dropped", exc_info=True)
            self._view = None

    def _argv(self, build: LlamaBuild, port: int) -> list[str]:
        options = self.options
        argv = [
            str(build.server), "-m", str(options.model or build.model), "--alias", options.alias,
            "--host", "127.0.0.1", "--port", str(port), "-c", str(options.context_window),
            "-np", "1", "--jinja", "--no-webui",
        ]  # fmt: skip
        if options.threads:
            argv += ["-t", str(options.threads)]
        return argv

    async def _serve_once(self, build: LlamaBuild) -> bool:
        """One child from spawn to exit; True if it answered /health on the way."""
        _reap_orphans(self.options.root / "run", build.server)
        self.port = _free_port()
        try:
            proc = await asyncio.create_subprocess_exec(
                *self._argv(build, self.port),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,  # its own process group, signalled whole
            )
        except OSError as exc:
            self._tail.append(f"cannot run {build.server}: {exc}")
            return False
        self._proc = proc
        pidfile = _write_pidfile(self.options.root / "run", proc.pid, build.server)
        drain = asyncio.get_running_loop().create_task(self._drain(proc))
        healthy = False
        try:
            healthy = await self._wait_healthy(proc)
            if healthy:
                self._state = "serving"
                self._serving.set()
                log.info("embedded model: llama-server serving at %s (pid %d)", self.base_url, proc.pid)
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
                "embedded model: llama-server (pid %d) exited with %s; last output: %s", proc.pid, code, last
            )
        return healthy

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


def _write_pidfile(run: Path, pid: int, server: Path) -> Path | None:
    """Where the child's PID is kept for `_reap_orphans`; None when it cannot be written (the
    child is supervised all the same)."""
    path = run / f"{pid}.json"
    try:
        run.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"gateway": os.getpid(), "server": str(server)}))
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


def _reap_orphans(run: Path, server: Path) -> None:
    """Kill children left by gateways that died without stopping them (SIGKILL, a crash)."""
    if not run.is_dir():
        return
    for path in run.glob("*.json"):
        try:
            pid = int(path.stem)
            gateway = int(json.loads(path.read_text())["gateway"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if _alive(gateway):  # its gateway stops it (this process's own children included)
            continue
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/exe").resolve() == server.resolve():  # not a reused PID
                os.killpg(pid, signal.SIGKILL)
                log.warning("embedded model: killed llama-server pid %d left by a gateway that is gone", pid)
        with contextlib.suppress(OSError):
            path.unlink()
