"""Chat Completions stream chunks -> the turn (translate/turn.py). Pure and synchronous.

`ChatStreamTranslator` is what is left of the chat dialect on the way back: choices and deltas,
tool-call fragments numbered by index (or not), finish reasons, usage, error objects in the
stream, `[DONE]`, and how far the server has read the prompt when it says (llama.cpp's
`prompt_progress`, sent with `return_progress`: the backend logs a long prefill's progress).
Everything else (stages, items, the terminal event) is the turn's. A non-streaming answer is fed
as one chunk, so the two cannot drift apart.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import groupby
from typing import Any

import orjson

from codexgate.errors import UpstreamStreamCut
from codexgate.translate.chat_upstream.plain_chunks import PlainChunks
from codexgate.translate.envelope import chat_usage_to_responses
from codexgate.translate.turn import Turn
from codexgate.translate.upstream_errors import classify

__all__ = ["MALFORMED_CHUNKS", "ChatStreamTranslator", "PromptProgress"]

MALFORMED_CHUNKS = "upstream.malformed_chunks"  # counts key: chunks skipped as unreadable


def _plain_content(chunk: Any) -> str | None:
    """The text of the commonest chunk: one choice (index 0) whose delta is nothing but
    non-empty `content`, with no finish_reason, usage or error beside it. None for any other
    chunk, which `feed`'s general walk reads (it gives the same events for this one)."""
    if type(chunk) is not dict:
        return None
    choices = chunk.get("choices")
    if type(choices) is not list or len(choices) != 1 or chunk.get("usage") or chunk.get("error"):
        return None
    choice = choices[0]
    if type(choice) is not dict or choice.get("finish_reason") is not None or choice.get("index", 0) != 0:
        return None
    delta = choice.get("delta")
    if type(delta) is not dict or len(delta) != 1:
        return None
    content = delta.get("content")
    return content if type(content) is str and content else None


@dataclass(frozen=True, slots=True)
class PromptProgress:
    """How far the server has read the prompt (llama.cpp's `prompt_progress`)."""

    processed: int  # tokens of the prompt read so far, those found in its cache included
    total: int  # tokens of the prompt
    cache: int = 0  # tokens found in the server's cache, not read again
    seconds: float | None = None  # since the server began reading it (None: not said)


def _prompt_progress(value: Any) -> PromptProgress | None:
    if type(value) is not dict:
        return None
    processed, total, cache, time_ms = (value.get(k) for k in ("processed", "total", "cache", "time_ms"))
    if type(processed) is not int or type(total) is not int or total <= 0:
        return None
    seconds = None
    if isinstance(time_ms, (int, float)) and not isinstance(time_ms, bool) and time_ms >= 0:
        seconds = time_ms / 1000
    return PromptProgress(processed, total, cache if type(cache) is int else 0, seconds)


