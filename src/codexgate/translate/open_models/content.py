"""The stage for open models' content: reasoning written as `<think>` text, then tool calls
written as text. Pure and synchronous.

Content flows through `ThinkSplitter` first (a tool call inside the thinking is not a call),
then the answer text through `TextToolCallParser`. What comes out is reasoning text, answer text
and recognised calls, in order, as if the upstream had sent `reasoning_content` and structured
`tool_calls`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeAlias

from codexgate.translate.dialect import ThinkMode
from codexgate.translate.open_models.textcalls import CallPiece, TextPiece, TextToolCallParser
from codexgate.translate.open_models.think import Piece as ThinkPiece
from codexgate.translate.open_models.think import ThinkSplitter

Reasoning: TypeAlias = tuple[Literal["reasoning"], str]
Output: TypeAlias = Reasoning | TextPiece | CallPiece

_THINK_PROBE_CHARS = 1  # a closing tag counts only as the first thing in the answer


class ContentStage:
    def __init__(
        self,
        tool_schemas: Mapping[str, dict[str, Any] | None],
        *,
        think: ThinkMode = "auto",
        text_calls: str = "auto",
        counts: Counter[str] | None = None,
    ) -> None:
        """Raises ValueError for an unknown `text_calls` mode."""
        # In auto mode the splitter holds the start of an answer while it looks for a stray
        # closing tag (a block the template opened, e.g. "</think>\n\nanswer"). Looking only at
        # the very start keeps plain answers from waiting: long implicit reasoning needs
        # think_tags = "start_inside" anyway.
        self._think = None
        if think != "off":
            self._think = ThinkSplitter(
                think == "start_inside", counts=counts, probe_chars=_THINK_PROBE_CHARS
            )
        self._calls = None
        if text_calls != "off" and tool_schemas:
            self._calls = TextToolCallParser(tool_schemas, text_calls, counts)

    def feed(self, text: str) -> list[Output]:
        if self._think is None:
            return self._answer(text, final=False)
        return self._route(self._think.feed(text), final=False)

    def feed_text(self, text: str) -> list[Output] | None:
        """`feed(text)`, except that None stands for `[TextPiece(text)]`: the common delta,
        plain answer text, then costs no piece objects. The splitter's `passes` changes
        nothing, so when it says yes the call parser alone decides, as in `feed`."""
        pieces: list[Output]
        if self._think is not None and not self._think.passes(text):
            pieces = self.feed(text)
        elif self._calls is None or self._calls.take_plain(text):
            return None
        else:
            pieces = list(self._calls.feed(text))
        if len(pieces) == 1 and type(pieces[0]) is TextPiece and pieces[0].text == text:
            return None
        return pieces

    def take_texts(self, texts: Sequence[str], end: int) -> int:
        """How many of `texts[:end]`, from the first, `feed_text` would pass unchanged (as None),
        taken as it takes them; the first it would not, and those after, are left untouched."""
        if self._think is not None:
            end = self._think.passing(texts, end)
        if self._calls is None:
            return end
        return self._calls.take_plains(texts, end)

    def finish(self) -> list[Output]:
        if self._think is None:
            return self._answer("", final=True)
        return self._route(self._think.finish(), final=True)

    def _route(self, pieces: list[ThinkPiece], final: bool) -> list[Output]:
        out: list[Output] = []
        for kind, text in pieces:
            if kind == "reasoning":
                out.append(("reasoning", text))
            else:
                out.extend(self._answer(text, final=False))
        if final:
            out.extend(self._answer("", final=True))
        return out

    def _answer(self, text: str, final: bool) -> list[Output]:
        if self._calls is None:
            return [TextPiece(text)] if text else []
        pieces: list[Output] = list(self._calls.feed(text)) if text else []
        if final:
            pieces.extend(self._calls.finish())
        return pieces
