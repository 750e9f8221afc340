"""The Chat Completions backend: canonical request in, canonical event stream out.

The request is translated to a chat body (translate/chat_upstream/request.py), sent and read with what every
HTTP backend shares (backends/http/backend.py), its chunks read by the chat dialect's translator
(translate/chat_upstream/stream.py) into the turn (translate/turn.py). What only a chat upstream needs is
here: the context-window check before sending, the conversation memory that translates a
re-sent history once, the turn's chat policies (the gateway's reasoning blob, cut markers), the
files of a request read off the event loop before it is translated (translate/files.py), and a
long prefill's progress in the log when the server reports it (llama.cpp's `prompt_progress`).
"""

from __future__ import annotations

import functools
import time
from collections import Counter
from collections.abc import AsyncGenerator, Callable, Hashable, Mapping
from typing import Any

from codexgate.backends.base import UNKNOWN, Call, Event, Inbound
from codexgate.backends.http.backend import HttpBackend, HttpCall
from codexgate.backends.http.stream import UpstreamTarget
from codexgate.backends.http.transport import BodyParts, Transport
from codexgate.backends.log import OnceLog, clip, log
from codexgate.backends.server_info import ContextWindows, window_of
from codexgate.errors import ContextLengthExceeded
from codexgate.translate.chat_upstream.request import ChatRequest, Checkpoint, to_chat_request
from codexgate.translate.chat_upstream.stream import ChatStreamTranslator, PromptProgress
from codexgate.translate.files import FileTexts, with_files
from codexgate.translate.history_memo import Memo
from codexgate.translate.open_models.sampling import family_sampling, for_server
from codexgate.translate.reasoning import encode_reasoning
from codexgate.translate.turn import Turn
from codexgate.wire.responses import ResponsesRequest

__all__ = [
    "PREFILL_LOG_SECONDS",
    "PREFILL_QUIET_SECONDS",
    "ChatBackend",
    "ChatCall",
    "OnceLog",
    "PrefillLog",
    "UpstreamTarget",
]

_MAX_BYTES_PER_TOKEN = 6
# A prompt's tokens estimated high (tokenizers average 3-4.5 bytes a token on code and prose),
# so that an output lowered to fit the window beside it fits (_fit_output).
_MIN_BYTES_PER_TOKEN = 3
_MIN_OUTPUT_TOKENS = 1024  # an output is never lowered below this (or what was asked)
# A prefill that ends sooner logs nothing; a longer one logs its progress at most this often.
PREFILL_QUIET_SECONDS = 3.0
PREFILL_LOG_SECONDS = 5.0


