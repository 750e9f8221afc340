"""The context window of each route claude-setup names, learned as codex-setup learns them: the
route's configured `context_window` first (or `--context-window` for a route with none), else
what the route's upstream server reports for its model (backends/server_info.py: vLLM, llama.cpp,
LM Studio, Ollama), else the embedded model's own. A pool's window is its smallest member's."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from dataclasses import dataclass

from codexgate.backends.embedded.factory import DEFAULT_CONTEXT_WINDOW
from codexgate.backends.http.target import upstream_target
from codexgate.backends.http.transport import AiohttpTransport, Transport
from codexgate.backends.server_info import ContextWindow, probe_context_window
from codexgate.config import EmbeddedUpstream, HttpUpstream, ModelConfig, Settings, UpstreamConfig

_PROBE_TIMEOUT = 5.0


@dataclass(frozen=True)
class RouteWindow:
    route: str
    tokens: int | None  # None: unknown
    source: str  # where it was read, for the report


def learn_windows(settings: Settings, names: Sequence[str], default: int | None) -> dict[str, RouteWindow]:
    """Each route name's window (one probe per upstream and model, all at once)."""

    async def learn() -> dict[str, RouteWindow]:
        transport = AiohttpTransport()
        try:
            found = await asyncio.gather(*(_window(settings, name, default, transport) for name in names))
        finally:
            await transport.aclose()
        return {w.route: w for w in found}

    return asyncio.run(learn())


def _route(settings: Settings, name: str) -> ModelConfig | None:
    for route in settings.models:
        if name == route.name or name in route.aliases:
            return route
    return None


async def _window(settings: Settings, name: str, default: int | None, transport: Transport) -> RouteWindow:
    route = _route(settings, name)
    if route is not None and route.context_window:
        return RouteWindow(name, route.context_window, "configured")
    if default is not None:
        return RouteWindow(name, default, "--context-window")
    upstreams = {u.name: u for u in settings.all_upstreams()}
    members: list[tuple[UpstreamConfig | None, str]]
    if route is not None and route.members():
        members = [(upstreams.get(m.name), m.model or route.model or name) for m in route.members()]
    elif len(upstreams) == 1:
        members = [(next(iter(upstreams.values())), (route.model if route else None) or name)]
    else:
        return RouteWindow(name, None, "unknown: no route of that name and more than one upstream")
    found = await asyncio.gather(*(_member_window(settings, u, model, transport) for u, model in members))
    known = [w for w in found if w is not None]
    if len(known) < len(found) or not known:
        return RouteWindow(name, None, "unknown: the upstream does not say; pass --context-window")
    smallest = min(known, key=lambda w: w.tokens)
    source = smallest.source if smallest.runtime else f"{smallest.source}; the model's trained maximum"
    return RouteWindow(name, smallest.tokens, source)


async def _member_window(
    settings: Settings, upstream: UpstreamConfig | None, model: str, transport: Transport
) -> ContextWindow | None:
    if isinstance(upstream, EmbeddedUpstream):
        return ContextWindow(upstream.context_window or DEFAULT_CONTEXT_WINDOW, "the embedded model")
    if not isinstance(upstream, HttpUpstream):
        return None  # the Codex agent: its window is Codex's own business
    target = upstream_target(upstream, settings, os.environ)
    return await probe_context_window(transport, target.base_url, target.headers, model, _PROBE_TIMEOUT)
