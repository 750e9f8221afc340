"""What a kind of upstream is to the app: a factory from its settings to a backend (`build`)
and to the view of that backend one model route has (`for_route`). Each kind's lives beside its
backend, in its package's factory.py; app.py's BACKEND_KINDS has one line per kind."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from codexgate.backends.base import Backend
from codexgate.backends.http.transport import Transport
from codexgate.backends.log import OnceLog
from codexgate.config import ModelConfig, Settings, UpstreamConfig
from codexgate.translate.history_memo import Memo

__all__ = ["BackendKind", "Building"]

_MEMORY_PER_BODY_BYTE = 2  # a remembered request in memory, per byte of its body (about)


@dataclass(frozen=True, slots=True)
class Building:
    """What every kind's factory is given besides the upstream's own settings."""

    settings: Settings
    environ: Mapping[str, str]
    transport: Transport
    once: OnceLog

    def history(self) -> Memo[Any] | None:
        """A memory of conversations for one backend (translate/history_memo.py), within
        `history_cache_mb`, for requests of at least `history_cache_min_kb`; None when the
        budget is 0."""
        # Weighed by the bodies' bytes; a remembered request takes about twice its body in
        # memory (its bytes or translation, and its decoded items): the budget is memory.
        budget = self.settings.history_cache_mb * 1024 * 1024 // _MEMORY_PER_BODY_BYTE
        min_weight = self.settings.history_cache_min_kb * 1024
        return Memo(budget, min_weight=min_weight) if budget > 0 else None


class BackendKind(Protocol):
    def build(self, upstream: UpstreamConfig, building: Building) -> Backend:
        """The upstream's backend (nothing is started or sent yet)."""
        ...

    def for_route(self, backend: Backend, model: ModelConfig) -> Backend:
        """`backend` as one model route sees it: the model's own settings layered on."""
        ...
