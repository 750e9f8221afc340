"""A supervised JSON-RPC client for one `codex app-server` process over stdio.

    server = AppServer([codex, "app-server"], env={"CODEX_HOME": home, ...}, cwd=work,
                       client_name="codexgate", on_server_request=answer)
    generation = await server.start()
    started = await server.request("thread/start", {...}, generation=generation)
    async with server.subscribe(started["thread"]["id"], generation=generation) as events:
        await server.request("turn/start", {...}, generation=generation)
        async for note in events:          # Notification(method, params) of that thread
            ...
    await server.close()

What it guarantees, and why:
- Every server request is answered. Codex waits forever for an answer (an unanswered dynamic tool
  call held a turn for 100 s and more), so the callback's result is sent, or a JSON-RPC error when
  the callback raises or overruns `server_request_timeout`; a method the gateway does not handle
  is refused at once with -32601.
- Nothing waits forever on a dead process. One task reads stdout; when it ends (the process
  exited, was killed, or wrote a line over `max_line_bytes`), every pending request and every
  subscription fails with `AppServerGone`, carrying the exit code and the last stderr lines.
  The next `request()` starts a new process (bounded attempts, backoff after crashes). Thread ids
  do not survive: each process is a new `generation`, and a request or subscription pinned to an
  old generation fails instead of reaching a process that never heard of its thread.
- stderr is drained continuously (a full pipe would block the app-server) into a short tail for
  error messages and a rate-limited log.
- The whole process group goes. The npm `codex` launcher is a Node script that, on Node < 22.15,
  runs the native binary as a child; SIGKILL on the launcher leaves the child serving the same
  pipes. The process is started in its own session and signals go to the group.
- Everything is bounded: line size, queue sizes, every wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import signal
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, cast

from codexgate import __version__
from codexgate.errors import Code, UpstreamError
from codexgate.wire.app_server import (
    DEFAULT_OPT_OUT_NOTIFICATIONS,
    INITIALIZE,
    INITIALIZED,
    SERVER_REQUEST_METHODS,
    ErrorCode,
    ErrorResponse,
    InitializeResult,
    Notification,
    ProtocolError,
    RequestId,
    Response,
    ServerRequest,
    encode_error,
    encode_notification,
    encode_request,
    encode_result,
    initialize_params,
    parse_message,
)

__all__ = [
    "AppServer",
    "AppServerClosed",
    "AppServerError",
    "AppServerGone",
    "AppServerLimits",
    "AppServerOverflow",
    "AppServerRpcError",
    "AppServerStartError",
    "AppServerTimeout",
    "NotificationHandler",
    "ServerRequestHandler",
    "ServerRequestRefused",
    "ThreadSubscription",
]

log = logging.getLogger("codexgate.app_server")

ServerRequestHandler = Callable[[ServerRequest], Awaitable[Any]]
NotificationHandler = Callable[[Notification], None]

_CRASH_WINDOW = 60.0  # seconds during which earlier exits lengthen the restart backoff


# -- errors --------------------------------------------------------------------------------------


class AppServerError(UpstreamError):
    """Anything that went wrong talking to `codex app-server` (the upstream of this backend)."""


class AppServerRpcError(AppServerError):
    """The app-server answered a request with a JSON-RPC error (`rpc_code`, e.g. -32600)."""

    def __init__(self, method: str, rpc_code: int, rpc_message: str, data: Any = None) -> None:
        super().__init__(f"codex app-server refused {method}: {rpc_message} (JSON-RPC {rpc_code})")
        self.method = method
        self.rpc_code = rpc_code
        self.rpc_message = rpc_message
        self.data = data


class AppServerTimeout(AppServerError):
    """A request got no answer in time (the process may still be fine)."""

    status = 504
    default_code = Code.UPSTREAM_TIMEOUT
    retryable = True


class AppServerGone(AppServerError):
    """The app-server process is gone (or is not the generation the caller's thread lived in).

    `exit_code` is the process's (negative: killed by that signal; None: unknown), `stderr_tail`
    its last stderr lines, `generation` the process the caller was talking to."""

    retryable = True

    def __init__(
        self,
        message: str,
        *,
        exit_code: int | None = None,
        stderr_tail: Sequence[str] = (),
        generation: int = 0,
    ) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.stderr_tail = tuple(stderr_tail)
        self.generation = generation


class AppServerClosed(AppServerGone):
    """`close()` was called: no request is sent and no process started any more."""

    retryable = False


class AppServerStartError(AppServerGone):
    """No process could be started and initialized within the allowed attempts."""

    default_code = Code.UPSTREAM_UNREACHABLE


class AppServerOverflow(AppServerError):
    """A subscriber fell behind by more than `subscription_queue` notifications; its stream is
    cut (the reader serves every thread and cannot wait for one)."""


class ServerRequestRefused(Exception):
    """Raised by a server-request handler to answer with this JSON-RPC error code and message."""

    def __init__(self, message: str, code: int = ErrorCode.INTERNAL_ERROR) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# -- limits --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AppServerLimits:
    """Every bound the client keeps. Seconds for times."""

    # The largest line observed on 0.169 is ~6.3 MB: an item/completed whose aggregatedOutput
    # (capped by Codex at 1 MiB) is all control characters, each escaped as \\u00XX. A user
    # message echoing a large data: URL image can be bigger; 64 MiB leaves room for both.
    max_line_bytes: int = 64 * 1024 * 1024
    request_timeout: float = 60.0
    start_timeout: float = 30.0  # spawn to `initialize` answered (observed: 0.12-0.25 s)
    server_request_timeout: float = 600.0  # the callback's time to answer a server request
    subscription_queue: int = 10_000  # notifications buffered per thread subscription
    close_grace: float = 5.0  # per step of close(): stdin closed, then SIGTERM, then SIGKILL
    exit_grace: float = 1.0  # after stdout ends, for the process to exit by itself
    start_attempts: int = 3  # per request() that finds no live process
    restart_backoff: float = 0.25  # doubled per recent crash and per failed attempt
    max_restart_backoff: float = 5.0
    stderr_tail_lines: int = 40
    stderr_line_chars: int = 2_000
    stderr_lines_per_second: float = 20.0  # logged; the rest are counted and summarised
    stderr_burst: int = 50


# -- subscriptions -------------------------------------------------------------------------------


class ThreadSubscription:
    """The notifications of one thread, in order, from one process generation.

    Iterate with `async for`; iteration ends when the subscription is closed, and raises
    AppServerGone when the process went away (after what was buffered before it did) or
    AppServerOverflow when the consumer fell `subscription_queue` notifications behind.
    """

    def __init__(self, owner: AppServer, thread_id: str, generation: int, capacity: int) -> None:
        self.thread_id = thread_id
        self.generation = generation
        self._owner = owner
        self._capacity = capacity
        self._buffer: deque[Notification] = deque()
        self._ready = asyncio.Event()
        self._failure: AppServerError | None = None
        self._closed = False

    def _deliver(self, note: Notification) -> None:
        if self._closed or self._failure is not None:
            return
        if len(self._buffer) >= self._capacity:
            self._fail(
                AppServerOverflow(
                    f"thread {self.thread_id}: subscriber fell {self._capacity} notifications behind"
                )
            )
            return
        self._buffer.append(note)
        self._ready.set()

    def _fail(self, error: AppServerError) -> None:
        # Stays registered (a cut subscriber's thread keeps being routed here and dropped)
        # until its owner closes it or the process goes.
        if self._failure is None and not self._closed:
            self._failure = error
        self._ready.set()

    @property
    def failure(self) -> AppServerError | None:
        return self._failure

    def close(self) -> None:
        """Stop receiving; iteration ends once the buffer is drained."""
        self._closed = True
        self._owner._forget(self)
        self._ready.set()

    def __aiter__(self) -> AsyncIterator[Notification]:
        return self

    async def __anext__(self) -> Notification:
        while True:
            if self._buffer:
                return self._buffer.popleft()
            if self._failure is not None:
                raise self._failure
            if self._closed:
                raise StopAsyncIteration
            self._ready.clear()
            await self._ready.wait()

    async def __aenter__(self) -> ThreadSubscription:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


# -- one process ---------------------------------------------------------------------------------


@dataclass
class _Pending:
    method: str
    future: asyncio.Future[Any]


class _StderrLog:
    """Logs stderr lines at most `rate` per second (bursts of `burst`); counts the rest and
    says how many were dropped once it logs again."""

    def __init__(self, rate: float, burst: int) -> None:
        self._rate = rate
        self._burst = float(burst)
        self._tokens = float(burst)
        self._stamp = time.monotonic()
        self.suppressed = 0

    def emit(self, line: str, generation: int) -> None:
        now = time.monotonic()
        self._tokens = min(self._burst, self._tokens + (now - self._stamp) * self._rate)
        self._stamp = now
        if self._tokens < 1.0:
            self.suppressed += 1
            return
        self._tokens -= 1.0
        if self.suppressed:
            log.warning("codex app-server [%d]: %d stderr lines not logged", generation, self.suppressed)
            self.suppressed = 0
        # Codex's own log lines carry their level: " ERROR ", " WARN ", " INFO "...
        level = logging.WARNING if " ERROR " in line else logging.INFO if " WARN " in line else logging.DEBUG
        log.log(level, "codex app-server [%d]: %s", generation, line)


class _Process:
    """One spawned app-server: its pipes, pending requests and helper tasks."""

    def __init__(self, generation: int, proc: asyncio.subprocess.Process, limits: AppServerLimits) -> None:
        self.generation = generation
        self.proc = proc
        self.pending: dict[RequestId, _Pending] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.stderr_tail: deque[str] = deque(maxlen=limits.stderr_tail_lines)
        self.stderr_log = _StderrLog(limits.stderr_lines_per_second, limits.stderr_burst)
        self.ready = False  # `initialize` answered and `initialized` sent
        self.closing = False  # close() asked it to stop: an exit is not a crash
        self.exiting = False  # _on_exit() is reaping it
        self.gone = asyncio.Event()
        self.failure: AppServerGone | None = None
        self.reader: asyncio.Task[None] | None = None
        self.stderr_reader: asyncio.Task[None] | None = None

    @property
    def alive(self) -> bool:
        return not self.gone.is_set()

    def signal_group(self, signum: int) -> None:
        """Signal the whole process group (the launcher and the native binary)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signum)


