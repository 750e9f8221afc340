"""Which upstream serves a model name, and under which upstream id. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

from codexgate.config import ModelConfig
from codexgate.errors import ModelNotFound, NoUpstream

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

    backends: dict[str, B] = field(default_factory=dict)
    models: dict[str, ModelConfig] = field(default_factory=dict)  # name and aliases
    routed: list[ModelConfig] = field(default_factory=list)
    discovery_candidates: list[str] = field(default_factory=list)

    def add_model(self, model: ModelConfig) -> None:
        self.routed.append(model)
        for name in (model.name, *model.aliases):
            self.models[name] = model

    def resolve(self, name: str) -> Route[B]:
        """Raises ModelNotFound for an unknown name, NoUpstream when nothing is configured."""
        model = self.models.get(name)
        if model is not None:
            upstream = model.upstream or next(iter(self.backends))
            return Route(self.backends[upstream], model.model or model.name, model)
        if not self.backends:
            looked = ", ".join(self.discovery_candidates) or "nowhere (discovery is off)"
            raise NoUpstream(NO_UPSTREAM_HELP.format(looked=looked))
        if len(self.backends) == 1 and not self.routed:
            return Route(next(iter(self.backends.values())), name)
        known = ", ".join(sorted(self.models)) or "none"
        raise ModelNotFound(
            f"The model '{name}' does not exist on this gateway. Known models: {known}.", param="model"
        )