class PrefillLog:
    """A long prefill's progress at INFO, from what the server reports of it (llama.cpp's
    `prompt_progress`: at each batch of the prompt read, with its own clock), so that a turn
    that takes minutes before its first token on a CPU shows that it is working:

        upstream embedded: prompt 1,024/5,112 tokens processed (20%), 12 s, 85 tokens/s, about 48 s to go

    Nothing for a prefill under PREFILL_QUIET_SECONDS; then a line at most every
    PREFILL_LOG_SECONDS, and one when the prompt is read. For a server that reports no time,
    the gateway's `clock` since `start` (when the request went out)."""

    def __init__(self, upstream: str, start: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._upstream, self._start, self._clock = upstream, start, clock
        self._logged_at: float | None = None  # the prefill's time at the last line
        self._done = False

    def seen(self, progress: PromptProgress) -> None:
        if self._done:
            return
        elapsed = progress.seconds if progress.seconds is not None else self._clock() - self._start
        finished = progress.processed >= progress.total
        self._done = finished
        if elapsed < PREFILL_QUIET_SECONDS:
            return
        if not finished and self._logged_at is not None and elapsed - self._logged_at < PREFILL_LOG_SECONDS:
            return
        self._logged_at = elapsed
        read = progress.processed - progress.cache  # tokens read by this request, not cached
        rate = read / elapsed if elapsed > 0 else 0.0
        cached = f", {progress.cache:,} from the cache" if progress.cache else ""
        head = (
            f"upstream {self._upstream}: prompt {progress.processed:,}/{progress.total:,} tokens processed "
            f"({100 * progress.processed // progress.total}%{cached})"
        )
        if finished:
            log.info("%s in %.0f s (%.0f tokens/s); the answer starts", head, elapsed, rate)
            return
        to_go = f", about {(progress.total - progress.processed) / rate:.0f} s to go" if rate > 0 else ""
        log.info("%s, %.0f s, %.0f tokens/s%s", head, elapsed, rate, to_go)


# The chat request, its key in the conversation memory, the checkpoint it resumed from, and
# whether it leaves one.
_Translation = tuple[ChatRequest, Hashable, Checkpoint | None, bool]


def _translate(
    backend: ChatBackend,
    req: ResponsesRequest,
    upstream_model: str,
    inbound: Inbound,
    files: FileTexts | None,
    keep: bool | None = None,
) -> _Translation:
    """The chat request, from the conversation's checkpoint when the memory has one. Nothing
    is remembered here (a translation that met files not read yet is thrown away); `keep`:
    what an earlier pass decided (None: decided here, which notes the conversation)."""
    history = backend.history
    key = (backend, inbound.conversation)
    earlier = history.get(key) if history is not None and inbound.conversation else None
    # Only a request the memory would keep leaves a checkpoint (translate/history_memo.py's
    # minimum), from the conversation's second request on (Memo.returning).
    if keep is None:
        keep = (
            history is not None
            and bool(inbound.conversation)
            and history.admits(inbound.body_size or None)
            and (earlier is not None or history.returning(key))
        )
    chat = to_chat_request(
        req, backend.target.dialect, upstream_model, earlier, inbound.known_prefix, keep=keep,
        kinds=inbound.input_kinds, files=files,
    )  # fmt: skip
    return chat, key, earlier, keep


class ChatCall(HttpCall):
    """One request to a chat upstream, from `open()` to the last event."""

    answer_noun = "a chat completion"

    def __init__(
        self,
        backend: ChatBackend,
        req: ResponsesRequest,
        upstream_model: str,
        inbound: Inbound,
        translated: _Translation | None = None,
    ) -> None:
        """`translated`: the request as `_translate` made it (None: translated here, its files
        read where they are met)."""
        chat, key, earlier, _ = translated or _translate(backend, req, upstream_model, inbound, None)
        history = backend.history
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
        self._prefill: PrefillLog | None = None  # made when the server first reports its prefill
        self._sent_at = 0.0

    @property
    def translator(self) -> ChatStreamTranslator:
        """The chunk translator, and through it the turn; made by open()."""
        assert isinstance(self._reader, ChatStreamTranslator), "open() first"
        return self._reader

    def _make_reader(self) -> ChatStreamTranslator:
        assert self._unsent is not None
        req, chat = self._unsent
        self._unsent = None
        self._sent_at = time.monotonic()
        backend = self._backend
        # The chat policy: the reasoning text rides in the item's encrypted_content and is
        # replayed upstream next turn.
        options = self._turn_options(reasoning_blob=encode_reasoning)
        turn = Turn(req, chat.catalogue, options, counts=backend.counts, sent=chat.body)
        return ChatStreamTranslator(turn, backend.counts)

    def _feed(self, payloads: list[bytes]) -> None:
        super()._feed(payloads)
        translator = self.translator
        if translator.prompt_progress:  # empty for most servers
            if self._prefill is None:
                self._prefill = PrefillLog(self._target.name, self._sent_at)
            for progress in translator.take_prompt_progress():
                self._prefill.seen(progress)

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
        request's budget), and a request that clearly cannot fit refused. A name the upstream
        does not list, on an upstream that runs one model, is answered by that model: its
        window and its family's sampling apply."""
        target = self._target
        window = target.dialect.context_window
        windows = self._backend.windows
        if window is None and windows is not None:
            budget = (target.first_byte_timeout or target.idle_timeout) / 2  # the probe's, at most
            window = await window_of(windows, self._upstream_model, budget)
            # Unknown: a name the upstream does not list (its list was read) or one it tells
            # nothing of. Only the former has a model that runs in its place.
            runs = windows.sole_model(self._upstream_model) if window is None else None
            if runs is not None:
                window = await window_of(windows, runs, budget)
                self._fill_sampling(runs)
        self._check_fits(window)
        self._fit_output(window)

    def _fill_sampling(self, runs: str) -> None:
        """The sampling of the family of `runs`, the model that answers, for what the request
        leaves unset, when the name it was asked by has none (a client's own name)."""
        if self._target.dialect.default_sampling != "auto":
            return
        values = _stand_in_sampling(self._upstream_model, runs)
        if not values:
            return
        assert self._unsent is not None
        chat = self._unsent[1]
        missing = {key: value for key, value in values.items() if key not in chat.body}
        if missing:
            chat.body.update(missing)
            self._http.rewrite(BodyParts.of(chat.pieces()))

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


@functools.lru_cache(maxsize=256)  # asked for every request to a name the upstream does not list
def _stand_in_sampling(asked: str, runs: str) -> Mapping[str, Any]:
    """The sampling of a request asked as `asked` and answered by `runs`: the family values of
    `runs` when `asked` has none of its own (read only: shared), else none."""
    if family_sampling(asked) is not None:
        return {}
    family = family_sampling(runs)
    return for_server(family, None).values if family is not None else {}


class _FilesFirst:  # a backends.base.Call
    """A chat call whose request holds files not read yet: `open()` reads them in a worker
    thread (PDF parsing is ~1 ms a page; the event loop goes on serving meanwhile), then the
    request is translated with their text and sent as any other."""

    def __init__(
        self,
        backend: ChatBackend,
        req: ResponsesRequest,
        upstream_model: str,
        inbound: Inbound,
        files: FileTexts,
        keep: bool,
    ) -> None:
        self._backend, self._req, self._model, self._inbound = backend, req, upstream_model, inbound
        self._files, self._keep = files, keep
        self._call: ChatCall | None = None

    async def open(self) -> None:
        """Raises InvalidRequest naming a file that cannot be read, and what ChatCall.open raises."""
        backend, req, model, inbound, files = (
            self._backend,
            self._req,
            self._model,
            self._inbound,
            self._files,
        )
        translated = await with_files(
            files, lambda: _translate(backend, req, model, inbound, files, self._keep)
        )
        self._call = ChatCall(backend, req, model, inbound, translated)
        del self._req, self._files  # the request is the call's now
        await self._call.open()

    def events(self) -> AsyncGenerator[list[Event], None]:
        assert self._call is not None, "open() first"
        return self._call.events()


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

    def call(self, req: ResponsesRequest, upstream_model: str, inbound: Inbound = UNKNOWN) -> Call:
        """Raises InvalidRequest for input the upstream could not read (for a file, from
        open(): files are read there, off the event loop). (A dialect naming an unknown text
        tool-call format, which settings refuse, raises ValueError in open().)"""
        files = FileTexts()
        translated = _translate(self, req, upstream_model, inbound, files)
        if files.unread:  # the files this translation met: read at open(), then translated again
            return _FilesFirst(self, req, upstream_model, inbound, files, keep=translated[3])
        return ChatCall(self, req, upstream_model, inbound, translated)
