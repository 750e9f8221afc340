"""From settings to the responses kind's backend: a `build` of an upstream's backend and a
`for_route` view of it for one model (app.py's BACKEND_KINDS)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from codexgate.backends.base import Backend
from codexgate.backends.http.target import upstream_target
from codexgate.backends.http.transport import Transport
from codexgate.backends.log import OnceLog
from codexgate.backends.responses.backend import ResponsesBackend
from codexgate.config import ModelConfig, ResponsesUpstream, Settings, UpstreamConfig
from codexgate.translate.history_memo import Memo

__all__ = ["RESPONSES", "ResponsesKind"]


class ResponsesKind:
    """`kind = "responses"`: a Responses server (backends/responses.py)."""

    def build(
        self,
        upstream: UpstreamConfig,
        settings: Settings,
        environ: Mapping[str, str],
        transport: Transport,
        once: OnceLog,
        history: Memo[Any] | None,
    ) -> ResponsesBackend:
        """`history` goes unused: a Responses server reads the request as it comes."""
        assert isinstance(upstream, ResponsesUpstream), "the responses kind builds responses upstreams"
        target = upstream_target(upstream, settings, environ)
        return ResponsesBackend(target, transport, once, tool_format=upstream.tool_format)

    def for_route(self, backend: Backend, model: ModelConfig) -> ResponsesBackend:
        """The Responses upstream's backend with the model's own settings layered on its dialect."""
        assert isinstance(backend, ResponsesBackend), "routes of a responses upstream"
        target = replace(backend.target, dialect=model.dialect_for(backend.target.dialect))
        return ResponsesBackend(target, backend.transport, backend.once, backend.counts, backend.tool_format)


RESPONSES = ResponsesKind()
