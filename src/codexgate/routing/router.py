"""Which upstream serves a model name, and under which upstream id; the pools' members'
health (`describe_members`, which asks them)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from codexgate.config import ModelConfig
from codexgate.errors import ModelNotFound, NoUpstream
from codexgate.routing.health import HealthBoard
from codexgate.routing.pool import Pool

B = TypeVar("B")  # a backend; routing does not care which kind

NO_UPSTREAM_HELP = (
    "codexgate has no upstream model server. Start it with "
    "`codexgate serve --upstream http://HOST:PORT/v1` (or set CODEXGATE_UPSTREAM, or list "
    "[[upstreams]] in a --config TOML file). Looked for a local server at: {looked}."
)


@dataclass(frozen=True, slots=True)
class Route(Generic[B]):
    backend: B
    upstream_model: str
    model: ModelConfig | None = None  # None: passed through unrouted


@dataclass(slots=True)
class Router(Generic[B]):
    """Routes from the config. With no routes at all and one upstream, every name goes to it
    unchanged; once routes exist, only routed names and aliases are served."""

    backends: dict[str, B] = field(default_factory=dict)  # by upstream name
    models: dict[str, Route[B]] = field(default_factory=dict)  # by model name and alias
    routed: list[ModelConfig] = field(default_factory=list)
    discovery_candidates: list[str] = field(default_factory=list)
    health: HealthBoard = field(default_factory=HealthBoard)  # the upstreams of pools (routing/pool.py)
    pools: dict[str, Pool] = field(default_factory=dict)  # the routes pools serve, by name

    def add_model(self, model: ModelConfig, backend: B) -> None:
        """Route `model` (and its aliases) to `backend`, which carries the model's settings."""
        self.routed.append(model)
        route = Route(backend, model.model or model.name, model)
        for name in (model.name, *model.aliases):
            self.models[name] = route

    def describe_pools(self) -> dict[str, Any]:
        """Each route a pool serves: its members, balance, stickiness and fallbacks (/healthz)."""
        return {name: pool.describe() for name, pool in self.pools.items()}

    async def describe_members(self) -> dict[str, dict[str, object]]:
        """Each pool member's health as /healthz says it (HealthBoard.upstream), by upstream
        name, for the live view: its `/models` asked through the member as the probe asks it
        (at most every few seconds, whoever asks)."""
        members = {member.name: member for pool in self.pools.values() for member in pool.members}
        listings = await asyncio.gather(*(member.backend.reachability() for member in members.values()))
        return {
            name: self.health.upstream(name, listing) for name, listing in zip(members, listings, strict=True)
        }

    def no_upstream(self) -> NoUpstream:
        """The error for a gateway with no upstream at all, saying how to give one."""
        looked = ", ".join(self.discovery_candidates) or "nowhere (discovery is off)"
        return NoUpstream(NO_UPSTREAM_HELP.format(looked=looked))

    def route_name(self, name: str) -> str:
        """The name of the route `name` (a model name or an alias) is served by; unrouted, itself."""
        route = self.models.get(name)
        return route.model.name if route is not None and route.model is not None else name

    def resolve(self, name: str) -> Route[B]:
        """Raises ModelNotFound for an unknown name, NoUpstream when nothing is configured."""
        route = self.models.get(name)
        if route is not None:
            return route
        if not self.backends:
            raise self.no_upstream()
        if len(self.backends) == 1 and not self.routed:
            return Route(next(iter(self.backends.values())), name)
        known = ", ".join(sorted(self.models)) or "none"
        raise ModelNotFound(
            f"The model '{name}' does not exist on this gateway. Known models: {known}.", param="model"
        )
