"""The Chat Completions backend: canonical request in, canonical event stream out.

The request is translated to a chat body (translate/chat_upstream/request.py), sent and read with what every
HTTP backend shares (backends/http/backend.py), its chunks read by the chat dialect's translator
(translate/chat_upstream/stream.py) into the turn (translate/turn.py). What only a chat upstream needs is
here: the context-window check before sending, the conversation memory that translates a
re-sent history once, and the turn's chat policies (the gateway's reasoning blob, cut markers).
"""

from __future__ import annotations

import asyncio
from collections import Counter

from codexgate.backends.base import UNKNOWN, Inbound
from codexgate.backends.http.backend import HttpBackend, HttpCall
from codexgate.backends.http.stream import UpstreamTarget
from codexgate.backends.http.transport import BodyParts, Transport
from codexgate.backends.log import OnceLog, clip
from codexgate.backends.server_info import ContextWindows
from codexgate.errors import ContextLengthExceeded
from codexgate.translate.chat_upstream.request import ChatRequest, Checkpoint, to_chat_request
from codexgate.translate.chat_upstream.stream import ChatStreamTranslator
from codexgate.translate.history_memo import Memo
from codexgate.translate.reasoning import encode_reasoning
from codexgate.translate.turn import Turn
from codexgate.wire.responses import ResponsesRequest

__all__ = ["ChatBackend", "ChatCall", "OnceLog", "UpstreamTarget"]

_MAX_BYTES_PER_TOKEN = 6
# A prompt's tokens estimated high (tokenizers average 3-4.5 bytes a token on code and prose),
# so that an output lowered to fit the window beside it fits (_fit_output).
_MIN_BYTES_PER_TOKEN = 3
_MIN_OUTPUT_TOKENS = 1024  # an output is never lowered below this (or what was asked)


class ChatCall(HttpCall):
    """One request to a chat upstream, from `open()` to the last event."""

    answer_noun = "a chat completion"

    def __init__(
        self, backend: ChatBackend, req: ResponsesRequest, upstream_model: str, inbound: Inbound
    ) -> None:
        history = backend.history
        key = (backend, inbound.conversation)
        earlier = history.get(key) if history is not None and inbound.conversation else None
        # Only a request the memory would keep leaves a checkpoint (translate/history_memo.py's
        # minimum), from the conversation's second request on (Memo.returning).
        keep = (
            history is not None
            and bool(inbound.conversation)
            and history.admits(inbound.body_size or None)
            and (earlier is not None or history.returning(key))
        )
        chat = to_chat_request(
            req, backend.target.dialect, upstream_model, earlier, inbound.known_prefix, keep=keep,
            kinds=inbound.input_kinds,
        )  # fmt: skip
        backend.warn_left_out("tool kind", chat.catalogue.skipped, "cannot run on a chat upstream")
        backend.warn_left_out("input item type", chat.dropped_items, "has no chat form")
        body = BodyParts.of(chat.pieces())
        if history is not None and chat.checkpoint is not None:
            history.put(key, chat.checkpoint, inbound.body_size or len(body))
        elif earlier is not None and history is not None:
            history.drop(key)  # the conversation shrank (compacted): its old turn is no use
        super().__init__(backend, "/chat/completions", body, inbound)
        self._backend = backend
        self._upstream_model = upstream_model
        self._unsent: tuple[ResponsesRequest, ChatRequest] | None = (req, chat)

    @property
    def translator(self) -> ChatStreamTranslator:
        """The chunk translator, and through it the turn; made by open()."""
        assert isinstance(self._reader, ChatStreamTranslator), "open() first"
        return self._reader

    def _make_reader(self) -> ChatStreamTranslator:
        assert self._unsent is not None
        req, chat = self._unsent
        self._unsent = None
        backend = self._backend
        # The chat policy: the reasoning text rides in the item's encrypted_content and is
        # replayed upstream next turn.
        options = self._turn_options(reasoning_blob=encode_reasoning)
        turn = Turn(req, chat.catalogue, options, counts=backend.counts, sent=chat.body)
        return ChatStreamTranslator(turn, backend.counts)

    def _check_fits(self, window: int | None) -> None:
        """Refuse a request that cannot fit the model's window. The bound is deliberately low
        (6 bytes a token; tokenizers average 3-4.5 on code and prose, JSON escaping only adds
        bytes), so only requests that clearly overflow are refused; the rest is the upstream's
        call."""
        lower_bound = self._input_bytes // _MAX_BYTES_PER_TOKEN
        if window and lower_bound > window:
            raise ContextLengthExceeded(
                f"This request needs at least {lower_bound} tokens, more than the model's context window "
                f"of {window} tokens. Compact or shorten the conversation."
            )

    async def _before_send(self) -> None:
        """The model's context window, learned once per model (the probe counts against the
        request's budget), and a request that clearly cannot fit refused."""
        target = self._target
        window = target.dialect.context_window
        windows = self._backend.windows
        if window is None and windows is not None:
            known, window = windows.remembered(self._upstream_model)
            if not known:
                try:  # at most half the budget: a server deaf to probes may still answer chat
                    async with asyncio.timeout((target.first_byte_timeout or target.idle_timeout) / 2):
                        window = await windows.get(self._upstream_model)
                except TimeoutError:
                    window = None
        self._check_fits(window)
        self._fit_output(window)

    def _fit_output(self, window: int | None) -> None:
        """Lower the output asked for to what the window holds beside the prompt: Claude Code
        asks for 32,000 tokens whatever the model, and vLLM refuses a request whose prompt and
        max_tokens together pass the window, where llama.cpp would only stop early."""
        assert self._unsent is not None
        chat = self._unsent[1]
        name = self._target.dialect.max_tokens_field
        asked = chat.body.get(name)
        if not window or not isinstance(asked, int):
            return
        room = window - self._input_bytes // _MIN_BYTES_PER_TOKEN
        fitted = max(room, min(asked, _MIN_OUTPUT_TOKENS))
        if fitted >= asked:
            return
        chat.body[name] = fitted
        self._http.rewrite(BodyParts.of(chat.pieces()))
        self._backend.once.info(
            f"upstream {self._target.name}: {name} lowered where a request asks for more than the "
            f"context window of {clip(self._upstream_model)} ({window} tokens) holds beside its "
            "prompt (said once per model)"
        )


class ChatBackend(HttpBackend):  # a backends.base.Backend
    """A chat upstream as one model route sees it (its dialect includes the route's overrides).
    Routes of one upstream share `counts` and `windows`."""

    def __init__(
        self,
        target: UpstreamTarget,
        transport: Transport,
        once: OnceLog | None = None,
        counts: Counter[str] | None = None,
        windows: ContextWindows | None = None,
        history: Memo[Checkpoint] | None = None,
    ) -> None:
        """`history`: where each conversation's last translated input is remembered between
        turns (translate/chat_upstream/request.py Checkpoint); routes may share one, the keys are apart."""
        super().__init__(target, transport, once, counts)
        if windows is None and target.learn_context_window:
            probe_timeout = min(target.connect_timeout, 5.0)
            windows = ContextWindows(
                transport, target.base_url, target.headers, probe_timeout, target.name, target.models
            )
        self.windows = windows
        self.history = history

    def call(self, req: ResponsesRequest, upstream_model: str, inbound: Inbound = UNKNOWN) -> ChatCall:
        """Raises InvalidRequest for input the upstream could not read. (A dialect naming an
        unknown text tool-call format, which settings refuse, raises ValueError in open().)"""
        return ChatCall(self, req, upstream_model, inbound)
