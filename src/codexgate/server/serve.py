"""Running the gateway under uvicorn: exposure check, connection limits, file-descriptor budget,
key reload on SIGHUP, and log redaction on the process's handlers."""

from __future__ import annotations

import asyncio
import gc
import ipaddress
import logging
import signal
import socket
from typing import Any

import uvicorn
from uvicorn.config import LOGGING_CONFIG

from codexgate.config import ConfigError, Settings
from codexgate.redact import RedactingFilter, Redactor, redact_url
from codexgate.server.app import GatewayApp
from codexgate.server.auth import ENV_KEYS
from codexgate.server.limits import ConnectionLimits, limited_protocol

log = logging.getLogger("codexgate")

_FDS_PER_CONNECTION = 2  # the client's connection and its upstream request
_FDS_SPARE = 128  # listening socket, logs, config reads, discovery probes


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
        f"use the upstream. Configure [[api_keys]] or {ENV_KEYS}, or pass --allow-unauthenticated."
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
    )


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
        where = redact_url(upstream.base_url) if upstream.base_url else f"{upstream.codex_bin} app-server"
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
    never garbage, so it is moved out of the collector's sight (`gc.freeze`); and the
    collector runs less often (_GC_THRESHOLD)."""
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(_GC_THRESHOLD, gen1, gen2)


def run(settings: Settings, app: GatewayApp, *, sockets: list[socket.socket] | None = None) -> None:
    """Serve `app` until SIGINT/SIGTERM. SIGHUP re-reads the API keys.
    Raises ConfigError when the settings expose an unauthenticated gateway."""
    guard = app.guard
    check_exposure(settings, bool(guard and guard.keys))
    limits = connection_limits(settings, fit_open_file_limit(settings.max_connections))
    config = uvicorn_config(app, settings, limits)
    redact_handlers(app.redactor)
    log_startup(settings, app)
    server = uvicorn.Server(config)
    tune_garbage_collector()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        hup = getattr(signal, "SIGHUP", None)
        if guard is not None and hup is not None:
            loop.add_signal_handler(hup, guard.reload)
        try:
            await server.serve(sockets=sockets)
        finally:
            if guard is not None and hup is not None:
                loop.remove_signal_handler(hup)

    with asyncio.Runner(loop_factory=config.get_loop_factory()) as runner:
        runner.run(main())
