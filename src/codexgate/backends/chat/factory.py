"""From settings to the chat kind's backend: a `build` of an upstream's backend and a
`for_route` view of it for one model (app.py's BACKEND_KINDS)."""

from __future__ import annotations

from dataclasses import replace

from codexgate.backends.base import Backend
from codexgate.backends.chat.backend import ChatBackend
from codexgate.backends.http.target import upstream_target
from codexgate.backends.kinds import Building
from codexgate.config import ChatUpstream, ModelConfig, UpstreamConfig

__all__ = ["CHAT", "ChatKind"]


class ChatKind:
    """`kind = "chat"`: a Chat Completions server (backends/chat/backend.py)."""

    def build(self, upstream: UpstreamConfig, building: Building) -> ChatBackend:
        assert isinstance(upstream, ChatUpstream), "the chat kind builds chat upstreams"
        target = upstream_target(upstream, building.settings, building.environ)
        return ChatBackend(target, building.transport, building.once, history=building.history())

    def for_route(self, backend: Backend, model: ModelConfig) -> ChatBackend:
        """The upstream's backend with the model's own settings layered on its dialect."""
        assert isinstance(backend, ChatBackend), "routes of a chat upstream"
        target = replace(backend.target, dialect=model.dialect_for(backend.target.dialect))
        return ChatBackend(
            target, backend.transport, backend.once, backend.counts, backend.windows, backend.history
        )


CHAT = ChatKind()
