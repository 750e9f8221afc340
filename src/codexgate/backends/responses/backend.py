"""The Responses backend: any Responses server (OpenAI, vLLM, Ollama, LM Studio, another
codexgate) as the upstream.

The canonical request is repaired into what such servers take (translate/responses_upstream/request.py),
sent and read with what every HTTP backend shares (backends/http/backend.py: budgets, retries
before the first byte, errors), and the upstream's events are read into the turn
(translate/responses_upstream/stream.py). The turn gets the dialect's stages as for a chat upstream: an
open model served through `/v1/responses` still writes think tags and tool calls as text.

What this backend does not do: learn context windows (`windows` is None) or remember
conversations between turns; the request is translated whole each time.
"""

from __future__ import annotations

from collections import Counter

from codexgate.backends.base import UNKNOWN, ContextWindowsView, Inbound
from codexgate.backends.http.backend import HttpBackend, HttpCall
from codexgate.backends.http.stream import UpstreamTarget
from codexgate.backends.http.transport import Transport
from codexgate.backends.log import OnceLog
from codexgate.translate.responses_upstream.request import ToolFormat, UpstreamRequest, to_upstream_request
from codexgate.translate.responses_upstream.stream import ResponsesStreamReader
from codexgate.translate.turn import Turn
from codexgate.wire.responses import ResponsesRequest

__all__ = ["ResponsesBackend", "ResponsesCall"]


class ResponsesCall(HttpCall):
    """One request to a Responses upstream, from `open()` to the last event."""

    answer_noun = "a response"

    def __init__(
        self, backend: ResponsesBackend, req: ResponsesRequest, upstream_model: str, inbound: Inbound
    ) -> None:
        """Raises InvalidRequest for what the upstream could not be sent (nothing is sent)."""
        target = backend.target
        translated = to_upstream_request(
            req,
            upstream_model,
            upstream=target.name,
            tool_format=backend.tool_format,
            extra_body=target.dialect.extra_body,
        )
        skipped = translated.catalogue.skipped
        backend.warn_left_out("tool kind", skipped, f"is not offered to upstream {target.name}")
        for kind in translated.dropped_items:  # foreign reasoning: routine after a switch of upstream
            backend.counts[f"request.{kind}_left_out"] += 1
        super().__init__(backend, "/responses", translated.encode(), inbound)
        self._backend = backend
        self._unsent: tuple[ResponsesRequest, UpstreamRequest] | None = (req, translated)

    def _make_reader(self) -> ResponsesStreamReader:
        assert self._unsent is not None
        req, translated = self._unsent
        self._unsent = None
        backend, target = self._backend, self._target
        # Responses servers have no stop sequences: the gateway applies them. The upstream's
        # reasoning blob is its own (the reader wraps it).
        options = self._turn_options(stop=req.stop)
        turn = Turn(req, translated.catalogue, options, counts=backend.counts, sent=translated.body)
        return ResponsesStreamReader(turn, target.name, backend.counts)


class ResponsesBackend(HttpBackend):  # a backends.base.Backend
    """A Responses upstream as one model route sees it (its dialect includes the route's
    overrides). Routes of one upstream share `counts`."""

    def __init__(
        self,
        target: UpstreamTarget,
        transport: Transport,
        once: OnceLog | None = None,
        counts: Counter[str] | None = None,
        tool_format: ToolFormat = "functions",
    ) -> None:
        """`tool_format`: how tools are offered (config.UpstreamConfig.tool_format)."""
        super().__init__(target, transport, once, counts)
        self.tool_format: ToolFormat = tool_format
        self.windows: ContextWindowsView | None = None  # not learned from Responses servers

    def call(self, req: ResponsesRequest, upstream_model: str, inbound: Inbound = UNKNOWN) -> ResponsesCall:
        """Raises InvalidRequest for a field the Responses API cannot carry (`seed`, chat
        sampling fields) or, with `functions`, an item no model could read."""
        return ResponsesCall(self, req, upstream_model, inbound)