class ChatStreamTranslator:
    def __init__(self, turn: Turn, counts: Counter[str] | None = None) -> None:
        """`counts` tallies chunks skipped as unreadable."""
        self.turn = turn
        # What the server reported of its prefill since the backend last took it (take_prompt_progress).
        self.prompt_progress: list[PromptProgress] = []
        self._counts = counts
        self._finish_reason: str | None = None
        self._call_keys: dict[int, int] = {}  # upstream index -> the turn's key, when they differ
        self._call_ids: dict[int, str | None] = {}  # the turn's key -> the upstream's call id
        self._args_started: set[int] = set()  # keys whose arguments started: their name is whole
        # An event-stream payload decoded, a plain text chunk read from its bytes as its text.
        plain = PlainChunks(_plain_content)
        self.decode = plain.decode
        self.decode_all = plain.decode_all

    # -- public API: each call feeds the turn; its run loop (or a test) takes the events

    @property
    def done(self) -> bool:
        """The turn has ended."""
        return self.turn.done

    def feed(self, chunk: Any) -> None:
        """One chunk as `decode` gives it (a str: a plain chunk's text). Raises an
        UpstreamError for an error object in the stream, and the turn's failure
        (ModelOutputLoop when the loop guard stops the model); what the chunk fed before that
        stays in the turn and goes out ahead of `fail()`'s events."""
        turn = self.turn
        if turn.done:
            return
        content = chunk if type(chunk) is str else _plain_content(chunk)
        if content is not None:  # most chunks: skip the general walk below
            turn.text(content)
        else:
            self._walk(chunk)
        if turn.failure is not None:
            raise turn.failure

    def feed_all(self, chunks: list[Any]) -> None:
        """`feed` for each chunk in order (an upstream's read of many): a run of plain text
        deltas goes to the turn in one call (Turn.texts), with the same events. Raises as
        `feed` does, at the chunk that failed; the chunks after it are not fed."""
        texts: list[str] = []
        # Grouped by type: a read's chunks are nearly all texts already (`decode`), taken in
        # runs without a test per chunk here.
        for kind, group in groupby(chunks, type):
            if kind is str:
                texts.extend(group)
                continue
            for chunk in group:
                content = _plain_content(chunk)
                if content is not None:
                    texts.append(content)
                    continue
                if texts:
                    self._feed_texts(texts)
                    texts = []
                self.feed(chunk)
        if texts:
            self._feed_texts(texts)

    def _feed_texts(self, texts: list[str]) -> None:
        turn = self.turn
        if turn.done:
            return
        turn.texts(texts)
        if turn.failure is not None:
            raise turn.failure

    def take_prompt_progress(self) -> list[PromptProgress]:
        """What the server reported of its prefill since the last call, in order."""
        taken, self.prompt_progress = self.prompt_progress, []
        return taken

    def count_malformed(self) -> None:
        """An upstream chunk that was skipped because it could not be read."""
        if self._counts is not None:
            self._counts[MALFORMED_CHUNKS] += 1

    def finish(self) -> None:
        """End of the upstream stream ([DONE] or a clean EOF). Raises UpstreamStreamCut when the
        upstream never said it had finished."""
        if self.turn.done:
            return
        if self._finish_reason is None:
            raise UpstreamStreamCut(
                "The upstream closed the stream before the model finished (no finish_reason, no [DONE])."
            )
        self.turn.finish(self._finish_reason)

    def feed_whole(self, data: Any, headers: Mapping[str, str]) -> bool:
        """A 200 answer that was one JSON value: a `chat.completion` (a server that ignored
        `stream`) is read like one chunk and the end; an error object raises, classified with
        its own message; anything else is not a chat answer (False)."""
        if isinstance(data, dict) and isinstance(data.get("choices"), list):
            self.feed(data)
            self.end_of_stream_marker()
            return True
        if isinstance(data, dict) and data.get("error"):
            raise classify(0, data, headers)
        return False

    def end_of_stream_marker(self) -> None:
        """The upstream sent `[DONE]`: a finished stream even if it never gave a finish_reason."""
        if self._finish_reason is None:
            self._finish_reason = "tool_calls" if self.turn.has_calls else "stop"
        self.finish()

    # -- chat chunks -> the turn

    def _walk(self, chunk: Any) -> None:
        if not isinstance(chunk, dict):
            self.count_malformed()
            return
        if "prompt_progress" in chunk:  # beside an empty delta, while the server reads the prompt
            progress = _prompt_progress(chunk["prompt_progress"])
            if progress is not None:
                self.prompt_progress.append(progress)
        choices = chunk.get("choices") or ()  # [] too: the usage chunk at the end has no choices
        if not isinstance(choices, (list, tuple)):
            self.count_malformed()  # upstream values are read leniently: skip what has no shape
            choices = ()
        for choice in choices:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # n > 1 is never requested
            delta = choice.get("delta") or choice.get("message") or {}
            if not isinstance(delta, dict):
                self.count_malformed()
                delta = {}
            if delta:
                self._delta(delta)
                if self.turn.failure is not None:
                    return
            reason = choice.get("finish_reason")
            if reason == "error" or chunk.get("error"):
                # OpenRouter and others end a failed generation with an error object beside
                # choices and finish_reason "error": a failure, whatever follows.
                raise classify(
                    0, chunk if chunk.get("error") else {"error": "the upstream reported an error"}
                )
            if isinstance(reason, str) and reason:
                self._finish_reason = reason
        if not choices and chunk.get("error"):
            raise classify(0, chunk)
        usage = chunk.get("usage")
        if isinstance(usage, dict) and usage:
            self.turn.usage(chat_usage_to_responses(usage))
            if self._finish_reason is not None and not choices:
                # The dedicated usage chunk comes last: end now rather than wait for [DONE].
                # (Servers that put running usage on every chunk send that last one too.)
                self.turn.finish(self._finish_reason)

    def _delta(self, delta: dict[str, Any]) -> None:
        turn = self.turn
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            turn.reasoning(reasoning)
        content = delta.get("content")
        if isinstance(content, str) and content:
            turn.text(content)
        refusal = delta.get("refusal")
        if isinstance(refusal, str) and refusal:
            turn.refusal(refusal)
        tool_calls = delta.get("tool_calls")
        if tool_calls and isinstance(tool_calls, list):
            for position, call in enumerate(tool_calls):
                if isinstance(call, dict):
                    self._tool_delta(call, position)

    def _tool_delta(self, call: dict[str, Any], position: int) -> None:
        """One fragment of a structured call. The name may come in pieces until the arguments
        start; the turn holds the call until the model's turn ends."""
        index = call.get("index")
        if not isinstance(index, int):
            index = position
        key = self._call_keys.get(index, index)
        call_id = call.get("id") or None
        if not isinstance(call_id, str):
            call_id = None
        turn = self.turn
        known = key in self._call_ids
        if known and call_id and self._call_ids[key] and call_id != self._call_ids[key]:
            # A new id on a known index is a new call (Ollama numbers parallel calls all 0).
            key = max(self._call_ids) + 1
            self._call_keys[index] = key
            known = False
        function = call.get("function") or {}
        if not isinstance(function, dict):
            function = {}
        name = function.get("name")
        name = name if isinstance(name, str) else ""
        if not known:
            self._call_ids[key] = call_id
            turn.open_call(key, name, call_id)
        else:
            if call_id and self._call_ids[key] is None:
                self._call_ids[key] = call_id
                turn.call_id(key, call_id)
            if name and key not in self._args_started:
                turn.call_name(key, name)  # some servers split the name; whole once arguments start
        arguments = function.get("arguments")
        if isinstance(arguments, dict):  # some servers send an object instead of a string
            arguments = orjson.dumps(arguments).decode()
        if isinstance(arguments, str) and arguments:
            self._args_started.add(key)
            turn.call_arguments(key, arguments)
