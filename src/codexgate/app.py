"""Builds the gateway from settings: upstreams (a backend per kind, BACKEND_KINDS), routes, the
transport and the ASGI app."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from codexgate.backends.anthropic.factory import ANTHROPIC
from codexgate.backends.base import Backend
from codexgate.backends.chat.factory import CHAT
from codexgate.backends.codex.factory import CODEX
from codexgate.backends.discovery import LOCAL_SERVERS, discover
from codexgate.backends.embedded.backend import EmbeddedBackend
from codexgate.backends.embedded.factory import EMBEDDED, build_embedded
from codexgate.backends.embedded.fallback import FALLBACK_NOTE, EmbeddedFallback, embedded_upstream
from codexgate.backends.http.h1 import DefaultTransport
from codexgate.backends.http.tap import TappedTransport
from codexgate.backends.http.transport import Transport
from codexgate.backends.kinds import BackendKind, Building
from codexgate.backends.log import OnceLog
from codexgate.backends.responses.factory import RESPONSES
from codexgate.config import ChatUpstream, HttpUpstream, ModelConfig, PoolMember, Settings
from codexgate.observability.live_view import install_live_view
from codexgate.observability.metrics import Metrics
from codexgate.observability.recorder import Recorder
from codexgate.redact import Redactor, install_log_redaction, url_secrets
from codexgate.routing.pool import Member, Pool
from codexgate.routing.router import Router
from codexgate.server.app import GatewayApp
from codexgate.server.auth import KeyRing, resolve_api_keys
from codexgate.server.delivery import Face
from codexgate.server.faces.chat import ChatFace
from codexgate.server.faces.messages import MessagesFace
from codexgate.server.faces.responses import CompactFace, RequestReader, ResponsesFace
from codexgate.server.guard import AccessPolicy, Guard
from codexgate.server.keys.admission import Admission
from codexgate.server.state import ResponseState
from codexgate.server.websocket import SocketLimits
from codexgate.server.workers import worker_id
from codexgate.store import meter_of, open_store
from codexgate.store.base import Retention, Store

if TYPE_CHECKING:
    from codexgate.observability.tracing import Tracing

log = logging.getLogger("codexgate")

_REDISCOVER_SECONDS = 5.0


# One line per kind of upstream (config.UpstreamKind; its settings: config/upstreams.py).
BACKEND_KINDS: Mapping[str, BackendKind] = {
    "chat": CHAT,
    "responses": RESPONSES,
    "anthropic": ANTHROPIC,
    "codex": CODEX,
    "embedded": EMBEDDED,
}


def build_router(building: Building) -> Router[Backend]:
    """A backend per configured upstream, and each model route's view of its upstream's (or a
    pool of its upstreams' views, routing/pool.py)."""
    settings = building.settings
    router: Router[Backend] = Router()
    kinds: dict[str, BackendKind] = {}
    for upstream in settings.all_upstreams():
        kinds[upstream.name] = BACKEND_KINDS[upstream.kind]
        router.backends[upstream.name] = kinds[upstream.name].build(upstream, building)
    pools = router.pools
    pooled = _pooled_routes(settings)

    def resolve(name: str) -> Pool:  # a fallback, by the route's name or an alias
        route = router.models[name].model
        return pools[route.name if route is not None else name]

    for model in settings.models:
        if model.name in pooled:
            pools[model.name] = _pool(model, settings, router, kinds, resolve)
            router.add_model(model, pools[model.name])
        else:
            name = model.upstream or next(iter(router.backends))
            router.add_model(model, kinds[name].for_route(router.backends[name], model))
    if settings.discover:
        router.discovery_candidates = [f"{name} {url}" for name, url in LOCAL_SERVERS]
    return router


def _pooled_routes(settings: Settings) -> set[str]:
    """The routes a pool serves: those of several upstreams or a capped one, with fallbacks, or
    named as a fallback."""
    capped = {u.name for u in settings.all_upstreams() if u.max_concurrent is not None}
    targets = {name for model in settings.models for name in model.fallbacks}
    by_alias = {alias: model.name for model in settings.models for alias in model.aliases}
    pooled = {by_alias.get(name, name) for name in targets}
    for model in settings.models:
        members = {member.name for member in model.members()}
        if len(members) > 1 or members & capped or model.fallbacks:
            pooled.add(model.name)
    return pooled


def _pool(
    model: ModelConfig,
    settings: Settings,
    router: Router[Backend],
    kinds: dict[str, BackendKind],
    resolve: Callable[[str], Pool],
) -> Pool:
    upstreams = {u.name: u for u in settings.all_upstreams()}
    members = []
    for position, member in enumerate(model.members() or [PoolMember(name=next(iter(upstreams)))]):
        upstream = upstreams[member.name]
        backend = router.backends[member.name]
        health = router.health.member(member.name, upstream.max_concurrent)
        view = kinds[member.name].for_route(backend, model)
        # Probed through the route's view: its listing is cached apart from /healthz's, so the
        # probe after a failure does not read a listing from before it.
        router.health.watch(member.name, view.reachability)
        model_id = member.model or model.model or model.name
        queue_timeout = upstream.idle_timeout or settings.idle_timeout
        members.append(Member(view, model_id, health, queue_timeout, position))
    return Pool(
        model.name, members, router.health, balance=model.balance, weights=model.weights,
        sticky=model.sticky, fallbacks=tuple(model.fallbacks), resolve=resolve,
    )  # fmt: skip


class _LocalServerFinder:
    """With no upstream configured, looks for a local model server at startup and again (at
    most every few seconds) when a request arrives, so a server started later is picked up.
    Finding none, it serves the embedded model (`embedded = true`, the default) and keeps
    looking: a local server started later takes over (embedded.EmbeddedFallback)."""

    def __init__(self, router: Router[Backend], building: Building) -> None:
        self._router, self._building = router, building
        self._settings, self._transport, self._once = building.settings, building.transport, building.once
        self._last_probe = float("-inf")
        self._fallback: EmbeddedFallback | None = None

    async def startup(self) -> None:
        """Start configured embedded models (their build runs in the background), then look."""
        for backend in self._router.backends.values():
            if isinstance(backend, EmbeddedBackend):
                backend.start()
        await self.find()

    async def find(self) -> None:
        if not self._settings.discover or self._router.backends:
            return
        now = asyncio.get_running_loop().time()
        if now - self._last_probe < _REDISCOVER_SECONDS:
            return
        self._last_probe = now
        if await self._probe():
            return
        if self._settings.embedded:
            upstream = embedded_upstream()
            backend = build_embedded(upstream, self._building)
            self._router.backends[upstream.name] = backend
            self._fallback = EmbeddedFallback(backend, self._probe)
            self._fallback.start()
            return
        self._once.warning(
            "no upstream configured and no local model server found; requests "
            "fail until one is given with --upstream"
        )

    async def _probe(self) -> bool:
        """Route to the first local server found; it replaces the embedded fallback."""
        found = await discover(self._transport)
        if found is None:
            return False
        name, url = found
        log.info("no upstream configured; using %s at %s", name, url)
        upstream = ChatUpstream(name=name.lower().replace(" ", "-").replace(".", ""), base_url=url)
        backend = CHAT.build(upstream, self._building)
        if self._fallback is not None:
            log.info("the embedded model stops: %s at %s serves from now on", name, url)
            self._router.backends.pop(self._fallback.backend.name, None)
        self._router.backends[upstream.name] = backend
        return True

    def health(self) -> dict[str, Any]:
        """The embedded model's part of /healthz (nothing when none is configured or serving)."""
        for backend in self._router.backends.values():
            if isinstance(backend, EmbeddedBackend):
                fallback = self._fallback is not None and self._fallback.backend is backend
                return {"embedded": {**backend.health(), "note": FALLBACK_NOTE if fallback else None}}
        return {}

    async def aclose(self) -> None:
        if self._fallback is not None:
            await self._fallback.aclose()


# Upstreams asked for their models at start: HTTP ones, for which asking is one GET. Asking
# Codex means starting `codex app-server` (seconds, a process) for a model that may never be
# used; the embedded model reports its own build and start.
_PROBED_KINDS = frozenset(("chat", "responses"))


class StartupProbe:
    """At start, asks each configured upstream whether it answers, in the background (neither
    startup nor the first request waits for it), and logs one line per upstream: reachable
    with its models, or what is wrong. Under `--workers`, only worker 1 asks."""

    def __init__(self, router: Router[Backend], kinds: Mapping[str, str]) -> None:
        self._router = router
        self._kinds = dict(kinds)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if worker_id() in (None, "1") and self._kinds:
            self._task = asyncio.create_task(self._run(), name="codexgate-startup-probe")

    async def _run(self) -> None:
        await asyncio.gather(*(self._one(name, kind) for name, kind in self._kinds.items()))

    async def _one(self, name: str, kind: str) -> None:
        backend = self._router.backends.get(name)
        if backend is None:
            return
        if kind == "codex":
            said = "not asked at start; codex app-server starts on the first request"
            log.info("upstream %r (codex): %s", name, said)
        if kind not in _PROBED_KINDS:
            return  # the embedded model logs its own build and start
        try:
            listing = await backend.reachability()
        except Exception:  # a probe must never take the gateway down
            log.exception("upstream %r: the start-up probe failed", name)
            return
        if listing.cause is None:
            shown = ", ".join(listing.models[:5]) + (", ..." if len(listing.models) > 5 else "")
            count = len(listing.models)
            log.info("upstream %r (%s): reachable, %d model%s: %s", name, listing.base_url, count,
                     "" if count == 1 else "s", shown)  # fmt: skip
        else:
            log.warning("upstream %r: %s", name, listing.problem())

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def upstream_secrets(settings: Settings, environ: Mapping[str, str]) -> list[str]:
    """The upstream credentials this process holds: API keys and URL passwords."""
    found: list[str] = []
    for upstream in settings.all_upstreams():
        if not isinstance(upstream, HttpUpstream):
            continue
        if upstream.api_key_env and environ.get(upstream.api_key_env):
            found.append(environ[upstream.api_key_env])
        found += url_secrets(upstream.base_url)
    return found


def _with_log_redaction(
    redactor: Redactor,
    startup: Callable[[], Any],
    transport: Transport,
    router: Router[Backend],
    shutdown: Callable[[], Any] | None = None,
) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """Lifespan hooks: mask secrets in the gateway's log records while it serves; release the
    backends (and the transport) when it stops."""
    uninstall: list[Callable[[], None]] = []

    async def on_startup() -> None:
        uninstall.append(install_log_redaction(redactor))
        await startup()

    async def on_shutdown() -> None:
        try:
            if shutdown is not None:
                await shutdown()
            await asyncio.gather(*(backend.aclose() for backend in router.backends.values()))
            await transport.aclose()
        finally:
            while uninstall:
                uninstall.pop()()

    return on_startup, on_shutdown


def _lifespan(
    router: Router[Backend], building: Building, redactor: Redactor
) -> tuple[_LocalServerFinder, Callable[[], Any], Callable[[], Any]]:
    """The finder of a local server, and the app's start and stop hooks: at start the probe of
    the upstreams and the pools' health probe (in the background), then the finder; at stop
    they end, then the backends."""
    finder = _LocalServerFinder(router, building)
    upstreams = building.settings.all_upstreams()
    probe = StartupProbe(router, kinds={u.name: u.kind for u in upstreams})

    async def startup() -> None:
        probe.start()  # in the background: nothing waits for it
        router.health.start()
        await finder.startup()

    shutdown = _then(_then(probe.aclose, router.health.aclose), finder.aclose)
    return finder, *_with_log_redaction(redactor, startup, building.transport, router, shutdown)


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
    guard = Guard(
        KeyRing(keys), policy, redactor=redactor, config_file=config_file, settings=settings, environ=environ
    )
    transport = transport or DefaultTransport()
    recorder = Recorder.from_settings(settings, redactor)  # None: recording is off
    if recorder is not None:
        transport = TappedTransport(transport)  # only then does a request pass the tap
    once = OnceLog()
    building = Building(settings, environ, transport, once)
    router = build_router(building)
    state = ResponseState(response_store(settings))
    admission = admission_for(settings, router, state)
    guard.on_reload.append(admission.configure)
    finder, on_startup, on_shutdown = _lifespan(router, building, redactor)
    if recorder is not None:
        on_startup, on_shutdown = recorder.lifespan(on_startup, on_shutdown)
    tracing = traces(settings)  # None: traces are off
    if tracing is not None:
        on_shutdown = _then(on_shutdown, tracing.aclose)  # the last spans go out
    gateway = GatewayApp(
        router,
        max_body_bytes=settings.max_body_bytes,
        on_startup=on_startup,
        on_shutdown=on_shutdown,
        on_no_upstream=finder.find,
        health_details=finder.health,
        guard=guard,
        redactor=redactor,
        body_timeout=settings.body_timeout,
        faces=faces(building),
        state=state,
        socket_limits=socket_limits(settings),
        admission=admission,
    )
    _observe(gateway, settings, recorder, tracing)
    return gateway


def faces(building: Building) -> dict[str, Face]:
    """The faces by route: what a client speaks, read into the canonical request."""
    history = building.history()  # one budget for the faces that remember conversations
    return {
        "/responses": ResponsesFace(RequestReader(history)),
        "/responses/compact": CompactFace(),
        "/chat/completions": ChatFace(),
        "/messages": MessagesFace(history),
    }


def admission_for(settings: Settings, router: Router[Backend], state: ResponseState) -> Admission:
    """What each API key may spend, counted where the store is (in the process without one)."""
    admission = Admission(
        meter_of(state.store),
        window=settings.rate_window_seconds,
        route_of=router.route_name,
        ready=state.ready,
        shared=state.store is not None,
        where=state.store.name if state.store is not None else "",
        keep_days=settings.usage_max_age_days,
    )
    admission.configure(settings.api_keys)
    return admission


def socket_limits(settings: Settings) -> SocketLimits:
    """The bounds of the WebSocket mode of /v1/responses."""
    return SocketLimits(
        max_connections=settings.websocket_max_connections,
        max_lifetime=settings.websocket_max_lifetime,
        max_memory=int(settings.websocket_max_memory_mb * 1024 * 1024),
    )


def _observe(
    gateway: GatewayApp, settings: Settings, recorder: Recorder | None, tracing: Tracing | None
) -> None:
    """What watches the gateway, as the settings ask: the recorder, the live view, metrics, traces."""
    if recorder is not None:
        gateway.observers.add(recorder)
    if settings.ui:
        install_live_view(gateway)
    if settings.metrics:
        Metrics().install(gateway)
    if tracing is not None:
        gateway.observers.add(tracing)


def traces(settings: Settings) -> Tracing | None:
    """The OpenTelemetry observer when `otlp_endpoint` is set; OpenTelemetry is imported only
    then (it costs start-up time, and nothing else needs it)."""
    if not settings.otlp_endpoint:
        return None
    from codexgate.observability.tracing import Tracing

    return Tracing.otlp(settings.otlp_endpoint, settings.otel_service_name)


def _then(first: Callable[[], Any], second: Callable[[], Any]) -> Callable[[], Any]:
    """A lifespan hook that awaits `first`, then `second` even if `first` failed."""

    async def both() -> None:
        try:
            await first()
        finally:
            await second()

    return both


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
