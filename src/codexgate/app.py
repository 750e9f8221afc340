"""Builds the gateway from settings: upstreams, routes, the transport and the ASGI app."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from codexgate.backends.base import Backend
from codexgate.backends.chat import ChatBackend
from codexgate.backends.codex import CodexBackend, CodexTarget
from codexgate.backends.http_stream import UpstreamTarget
from codexgate.backends.log import OnceLog
from codexgate.backends.responses import ResponsesBackend
from codexgate.backends.transport import AiohttpTransport, Transport
from codexgate.config import ModelConfig, Settings, UpstreamConfig
from codexgate.discovery import LOCAL_SERVERS, discover
from codexgate.memo import Memo
from codexgate.redact import (
    Redactor,
    basic_credentials,
    install_log_redaction,
    split_url_credentials,
    url_secrets,
)
from codexgate.routing import Router
from codexgate.server.app import GatewayApp
from codexgate.server.auth import KeyRing, resolve_api_keys
from codexgate.server.faces.chat import ChatFace
from codexgate.server.faces.responses import CompactFace, RequestReader, ResponsesFace
from codexgate.server.guard import AccessPolicy, Guard
from codexgate.server.state import ResponseState
from codexgate.server.websocket import SocketLimits
from codexgate.store import open_store
from codexgate.store.base import Retention, Store

log = logging.getLogger("codexgate")

_REDISCOVER_SECONDS = 5.0


def upstream_target(
    upstream: UpstreamConfig, settings: Settings, environ: Mapping[str, str]
) -> UpstreamTarget:
    headers = dict(upstream.headers)
    if upstream.api_key_env:
        key = environ.get(upstream.api_key_env)
        if key:
            headers.setdefault("authorization", f"Bearer {key}")
        else:
            log.warning(
                "upstream %s: environment variable %s is not set; sending no key",
                upstream.name,
                upstream.api_key_env,
            )
    # Credentials in the URL become a Basic header: a URL is printed in logs and error
    # messages, and aiohttp refuses a URL with credentials next to an Authorization header.
    assert upstream.base_url is not None, "an HTTP upstream has a base_url (config checks it)"
    base_url, user, password = split_url_credentials(upstream.base_url)
    if user is not None or password is not None:
        if any(name.lower() == "authorization" for name in headers):
            log.warning("upstream %s: the credentials in its URL are not sent, its API key is", upstream.name)
        else:
            headers["authorization"] = f"Basic {basic_credentials(user or '', password)}"
    dialect = upstream.dialect()
    return UpstreamTarget(
        name=upstream.name,
        base_url=base_url.rstrip("/"),
        headers=headers,
        dialect=dialect,
        connect_timeout=upstream.connect_timeout or settings.connect_timeout,
        idle_timeout=upstream.idle_timeout or settings.idle_timeout,
        max_retries=upstream.max_retries if upstream.max_retries is not None else settings.max_retries,
        retry_backoff=settings.retry_backoff,
        max_retry_wait=settings.max_retry_wait,
        models=tuple(upstream.models),
        learn_context_window=upstream.learn_context_window,
        max_output_bytes=upstream.max_output_bytes or settings.max_output_bytes,
        max_request_seconds=upstream.max_request_seconds or settings.max_request_seconds,
    )


def chat_backend(
    upstream: UpstreamConfig,
    settings: Settings,
    environ: Mapping[str, str],
    transport: Transport,
    once: OnceLog,
) -> ChatBackend:
    target = upstream_target(upstream, settings, environ)
    return ChatBackend(target, transport, once, history=history_memo(settings))


def history_memo(settings: Settings) -> Memo[Any] | None:
    """What the gateway remembers of each conversation between turns (memo.py), within
    `history_cache_mb`; None when that is 0."""
    budget = settings.history_cache_mb * 1024 * 1024
    return Memo(budget) if budget > 0 else None


def model_backend(upstream: Backend, model: ModelConfig) -> ChatBackend:
    """The upstream's backend with the model's own settings layered on its dialect."""
    assert isinstance(upstream, ChatBackend), "routes of a chat upstream"
    target = replace(upstream.target, dialect=model.dialect_for(upstream.target.dialect))
    return ChatBackend(
        target, upstream.transport, upstream.once, upstream.counts, upstream.windows, upstream.history
    )


def responses_backend(
    upstream: UpstreamConfig,
    settings: Settings,
    environ: Mapping[str, str],
    transport: Transport,
    once: OnceLog,
) -> ResponsesBackend:
    target = upstream_target(upstream, settings, environ)
    return ResponsesBackend(target, transport, once, tool_format=upstream.tool_format)


def responses_model_backend(upstream: Backend, model: ModelConfig) -> ResponsesBackend:
    """The Responses upstream's backend with the model's own settings layered on its dialect."""
    assert isinstance(upstream, ResponsesBackend), "routes of a responses upstream"
    target = replace(upstream.target, dialect=model.dialect_for(upstream.target.dialect))
    return ResponsesBackend(target, upstream.transport, upstream.once, upstream.counts, upstream.tool_format)


def codex_backend(
    upstream: UpstreamConfig,
    settings: Settings,
    environ: Mapping[str, str],
    transport: Transport,
    once: OnceLog,
) -> CodexBackend:
    """The Codex agent through `codex app-server` (started on first use)."""
    stages = upstream.model_fields_set  # stages an agent's answer needs only when asked for
    target = CodexTarget(
        name=upstream.name,
        codex_bin=upstream.codex_bin,
        codex_home=upstream.codex_home,
        workdir=os.path.abspath(os.path.expanduser(upstream.workdir or os.getcwd())),
        sandbox=upstream.sandbox,
        approval=upstream.approval,
        approval_answer=upstream.approval_answer,
        tool_result_timeout=upstream.tool_result_timeout,
        max_threads=upstream.max_threads,
        models=tuple(upstream.models),
        idle_timeout=upstream.idle_timeout or settings.idle_timeout,
        max_request_seconds=upstream.max_request_seconds or settings.max_request_seconds,
        max_output_bytes=upstream.max_output_bytes or settings.max_output_bytes,
        loop_guard=upstream.loop_guard,
        think_tags=upstream.think_tags if "think_tags" in stages else "off",
        text_tool_calls=upstream.text_tool_calls if "text_tool_calls" in stages else "off",
    )
    return CodexBackend(target, environ)


def same_backend(upstream: Backend, model: ModelConfig) -> Backend:
    """Routes of an upstream that takes the model per request share its backend."""
    return upstream


@dataclass(frozen=True, slots=True)
class _Kind:
    """How to build the backend of one kind of upstream, and its routes."""

    build: Callable[[UpstreamConfig, Settings, Mapping[str, str], Transport, OnceLog], Backend]
    for_model: Callable[[Backend, ModelConfig], Backend]


# One line per kind of upstream (config.UpstreamKind).
BACKEND_KINDS: dict[str, _Kind] = {
    "chat": _Kind(chat_backend, model_backend),
    "responses": _Kind(responses_backend, responses_model_backend),
    "codex": _Kind(codex_backend, same_backend),
}


def build_backend(
    upstream: UpstreamConfig,
    settings: Settings,
    environ: Mapping[str, str],
    transport: Transport,
    once: OnceLog,
) -> Backend:
    return BACKEND_KINDS[upstream.kind].build(upstream, settings, environ, transport, once)


class _LocalServerFinder:
    """With no upstream configured, looks for a local model server at startup and again (at
    most every few seconds) when a request arrives, so a server started later is picked up."""

    def __init__(
        self,
        settings: Settings,
        router: Router[Backend],
        transport: Transport,
        once: OnceLog,
        environ: Mapping[str, str],
    ) -> None:
        self._settings, self._router, self._transport = settings, router, transport
        self._once, self._environ = once, environ
        self._last_probe = float("-inf")

    async def find(self) -> None:
        if not self._settings.discover or self._router.backends:
            return
        now = asyncio.get_running_loop().time()
        if now - self._last_probe < _REDISCOVER_SECONDS:
            return
        self._last_probe = now
        found = await discover(self._transport)
        if found is None:
            self._once.warning(
                "no upstream configured and no local model server found; requests "
                "fail until one is given with --upstream"
            )
            return
        name, url = found
        log.info("no upstream configured; using %s at %s", name, url)
        upstream = UpstreamConfig(name=name.lower().replace(" ", "-").replace(".", ""), base_url=url)
        backend = build_backend(upstream, self._settings, self._environ, self._transport, self._once)
        self._router.backends[upstream.name] = backend


def upstream_secrets(settings: Settings, environ: Mapping[str, str]) -> list[str]:
    """The upstream credentials this process holds: API keys and URL passwords."""
    found: list[str] = []
    for upstream in settings.all_upstreams():
        if upstream.api_key_env and environ.get(upstream.api_key_env):
            found.append(environ[upstream.api_key_env])
        if upstream.base_url:
            found += url_secrets(upstream.base_url)
    return found


def _with_log_redaction(
    redactor: Redactor, startup: Callable[[], Any], transport: Transport, router: Router[Backend]
) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """Lifespan hooks: mask secrets in the gateway's log records while it serves; release the
    backends (and the transport) when it stops."""
    uninstall: list[Callable[[], None]] = []

    async def on_startup() -> None:
        uninstall.append(install_log_redaction(redactor))
        await startup()

    async def on_shutdown() -> None:
        try:
            await asyncio.gather(*(backend.aclose() for backend in router.backends.values()))
            await transport.aclose()
        finally:
            while uninstall:
                uninstall.pop()()

    return on_startup, on_shutdown


def build_app(
    settings: Settings,
    transport: Transport | None = None,
    environ: Mapping[str, str] | None = None,
    config_file: Path | None = None,
) -> GatewayApp:
    """The ASGI app for these settings. `transport` is the seam tests replace; `config_file` is
    where API keys are re-read from on reload. Raises ConfigError for an API key that is
    configured but unset or too short."""
    environ = os.environ if environ is None else environ
    keys = resolve_api_keys(settings.api_keys, environ)
    redactor = Redactor([*upstream_secrets(settings, environ), *keys.values()])
    policy = AccessPolicy(
        settings.allow_unauthenticated, tuple(settings.allowed_hosts), tuple(settings.cors_origins)
    )
    guard = Guard(KeyRing(keys), policy, redactor=redactor, config_file=config_file, environ=environ)
    transport = transport or AiohttpTransport()
    once = OnceLog()
    router: Router[Backend] = Router()
    kinds: dict[str, _Kind] = {}
    for upstream in settings.all_upstreams():
        router.backends[upstream.name] = build_backend(upstream, settings, environ, transport, once)
        kinds[upstream.name] = BACKEND_KINDS[upstream.kind]
    for model in settings.models:
        name = model.upstream or next(iter(router.backends))
        router.add_model(model, kinds[name].for_model(router.backends[name], model))
    if settings.discover:
        router.discovery_candidates = [f"{name} {url}" for name, url in LOCAL_SERVERS]

    finder = _LocalServerFinder(settings, router, transport, once, environ)
    on_startup, on_shutdown = _with_log_redaction(redactor, finder.find, transport, router)
    return GatewayApp(
        router,
        max_body_bytes=settings.max_body_bytes,
        on_startup=on_startup,
        on_shutdown=on_shutdown,
        on_no_upstream=finder.find,
        guard=guard,
        redactor=redactor,
        body_timeout=settings.body_timeout,
        faces={
            "/responses": ResponsesFace(RequestReader(history_memo(settings))),
            "/responses/compact": CompactFace(),
            "/chat/completions": ChatFace(),
        },
        state=ResponseState(response_store(settings)),
        socket_limits=SocketLimits(
            max_connections=settings.websocket_max_connections,
            max_lifetime=settings.websocket_max_lifetime,
            max_memory=int(settings.websocket_max_memory_mb * 1024 * 1024),
        ),
    )


def response_store(settings: Settings) -> Store | None:
    """The configured store, not yet opened (the app opens it at startup); None for
    `store = "none"`."""
    if settings.store == "none":
        return None
    retention = Retention(
        max_age=settings.store_max_age_days * 24 * 3600, max_bytes=settings.store_max_mb * 1024 * 1024
    )
    path = Path(settings.store_path).expanduser() if settings.store_path else None
    return open_store(settings.store, path=path, url=settings.store_url, retention=retention)
