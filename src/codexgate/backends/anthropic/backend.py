"""The Anthropic Messages backend: Anthropic's API, or the `/v1/messages` of llama.cpp, vLLM or
Ollama, as the upstream.

The canonical request becomes a Messages body (translate/messages_upstream/request.py: the
conversation, tools, thinking, the cache breakpoints), or the Messages face's own body passes
through; it is sent and read with what every HTTP backend shares (backends/http/backend.py:
budgets, retries before the first byte, errors), and the upstream's events are read into the
turn (translate/messages_upstream/stream.py). The thinking blocks ride in the reasoning items'
`encrypted_content` (translate/reasoning.py), so the turn needs no reasoning blob of its own.

`max_tokens` is held to the model's window beside the prompt: the route's `context_window`,
else, on a local server (llama.cpp, vLLM, Ollama: not Anthropic's API, whose models the table
knows), the window it publishes (backends/server_info.py, as for a chat upstream), learned on
a model's first request; the request is then translated again with it. What this backend does
not do: remember conversations between turns.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from codexgate.backends.anthropic.models import claude_facts
from codexgate.backends.base import UNKNOWN, Inbound
from codexgate.backends.http.backend import HttpBackend, HttpCall
from codexgate.backends.http.stream import UpstreamTarget
from codexgate.backends.http.transport import BodyParts, Transport
from codexgate.backends.log import OnceLog
from codexgate.backends.server_info import ContextWindows, window_of
from codexgate.translate.messages_upstream.request import (
    PROMPT_BYTES_PER_TOKEN,
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
        self._upstream_model = upstream_model
        self._unsent: tuple[ResponsesRequest, MessagesRequest] | None = (req, translated)

    async def _before_send(self) -> None:
        """On a route with no window of its own, the window the server publishes: the request
        translated again with it, so that `max_tokens` (and the thinking budget under it) fits
        beside the prompt, which vLLM and llama.cpp refuse past their window."""
        backend, target = self._backend, self._target
        if backend.options.context_window is not None or backend.windows is None:
            return
        if claude_facts(self._upstream_model) is not None:  # a Claude model: the table knows it
            return
        budget = (target.first_byte_timeout or target.idle_timeout) / 2  # the probe's, at most
        window = await window_of(backend.windows, self._upstream_model, budget)
        assert self._unsent is not None
        req, before = self._unsent
        asked = before.body.get("max_tokens")
        # The whole body stands for its prompt here (a little more than it): most requests fit.
        if (
            window is None
            or not isinstance(asked, int)
            or asked <= window - self._input_bytes // PROMPT_BYTES_PER_TOKEN
        ):
            return
        options = replace(backend.options, context_window=window)
        translated = to_messages_request(req, self._upstream_model, options)
        for note in set(translated.notes) - set(before.notes):
            backend.counts[f"request.{note}"] += 1
        self._unsent = (req, translated)
        self._http.rewrite(BodyParts.of([translated.encode()]))

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
        windows: ContextWindows | None = None,
    ) -> None:
        """`windows`: the windows the server publishes, None where they are not learned
        (Anthropic's API; a route with its own window does not ask)."""
        super().__init__(target, transport, once, counts)
        self.options = options
        self.windows = windows

    def call(self, req: ResponsesRequest, upstream_model: str, inbound: Inbound = UNKNOWN) -> AnthropicCall:
        """Raises InvalidRequest for a field the Messages API cannot carry (`seed`, chat
        sampling fields, a temperature above 1) or an item or part it could not read."""
        return AnthropicCall(self, req, upstream_model, inbound)