# -- the client ----------------------------------------------------------------------------------


class AppServer:
    """A supervised `codex app-server` (see the module docstring).

    `argv`: the command, e.g. `[codex, "app-server", "-c", "key=value"]`; `env`: the whole
    environment of the process (CODEX_HOME among it); `on_server_request`: answers server
    requests (returns the result object, raises ServerRequestRefused or anything else for an
    error answer); `handled_requests`: the server-request methods passed to it (others get
    -32601 at once); `on_notification`: gets notifications that belong to no subscribed thread
    (must not block; exceptions are logged); `opt_out`: notification methods switched off at
    `initialize`.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str | Path,
        client_name: str,
        on_server_request: ServerRequestHandler,
        client_version: str = __version__,
        handled_requests: frozenset[str] = SERVER_REQUEST_METHODS,
        on_notification: NotificationHandler | None = None,
        opt_out: Sequence[str] = DEFAULT_OPT_OUT_NOTIFICATIONS,
        limits: AppServerLimits | None = None,
    ) -> None:
        if not argv:
            raise ValueError("argv must name the codex binary")
        self._argv = list(argv)
        self._env = dict(env)
        self._cwd = str(cwd)
        self._client_name = client_name
        self._client_version = client_version
        self._on_server_request = on_server_request
        self._handled = handled_requests
        self._on_notification = on_notification
        self._opt_out = tuple(opt_out)
        self.limits = limits or AppServerLimits()
        self._ids = itertools.count(1)  # never reused across processes: no stale answer matches
        self._process: _Process | None = None
        self._generation = 0
        self._start_lock = asyncio.Lock()
        self._subscriptions: dict[str, ThreadSubscription] = {}
        self._exits: deque[float] = deque(maxlen=8)  # monotonic times of recent crashes
        self._closed = False
        self.server_info: InitializeResult = {}  # the last `initialize` result (userAgent, codexHome...)

    # -- public surface --------------------------------------------------------------------------

    @property
    def generation(self) -> int:
        """The number of the live process (1 for the first); 0 before the first start. Thread
        ids belong to one generation."""
        return self._generation

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.alive and self._process.ready

    @property
    def pid(self) -> int | None:
        return self._process.proc.pid if self._process is not None else None

    async def start(self) -> int:
        """Start the process if none is live (spawn, `initialize`, `initialized`); return its
        generation. Raises AppServerStartError after `start_attempts` failed attempts,
        AppServerClosed after close()."""
        return (await self._live()).generation

    async def request(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        generation: int | None = None,
    ) -> Any:
        """Send a request and return its result; starts (or restarts) the process if needed.

        With `generation`, the request goes only to that process: if it is gone, AppServerGone
        is raised instead of starting a new one (use it for anything naming a thread).

        Raises AppServerRpcError (a JSON-RPC error answer), AppServerTimeout, AppServerGone
        (the process died with the request pending, or `generation` is not live),
        AppServerStartError, AppServerClosed.
        """
        process = await self._live() if generation is None else self._pinned(generation)
        wait = self.limits.request_timeout if timeout is None else timeout
        return await self._call(process, method, params, wait)

    def subscribe(self, thread_id: str, *, generation: int | None = None) -> ThreadSubscription:
        """Route the notifications of `thread_id` to a new subscription (one per thread: a second
        one replaces the first, which ends). Subscribe before `turn/start`: `turn/started`
        arrives before its answer. Raises AppServerGone if `generation` (default: the current
        one) is not live."""
        process = self._pinned(self._generation if generation is None else generation)
        old = self._subscriptions.pop(thread_id, None)
        if old is not None:
            old.close()
        subscription = ThreadSubscription(self, thread_id, process.generation, self.limits.subscription_queue)
        self._subscriptions[thread_id] = subscription
        return subscription

    async def close(self) -> None:
        """Stop the process: stdin closed (it exits on EOF, ~30 ms), then SIGTERM, then SIGKILL
        to its group, each after `close_grace`; reap it; fail what is pending with
        AppServerClosed. Idempotent; no process is started afterwards."""
        self._closed = True
        process = self._process
        if process is not None:
            await self._stop(process)  # a start in progress then fails its `initialize` at once
        async with self._start_lock:  # ...or sees `_closed` right after spawning, and stops it
            pass

    async def _stop(self, process: _Process, *, gently: bool = True) -> None:
        """End `process` and its helper tasks: stdin closed, SIGTERM, SIGKILL to the group, each
        given `close_grace` (only SIGKILL unless `gently`). What waits on it gets AppServerClosed."""
        if process.alive:
            process.closing = True
            if gently:
                with contextlib.suppress(Exception):
                    process.proc.stdin.close()  # type: ignore[union-attr]
            steps = (None, signal.SIGTERM, signal.SIGKILL) if gently else (signal.SIGKILL,)
            for signum in steps:
                if signum is not None:
                    process.signal_group(signum)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.limits.close_grace):
                        await process.gone.wait()
                    break
            if process.alive and process.reader is not None:
                if not process.exiting:  # stdout held open by something outside the group
                    process.reader.cancel()
                await asyncio.gather(process.reader, return_exceptions=True)
                if process.alive:  # the reader was cancelled, maybe inside _on_exit
                    process.exiting = False
                    await self._on_exit(process, "did not stop")
        tasks = [task for task in process.tasks if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def __aenter__(self) -> AppServer:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # -- starting ----------------------------------------------------------------------------------

    def _pinned(self, generation: int) -> _Process:
        if self._closed:
            raise AppServerClosed("codex app-server client is closed", generation=generation)
        process = self._process
        if process is None or process.generation != generation or not process.ready:
            raise AppServerGone(
                f"codex app-server generation {generation} is gone (now {self._generation})",
                generation=generation,
            )
        if not process.alive:
            assert process.failure is not None
            raise process.failure
        return process

    async def _live(self) -> _Process:
        process = self._process
        if process is not None and process.alive and process.ready and not self._closed:
            return process
        async with self._start_lock:
            if self._closed:
                raise AppServerClosed("codex app-server client is closed", generation=self._generation)
            process = self._process
            if process is not None and process.alive and process.ready:
                return process
            failure: AppServerError | None = None
            for attempt in range(self.limits.start_attempts):
                delay = self._backoff(attempt)
                if delay > 0:
                    await asyncio.sleep(delay)  # backoff between real processes, never a wait for state
                try:
                    return await self._spawn()
                except AppServerClosed:
                    raise
                except AppServerError as exc:
                    failure = exc
                    log.warning("codex app-server start attempt %d failed: %s", attempt + 1, exc)
            gone = failure if isinstance(failure, AppServerGone) else None
            raise AppServerStartError(
                f"codex app-server did not start after {self.limits.start_attempts} attempts: {failure}",
                exit_code=gone.exit_code if gone else None,
                stderr_tail=gone.stderr_tail if gone else (),
                generation=self._generation,
            ) from failure

    def _backoff(self, attempt: int) -> float:
        now = time.monotonic()
        recent = sum(1 for stamp in self._exits if now - stamp < _CRASH_WINDOW)
        exponent = attempt + recent - 1
        if exponent < 0:
            return 0.0
        return min(self.limits.max_restart_backoff, self.limits.restart_backoff * 2.0**exponent)

    async def _spawn(self) -> _Process:
        generation = self._generation + 1
        try:
            proc = await asyncio.create_subprocess_exec(
                *self._argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self._env,
                cwd=self._cwd,
                limit=self.limits.max_line_bytes,
                start_new_session=True,  # its own process group: see signal_group()
            )
        except OSError as exc:
            raise AppServerStartError(f"cannot run {self._argv[0]}: {exc}", generation=generation) from exc
        process = _Process(generation, proc, self.limits)
        self._process = process
        process.stderr_reader = self._spawn_task(process, self._drain_stderr(process), "stderr")
        process.reader = self._spawn_task(process, self._read_stdout(process), "stdout")
        if self._closed:  # close() ran while the process was being spawned
            await self._stop(process, gently=False)
            raise AppServerClosed("codex app-server client is closed", generation=generation)
        params = initialize_params(self._client_name, self._client_version, opt_out=self._opt_out)
        try:
            result = await self._call(process, INITIALIZE, params, self.limits.start_timeout)
            await self._write(process, encode_notification(INITIALIZED))
        except AppServerError as exc:
            await self._stop(process, gently=False)
            if isinstance(exc, AppServerGone):
                raise
            raise AppServerGone(
                f"initialize failed: {exc}",
                exit_code=proc.returncode,
                stderr_tail=process.stderr_tail,
                generation=generation,
            ) from exc
        process.ready = True
        self._generation = generation
        self.server_info = cast(InitializeResult, result) if isinstance(result, dict) else {}
        log.info("codex app-server [%d] started, pid %d", generation, proc.pid)
        return process

    def _spawn_task(
        self, process: _Process, coro: Coroutine[Any, Any, None], name: str
    ) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro, name=f"app-server-{process.generation}-{name}")
        process.tasks.add(task)
        task.add_done_callback(process.tasks.discard)
        return task

    # -- sending ---------------------------------------------------------------------------------

    async def _call(
        self, process: _Process, method: str, params: Mapping[str, Any] | None, timeout: float
    ) -> Any:
        request_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        process.pending[request_id] = _Pending(method, future)
        try:
            async with asyncio.timeout(timeout):
                await self._write(process, encode_request(request_id, method, params))
                return await future
        except TimeoutError:
            raise AppServerTimeout(f"codex app-server did not answer {method} within {timeout} s") from None
        finally:
            process.pending.pop(request_id, None)

    async def _write(self, process: _Process, line: bytes) -> None:
        if not process.alive:
            assert process.failure is not None
            raise process.failure
        stdin = process.proc.stdin
        assert stdin is not None
        try:
            stdin.write(line)
            await stdin.drain()
        except ConnectionError as exc:
            # The process is exiting; its reader reports why (bounded wait for the exit code).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.limits.exit_grace + 1.0):
                    await process.gone.wait()
            if process.failure is not None:
                raise process.failure from exc
            raise AppServerGone(
                f"codex app-server stdin closed: {exc}", generation=process.generation
            ) from exc

    # -- reading ---------------------------------------------------------------------------------

    async def _read_stdout(self, process: _Process) -> None:
        stdout = process.proc.stdout
        assert stdout is not None
        reason = "exited"
        try:
            while True:
                try:
                    line = await stdout.readuntil(b"\n")
                except asyncio.IncompleteReadError as exc:
                    if exc.partial.strip():
                        self._dispatch(process, exc.partial)
                    break
                except asyncio.LimitOverrunError:
                    # Framing is lost and the line may have been an answer or turn/completed:
                    # carrying on could leave a request or a turn waiting forever.
                    reason = f"wrote a line over {self.limits.max_line_bytes} bytes and was stopped"
                    break
                if line.strip():
                    self._dispatch(process, line)
        except Exception as exc:  # the reader must end by reporting, whatever happened
            log.exception("codex app-server [%d]: reader failed", process.generation)
            reason = f"could not be read ({type(exc).__name__})"
        await self._on_exit(process, reason)

    def _dispatch(self, process: _Process, line: bytes) -> None:
        try:
            message = parse_message(line)
        except ProtocolError as exc:
            log.warning(
                "codex app-server [%d] wrote a line that is not JSON-RPC (%s): %r",
                process.generation,
                exc,
                line[:200],
            )
            return
        if isinstance(message, Response | ErrorResponse):
            pending = process.pending.pop(message.id, None)
            if pending is None or pending.future.done():
                log.debug("codex app-server [%d]: late answer to %r", process.generation, message.id)
            elif isinstance(message, Response):
                pending.future.set_result(message.result)
            else:
                error = message.error
                pending.future.set_exception(
                    AppServerRpcError(pending.method, error.code, error.message, error.data)
                )
        elif isinstance(message, Notification):
            self._route(message)
        else:
            self._spawn_task(process, self._answer(process, message), f"answer-{message.id}")

    def _route(self, note: Notification) -> None:
        thread_id = note.thread_id
        subscription = self._subscriptions.get(thread_id) if thread_id is not None else None
        if subscription is not None:
            subscription._deliver(note)
            return
        if self._on_notification is None:
            log.debug("codex app-server: unrouted %s", note.method)
            return
        try:
            self._on_notification(note)
        except Exception:
            log.exception("codex app-server: notification handler failed on %s", note.method)

    async def _answer(self, process: _Process, request: ServerRequest) -> None:
        if request.method not in self._handled:
            refusal = f"codexgate does not handle {request.method}"
            await self._reply(process, encode_error(request.id, ErrorCode.METHOD_NOT_FOUND, refusal))
            return
        try:
            async with asyncio.timeout(self.limits.server_request_timeout):
                result = await self._on_server_request(request)
            line = encode_result(request.id, result)
        except TimeoutError:
            limit = self.limits.server_request_timeout
            line = encode_error(request.id, ErrorCode.NO_ANSWER, f"codexgate did not answer within {limit} s")
        except ServerRequestRefused as exc:
            line = encode_error(request.id, exc.code, exc.message)
        except Exception as exc:
            log.exception("codex app-server [%d]: handler for %s failed", process.generation, request.method)
            failed = f"codexgate failed: {type(exc).__name__}"
            line = encode_error(request.id, ErrorCode.INTERNAL_ERROR, failed)
        await self._reply(process, line)

    async def _reply(self, process: _Process, line: bytes) -> None:
        # A dead process needs no answer: its turn is gone with it.
        with contextlib.suppress(AppServerGone):
            await self._write(process, line)

    async def _drain_stderr(self, process: _Process) -> None:
        stderr = process.proc.stderr
        assert stderr is not None
        limit = self.limits.stderr_line_chars
        partial = b""
        while chunk := await stderr.read(64 * 1024):
            *lines, partial = (partial + chunk).split(b"\n")
            if len(partial) > limit:  # a line without end: log it in pieces, memory stays bounded
                lines.append(partial)
                partial = b""
            for raw in lines:
                self._stderr_line(process, raw[:limit])
        if partial:
            self._stderr_line(process, partial[:limit])

    def _stderr_line(self, process: _Process, raw: bytes) -> None:
        line = raw.decode("utf-8", "replace").rstrip()
        if line:
            process.stderr_tail.append(line)
            process.stderr_log.emit(line, process.generation)

    # -- exit ------------------------------------------------------------------------------------

    async def _on_exit(self, process: _Process, reason: str) -> None:
        """The one place a process is declared gone: reap it, then fail what waits on it."""
        if process.exiting:
            return
        process.exiting = True
        proc = process.proc
        if reason == "exited":
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.limits.exit_grace):
                    await proc.wait()
        process.signal_group(signal.SIGKILL)  # what is left of the group, orphans included
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.limits.close_grace):
                await proc.wait()
        stderr_reader = process.stderr_reader
        if stderr_reader is not None:  # its last lines explain the exit
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.limits.exit_grace):
                    await asyncio.wait({stderr_reader})
            stderr_reader.cancel()
        tail = list(process.stderr_tail)
        code = proc.returncode
        if process.closing:
            failure: AppServerGone = AppServerClosed(
                "codex app-server client is closed",
                exit_code=code,
                stderr_tail=tail,
                generation=process.generation,
            )
        else:
            self._exits.append(time.monotonic())
            last = " | ".join(tail[-5:]) or "(no stderr)"
            failure = AppServerGone(
                f"codex app-server [{process.generation}] {reason} (exit code {code}); last stderr: {last}",
                exit_code=code,
                stderr_tail=tail,
                generation=process.generation,
            )
            log.warning("%s", failure)
        process.failure = failure
        process.gone.set()
        for pending in process.pending.values():
            if not pending.future.done():
                pending.future.set_exception(failure)
        process.pending.clear()
        for subscription in [s for s in self._subscriptions.values() if s.generation == process.generation]:
            subscription._fail(failure)
            self._forget(subscription)
        for task in list(process.tasks):  # handlers still answering server requests
            if task is not asyncio.current_task():
                task.cancel()

    def _forget(self, subscription: ThreadSubscription) -> None:
        if self._subscriptions.get(subscription.thread_id) is subscription:
            del self._subscriptions[subscription.thread_id]
