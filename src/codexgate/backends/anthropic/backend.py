"""The Anthropic Messages backend: Anthropic's API, or the `/v1/messages` of llama.cpp, vLLM or
Ollama, as the upstream.

The canonical request becomes a Messages body (translate/messages_upstream/request.py: the
conversation, tools, thinking, the cache breakpoints), or the Messages face's own body passes
through; it is sent and read with what every HTTP backend shares (backends/http/backend.py:
budgets, retries before the first byte, errors), and the upstream's events are read into the
turn (translate/messages_upstream/stream.py). The thinking blocks ride in the reasoning items'
`encrypted_content` (translate/reasoning.py), so the turn needs no reasoning blob of its own.

What this backend does not do: learn context windows (`windows` is None: a route's
`context_window` holds `max_tokens` to it) or remember conversations between turns.
"""

from __future__ import annotations

from collections import Counter

from codexgate.backends.base import UNKNOWN, ContextWindowsView, Inbound
from codexgate.backends.http.backend import HttpBackend, HttpCall
from codexgate.backends.http.stream import UpstreamTarget
from codexgate.backends.http.transport import Transport
from codexgate.backends.log import OnceLog
from codexgate.translate.messages_upstream.request import (
    MessagesOptions,
    MessagesRequest,
    to_messages_request,
)
from codexgate.translate.messages_upstream.stream import MessagesStreamReader
from codexgate.translate.turn import Turn
from codexgate.wire.responses import ResponsesRequest

__all__ = ["AnthropicBackend", "AnthropicCall", "BETA_HEADER"]

BETA_HEADER = "anthropic-beta"


class AnthropicCall(HttpCall):
    """One request to a Messages upstream, from `open()` to the last event."""

    answer_noun = "a message"

    def __init__(
        self, backend: AnthropicBackend, req: ResponsesRequest, upstream_model: str, inbound: Inbound
    ) -> None:
        """Raises InvalidRequest for what the upstream could not be sent (nothing is sent)."""
        target = backend.target
        translated = to_messages_request(req, upstream_model, backend.options)
        backend.warn_left_out(
            "tool kind", translated.catalogue.skipped, f"is not offered to upstream {target.name}"
        )
        counts = backend.counts
        for kind in translated.dropped_items:  # another upstream's reasoning: routine after a switch
            counts[f"request.{kind}_left_out"] += 1
        for note in translated.notes:
            counts[f"request.{note}"] += 1
        super().__init__(
            backend, "/messages", translated.encode(), inbound, headers=_betas(target, translated)
        )
        self._backend = backend
        self._unsent: tuple[ResponsesRequest, MessagesRequest] | None = (req, translated)

    def _make_reader(self) -> MessagesStreamReader:
        assert self._unsent is not None
        req, translated = self._unsent
        self._unsent = None
        backend = self._backend
        # Anthropic applies the stop sequences, but for those of white space alone (then the
        # gateway applies them all); the thinking blocks are the reasoning items' own blobs.
        options = self._turn_options(stop=translated.gateway_stops)
        turn = Turn(req, translated.catalogue, options, counts=backend.counts, sent=translated.body)
        return MessagesStreamReader(turn, backend.counts)


def _betas(target: UpstreamTarget, translated: MessagesRequest) -> dict[str, str] | None:
    """The request's `anthropic-beta`: the upstream's betas, then the client's (a pass-through
    from the Messages face), each once."""
    if not translated.betas:
        return None
    own = next((v for k, v in target.headers.items() if k.lower() == BETA_HEADER), "")
    names = [b.strip() for b in own.split(",") if b.strip()] + translated.betas
    return {BETA_HEADER: ",".join(dict.fromkeys(names))}


class AnthropicBackend(HttpBackend):  # a backends.base.Backend
    """A Messages upstream as one model route sees it (its options include the route's
    window and extra_body). Routes of one upstream share `counts`."""

    def __init__(
        self,
        target: UpstreamTarget,
        transport: Transport,
        options: MessagesOptions,
        once: OnceLog | None = None,
        counts: Counter[str] | None = None,
    ) -> None:
        super().__init__(target, transport, once, counts)
        self.options = options
        self.windows: ContextWindowsView | None = None  # not learned

    def call(self, req: ResponsesRequest, upstream_model: str, inbound: Inbound = UNKNOWN) -> AnthropicCall:
        """Raises InvalidRequest for a field the Messages API cannot carry (`seed`, chat
        sampling fields, a temperature above 1) or an item or part it could not read."""
        return AnthropicCall(self, req, upstream_model, inbound)
