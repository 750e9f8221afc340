"""Running the gateway under uvicorn: exposure check, connection limits, file-descriptor budget,
key reload on SIGHUP, the stop on SIGTERM and SIGINT, and log redaction on the process's
handlers."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import ipaddress
import logging
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

import uvicorn
from uvicorn.config import LOGGING_CONFIG
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from codexgate.config import API_KEYS_ENV, CodexUpstream, ConfigError, HttpUpstream, Settings
from codexgate.redact import RedactingFilter, Redactor, redact_url
from codexgate.server.app import GatewayApp
from codexgate.server.connection_limits import ConnectionLimits, limited_protocol
from codexgate.server.logs import uvicorn_log_config
from codexgate.server.malloc_trim import give_back_memory, give_back_now

log = logging.getLogger("codexgate")

_FDS_PER_CONNECTION = 2  # the client's connection and its upstream request
_FDS_SPARE = 128  # listening socket, logs, config reads, discovery probes
# Once the open responses were told to end: how long they may take to write their terminal
# event, then how long uvicorn waits for the connections before it cancels what is left.
_ENDING_SECONDS = 3.0
_CLOSING_SECONDS = 3  # uvicorn takes whole seconds


def is_loopback_host(host: str) -> bool:
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(settings: Settings, has_keys: bool) -> None:
    """Refuse to listen beyond loopback with no API keys, unless explicitly allowed.
    Raises ConfigError with the one line to print."""
    if has_keys or settings.allow_unauthenticated or is_loopback_host(settings.host):
        return
    raise ConfigError(
        f"refusing to listen on {settings.host} without API keys: anyone who can reach it could "
        f"use the upstream. Configure [[api_keys]] or {API_KEYS_ENV}, or pass --allow-unauthenticated."
    )


def connection_limits(settings: Settings, max_connections: int | None = None) -> ConnectionLimits:
    return ConnectionLimits(
        header_timeout=settings.header_timeout,
        max_header_bytes=settings.max_header_bytes,
        max_connections=max_connections or settings.max_connections,
        max_idle_connections=settings.max_idle_connections,
    )


def fit_open_file_limit(max_connections: int) -> int:
    """Raise the soft open-file limit toward what `max_connections` needs (up to the hard
    limit) and return the number of connections it allows."""
    try:
        import resource
    except ImportError:  # not a Unix: nothing to adjust
        return max_connections
    wanted = max_connections * _FDS_PER_CONNECTION + _FDS_SPARE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return max_connections
    allowed = max(1, (soft - _FDS_SPARE) // _FDS_PER_CONNECTION)
    log.warning(
        "the open-file limit (%d) allows %d connections, not max_connections=%d; raise `ulimit -n`",
        soft,
        allowed,
        max_connections,
    )
    return allowed


def uvicorn_config(
    app: Any, settings: Settings, limits: ConnectionLimits, log_config: Any = LOGGING_CONFIG
) -> uvicorn.Config:
    """uvicorn as codexgate runs it: uvloop, the limited httptools protocol, and uvicorn's own
    `limit_concurrency` left off (it counts idle keep-alive connections against requests; the
    protocol's cap closes idle ones instead)."""
    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http=limited_protocol(limits),
        ws="websockets-sansio",
        ws_max_size=settings.max_body_bytes,  # a response.create frame carries a whole request
        ws_ping_interval=20.0,
        ws_ping_timeout=60.0,  # a long turn is silent between events; pings keep it honest
        lifespan="on",
        log_level=settings.log_level.lower(),
        timeout_keep_alive=max(1, round(settings.keep_alive_timeout)),
        access_log=False,
        log_config=log_config,
        # After StoppingServer's grace period and the terminal events: a backstop, not a grace.
        timeout_graceful_shutdown=_CLOSING_SECONDS,
    )


