"""From settings to the responses kind's backend: a `build` of an upstream's backend and a
`for_route` view of it for one model (app.py's BACKEND_KINDS)."""

from __future__ import annotations

from dataclasses import replace

from codexgate.backends.base import Backend
from codexgate.backends.http.target import upstream_target
from codexgate.backends.kinds import Building
from codexgate.backends.responses.backend import ResponsesBackend
from codexgate.config import ModelConfig, ResponsesUpstream, UpstreamConfig

__all__ = ["RESPONSES", "ResponsesKind"]


class ResponsesKind:
    """`kind = "responses"`: a Responses server (backends/responses/backend.py)."""

    def build(self, upstream: UpstreamConfig, building: Building) -> ResponsesBackend:
        assert isinstance(upstream, ResponsesUpstream), "the responses kind builds responses upstreams"
        target = upstream_target(upstream, building.settings, building.environ)
        return ResponsesBackend(target, building.transport, building.once, tool_format=upstream.tool_format)

    def for_route(self, backend: Backend, model: ModelConfig) -> ResponsesBackend:
        """The Responses upstream's backend with the model's own settings layered on its dialect."""
        assert isinstance(backend, ResponsesBackend), "routes of a responses upstream"
        target = replace(backend.target, dialect=model.dialect_for(backend.target.dialect))
        return ResponsesBackend(target, backend.transport, backend.once, backend.counts, backend.tool_format)


RESPONSES = ResponsesKind()
