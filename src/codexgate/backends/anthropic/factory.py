"""From settings to the anthropic kind's backend: a `build` of an upstream's backend and a
`for_route` view of it for one model (app.py's BACKEND_KINDS)."""

from __future__ import annotations

from dataclasses import replace
from urllib.parse import urlsplit

from codexgate.backends.anthropic.backend import AnthropicBackend
from codexgate.backends.base import Backend
from codexgate.backends.http.target import upstream_target
from codexgate.backends.kinds import Building
from codexgate.backends.server_info import ContextWindows
from codexgate.config import AnthropicUpstream, ModelConfig, UpstreamConfig
from codexgate.translate.messages_upstream.request import MessagesOptions

__all__ = ["ANTHROPIC", "ANTHROPIC_HOST", "AnthropicKind"]

ANTHROPIC_HOST = "api.anthropic.com"  # whose models' windows the list and the table say


class AnthropicKind:
    """`kind = "anthropic"`: an Anthropic Messages server (backends/anthropic/backend.py)."""

    def build(self, upstream: UpstreamConfig, building: Building) -> AnthropicBackend:
        assert isinstance(upstream, AnthropicUpstream), "the anthropic kind builds anthropic upstreams"
        target = replace(
            upstream_target(upstream, building.settings, building.environ), retry_rate_limited=True
        )
        options = MessagesOptions(
            prompt_cache=upstream.prompt_cache == "auto",
            thinking=upstream.thinking,
            extra_body=dict(upstream.extra_body),
        )
        windows = None
        if urlsplit(target.base_url).hostname != ANTHROPIC_HOST:  # a local server: its windows
            windows = ContextWindows(
                building.transport, target.base_url, target.headers,
                min(target.connect_timeout, 5.0), target.name, target.models,
            )  # fmt: skip
        return AnthropicBackend(target, building.transport, options, building.once, windows=windows)

    def for_route(self, backend: Backend, model: ModelConfig) -> AnthropicBackend:
        """The upstream's backend with the model's own settings layered on (its window, which
        holds max_tokens, and its extra_body)."""
        assert isinstance(backend, AnthropicBackend), "routes of an anthropic upstream"
        dialect = model.dialect_for(backend.target.dialect)
        target = replace(backend.target, dialect=dialect)
        options = replace(
            backend.options, context_window=dialect.context_window, extra_body=dialect.extra_body
        )
        return AnthropicBackend(
            target, backend.transport, options, backend.once, backend.counts, backend.windows
        )


ANTHROPIC = AnthropicKind()