class StoppingServer(uvicorn.Server):
    """uvicorn's server with the gateway's stop. SIGTERM (containers, rolling restarts): stop
    accepting connections and close the idle ones, tell the app (`GatewayApp.on_stopping`: it
    refuses new responses, closes idle WebSockets, ends the streams that never end on their own),
    give the open responses `grace` seconds to finish, then end each one still open with a
    terminal event (server/stopping.py), and only then let uvicorn finish. SIGINT (Ctrl-C): one
    line on the terminal, then the same with no grace; after a SIGTERM it cuts the grace short.

    uvicorn's own signal handlers re-raise the signal once the server stopped, for the caller to
    act on; under asyncio.Runner that is a KeyboardInterrupt traceback, and a second SIGINT
    (`uv run` forwards a terminal's Ctrl-C to the process again ~0.2 s after the terminal sent
    it) lands in a half-stopped loop. So these handlers replace uvicorn's, and once a signal
    stopped the server the process ignores SIGINT and SIGTERM until it exits."""

    def __init__(self, config: uvicorn.Config, app: GatewayApp, grace: float = 30.0) -> None:
        super().__init__(config)
        self._app = app
        self.grace = grace
        self.stopped_by: int | None = None  # the first signal that came
        self._hurried = False
        self._loop: asyncio.AbstractEventLoop | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield  # signals reach the main thread only
            return
        self._loop = asyncio.get_running_loop()
        stops = (signal.SIGINT, signal.SIGTERM)
        previous = {sig: signal.signal(sig, self._on_signal) for sig in stops}
        try:
            yield
        finally:
            for sig in stops:
                signal.signal(sig, previous[sig] if self.stopped_by is None else signal.SIG_IGN)

    def _on_signal(self, sig: int, frame: FrameType | None) -> None:
        # Runs between two bytecodes of whatever the loop was doing: hand over to the loop.
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.stop, sig)

    def stop(self, sig: int) -> None:
        """What a signal does, in the loop: SIGTERM stops with the grace, SIGINT without."""
        if self.stopped_by is None:
            self.stopped_by = sig
            if sig != signal.SIGINT:
                log.info(
                    "stopping (%s): open responses may finish within %g s (shutdown_grace)",
                    signal.Signals(sig).name,
                    self.grace,
                )
        if sig == signal.SIGINT and not self._hurried:
            self._hurried = True
            print("stopping...", file=sys.stderr, flush=True)
            self._app.streams.hurry()
        self.should_exit = True

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # Stop listening, and close idle connections, before the grace period rather than after
        # it (uvicorn's shutdown does both again, harmlessly). Its shutdown would also close
        # every WebSocket at once (1012), responses in flight included: the app closes them.
        for listener in self.servers:
            listener.close()
        for connection in list(self.server_state.connections):
            if isinstance(connection, HttpToolsProtocol | H11Protocol):
                connection.shutdown()  # idle: closed; a response in flight: closed after it
        for hook in self._app.on_stopping:
            try:
                hook()
            except Exception:
                log.exception("a stopping hook failed")
        streams = self._app.streams
        if not await streams.drained(self.grace):
            log.info("ending %d open responses (server_shutting_down)", len(streams))
            streams.end()
            await streams.ended(_ENDING_SECONDS)
        await super().shutdown(sockets)


def redact_handlers(redactor: Redactor) -> None:
    """Mask secrets on every handler the process logs through, including records of loggers
    created after startup."""
    log_filter = RedactingFilter(redactor)
    for logger in (logging.getLogger(), logging.getLogger("uvicorn"), logging.getLogger("uvicorn.access")):
        for handler in logger.handlers:
            handler.addFilter(log_filter)


def log_startup(settings: Settings, app: GatewayApp) -> None:
    """What the gateway serves, with no secret in it: URL credentials masked, keys by name."""
    for upstream in settings.all_upstreams():
        if isinstance(upstream, HttpUpstream):
            where = redact_url(upstream.base_url)
        elif isinstance(upstream, CodexUpstream):
            where = f"{upstream.codex_bin} app-server"
        else:  # embedded
            where = f"llama-server run by the gateway ({upstream.model_path or 'SmolLM2-135M'})"
        log.info("upstream %s (%s): %s", upstream.name, upstream.kind, where)
    if app.guard is not None and app.guard.keys:
        log.info("API keys in force: %s", ", ".join(app.guard.keys.names))


# Objects allocated, net of those freed, before the cyclic collector runs. Python's default,
# 700, made a collection run every request or so: decoding a Codex request (tens of KB)
# allocates thousands of containers, which the collector then scanned, promoted and scanned
# again, in the way of the request. Nearly all of them are freed by reference counting
# anyway; at 20,000 a collection runs every few dozen requests (measured on 150 Codex-sized
# requests: 117 collections taking 15-20 ms in all, against 2 taking 9-13 ms).
_GC_THRESHOLD = 20_000


def tune_garbage_collector() -> None:
    """For a long-running server: what was loaded at startup (modules, settings, the app) is
    never garbage, so it is moved out of the collector's sight (`gc.freeze`); the collector
    runs less often (_GC_THRESHOLD); and the memory startup used and freed is returned."""
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(_GC_THRESHOLD, gen1, gen2)
    give_back_now()  # what the collection and loading freed, back to the system


def run(settings: Settings, app: GatewayApp, *, sockets: list[socket.socket] | None = None) -> int | None:
    """Serve `app` until SIGTERM or SIGINT (StoppingServer); return that signal's number.
    SIGHUP re-reads the API keys. Raises ConfigError when the settings expose an
    unauthenticated gateway."""
    guard = app.guard
    check_exposure(settings, bool(guard and guard.keys))
    limits = connection_limits(settings, fit_open_file_limit(settings.max_connections))
    config = uvicorn_config(app, settings, limits, uvicorn_log_config(settings.log_format))
    redact_handlers(app.redactor)
    log_startup(settings, app)
    server = StoppingServer(config, app, settings.shutdown_grace)
    tune_garbage_collector()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        hup = getattr(signal, "SIGHUP", None)
        if guard is not None and hup is not None:
            loop.add_signal_handler(hup, guard.reload)
        streams = app.streams
        trimmer = asyncio.create_task(give_back_memory(lambda: len(streams), lambda: streams.started))
        try:
            await server.serve(sockets=sockets)
        finally:
            trimmer.cancel()
            if guard is not None and hup is not None:
                loop.remove_signal_handler(hup)

    with asyncio.Runner(loop_factory=config.get_loop_factory()) as runner:
        runner.run(main())
    return server.stopped_by
