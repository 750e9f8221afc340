"""Split inline thinking (`<think>…</think>` and kin) out of streamed answer text. Pure and synchronous.

Models served without a reasoning parser write their thinking into the content:
`<think>\\nreasoning…\\n</think>\\n\\nanswer`. `ThinkSplitter` is fed that content piece by piece
and returns `("reasoning", text)` and `("text", text)` pieces. Whatever the chunking, the
concatenated pieces are the same (the tests split every case at every character).

Rules:

- Only a think block at the very start of the message counts (leading whitespace before the
  opening tag is allowed and dropped). Once answer text has been released, a `<think>` later in
  the prose stays text: the model may be talking about tags, and text already sent cannot be
  taken back.
- Tags are matched case-insensitively (ASCII). The tags themselves are dropped, and so are the
  whitespace at the start of the reasoning, the newlines that end it (`\\n</think>`) and the
  newlines right after the closing tag (`</think>\\n\\n`). Every other character comes out
  exactly once.
- Chat templates such as DeepSeek-R1's or Qwen3-thinking's emit `<think>\\n` themselves, so the
  stream starts inside the block and only has the closing tag:
  * `start_inside=True` says so: the stream is reasoning until a closing tag (an explicit opening
    tag at the start is still accepted and dropped). If none comes, it was all reasoning
    (`think.unclosed`).
  * Otherwise the splitter auto-detects: it holds back the start of the stream until it can
    decide. A closing tag that *starts within the first `probe_chars` characters* (64 by
    default, counted after leading whitespace) with no opening tag before it means the stream
    began inside a think block; `probe_chars` characters with no such tag mean there is none,
    and everything is released as text. The bound is in characters, so a non-thinking answer
    is delayed by at most about 64 characters. Auto-detection therefore catches the short and
    empty blocks (`</think>\\n\\nanswer`, the usual "thinking off" shape); long implicit
    reasoning needs `start_inside=True`. A closing tag that shows up after text was released
    stays text and is counted as `think.late_close`, the hint that a model needs
    `start_inside`.
- While a block is open, only what could be the start of its closing tag (plus the newlines
  right before it) is held back.
- Tag families (`THINK_TAGS`): `<think>`, `<thinking>`, `<reasoning>`, `<seed:think>`,
  `◁think▷`, `<|START_THINKING|>`, `<|begin_of_thought|>` (whose `<|begin_of_solution|>` /
  `<|end_of_solution|>` answer markers are dropped too), and gpt-oss harmony printed as text
  (`<|channel|>analysis<|message|>…<|end|>`, then `<|start|>assistant<|channel|>final<|message|>`
  is dropped). Any family's closing tag but harmony's `<|end|>` can end a block that the chat
  template opened.

Outcomes counted in the optional `counts` (once per message): `think.block` (opening tag at the
start, closed), `think.start_inside` (configured, closed), `think.auto_inside` (detected),
`think.unclosed` (the stream ended inside the block; what was there is reasoning),
`think.none` (no think block); and `think.late_close` as above.
"""

from __future__ import annotations

import functools
import re
import string
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["THINK_TAGS", "Piece", "PieceKind", "ThinkSplitter", "ThinkTags"]

PieceKind = Literal["reasoning", "text"]
Piece = tuple[PieceKind, str]

_State = Literal["probe", "reasoning", "after_close", "answer"]

_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
_NEWLINES = "\r\n"
_LT, _TRIANGLE = "<", "◁"
_TAG_STARTS = (_LT, _TRIANGLE)  # every closing tag begins with one of these


def _lower(text: str) -> str:
    # ASCII only, so that indices in the lowered text are indices in the original (for ASCII
    # text, which `isascii` tells without a scan, that is `lower`, several times cheaper).
    return text.lower() if text.isascii() else text.translate(_ASCII_LOWER)


@dataclass(frozen=True, slots=True)
class ThinkTags:
    """One family of thinking markers.

    `implicit`: the chat template may have emitted `open` already (so a bare `close` ends a
    block). `answer_open` is a marker dropped right after `close` (after newlines);
    `answer_close` is a marker dropped wherever it appears in the answer.
    """

    open: str
    close: str
    implicit: bool = True
    answer_open: str = ""
    answer_close: str = ""


THINK_TAGS: tuple[ThinkTags, ...] = (
    ThinkTags("<think>", "</think>"),  # DeepSeek-R1, Qwen3, QwQ, GLM, MiniMax, most others
    ThinkTags("<thinking>", "</thinking>"),
    ThinkTags("<reasoning>", "</reasoning>"),
    ThinkTags("<seed:think>", "</seed:think>"),  # ByteDance Seed-OSS
    ThinkTags("\u25c1think\u25b7", "\u25c1/think\u25b7"),  # Kimi-VL thinking: ◁think▷ … ◁/think▷
    ThinkTags("<|START_THINKING|>", "<|END_THINKING|>"),  # Cohere Command A Reasoning
    # Sky-T1 / Bespoke-Stratos / OpenThinker (first release) system-prompt format.
    ThinkTags(
        "<|begin_of_thought|>",
        "<|end_of_thought|>",
        answer_open="<|begin_of_solution|>",
        answer_close="<|end_of_solution|>",
    ),
    # gpt-oss harmony rendered as text: analysis channel, then the final channel. Tool calls on
    # the commentary channel are left as text for a tool-call stage.
    ThinkTags(
        "<|channel|>analysis<|message|>",
        "<|end|>",
        implicit=False,
        answer_open="<|start|>assistant<|channel|>final<|message|>",
        answer_close="<|return|>",
    ),
)


@functools.lru_cache(maxsize=64)
def _proper_prefixes(markers: tuple[str, ...]) -> tuple[frozenset[str], int]:
    """Every non-empty proper prefix of `markers`, and the longest one's length: held once per
    set of markers (the probe of every response's first delta asks)."""
    prefixes = frozenset(m[:k] for m in markers for k in range(1, len(m)))
    return prefixes, max((len(m) for m in markers), default=1) - 1


def _partial_suffix(low: str, markers: tuple[str, ...], shortest: int = 1) -> int:
    """Length of the longest suffix of `low` that is a proper prefix of one of `markers`, if
    it is at least `shortest` long; else 0."""
    prefixes, longest = _proper_prefixes(markers)
    for k in range(min(len(low), longest), max(shortest, 1) - 1, -1):
        if low[-k:] in prefixes:
            return k
    return 0


@functools.lru_cache(maxsize=64)
def _marker_search(markers: tuple[str, ...]) -> tuple[re.Pattern[str], dict[str, int]]:
    """One pattern finding the earliest of `markers` (the first listed wins at a position),
    and each marker's index."""
    index: dict[str, int] = {}
    for i, marker in enumerate(markers):
        index.setdefault(marker, i)
    return re.compile("|".join(map(re.escape, markers))), index


def _find_first(low: str, markers: tuple[str, ...]) -> tuple[int, int]:
    """(position, index into `markers`) of the earliest marker in `low`, or (-1, -1)."""
    if not markers:
        return (-1, -1)
    pattern, index = _marker_search(markers)
    found = pattern.search(low)
    return (-1, -1) if found is None else (found.start(), index[found.group()])


def _emit(out: list[Piece], kind: PieceKind, text: str) -> None:
    if not text:
        return
    if out and out[-1][0] == kind:
        out[-1] = (kind, out[-1][1] + text)
    else:
        out.append((kind, text))


@dataclass(frozen=True, slots=True)
class _Markers:
    """What a splitter derives from its tag families, lowered once per set of families."""

    implicit: tuple[ThinkTags, ...]
    opens: tuple[str, ...]
    implicit_closes: tuple[str, ...]
    open_prefixes: frozenset[str]  # every non-empty prefix of an opening tag, whole ones too

    @classmethod
    def of(cls, tags: tuple[ThinkTags, ...]) -> _Markers:
        implicit = tuple(t for t in tags if t.implicit)
        opens = tuple(_lower(t.open) for t in tags)
        prefixes = _proper_prefixes(opens)[0] | frozenset(opens)
        return cls(implicit, opens, tuple(_lower(t.close) for t in implicit), prefixes)


# Built once: every response with think tags makes a splitter for the default families.
_DEFAULT_MARKERS = _Markers.of(THINK_TAGS)


class ThinkSplitter:
    """Streaming splitter of one message's content into reasoning and answer text.

    `feed(text)` returns the pieces that are certain so far; `finish()` flushes what was held
    back. Adjacent pieces of one kind in one call are merged; no piece is empty.
    """

    def __init__(
        self,
        start_inside: bool = False,
        *,
        counts: Counter[str] | None = None,
        probe_chars: int = 64,
        tags: tuple[ThinkTags, ...] = THINK_TAGS,
    ) -> None:
        self._start_inside = start_inside
        self._counts = counts
        self._probe_chars = probe_chars
        self._all = tags
        markers = _DEFAULT_MARKERS if tags is THINK_TAGS else _Markers.of(tags)
        self._implicit = markers.implicit
        self._opens = markers.opens
        self._open_prefixes = markers.open_prefixes
        self._implicit_closes = markers.implicit_closes
        self._state: _State = "probe"
        self._buf = ""
        self._tags: ThinkTags | None = None  # the family in use, once known
        self._how = ""  # outcome to count when the block closes
        self._reasoning_started = False
        self._answer_open_done = False
        self._watch_late = False  # answer with no think block: count a late closing tag
        self._late_tail = ""
        self._finished = False

    def feed(self, text: str) -> list[Piece]:
        """Pieces released by this chunk. Raises `RuntimeError` after `finish()`."""
        if self._finished:
            raise RuntimeError("ThinkSplitter.feed() after finish()")
        self._buf += text
        out: list[Piece] = []
        self._run(out, final=False)
        return out

    def passes(self, text: str) -> bool:
        """Whether `feed(text)` would give back exactly `[("text", text)]` and change no state:
        the answer has begun, nothing is held back, no marker is being dropped, and `text`
        cannot begin a late closing tag. Asked first for every answer delta, so the common one
        skips the state machine; False only means "use `feed`"."""
        return (
            self._state == "answer"
            and not self._finished
            and not self._buf
            and text != ""
            and (self._tags is None or not self._tags.answer_close)
            # (the two `in` tests: `any()` over _TAG_STARTS costs a generator per delta)
            and not (self._watch_late and (self._late_tail or _LT in text or _TRIANGLE in text))
        )

    def passing(self, texts: Sequence[str], end: int) -> int:
        """How many of `texts[:end]`, from the first, `passes` says yes to (it changes no
        state, so this is one call for a run of deltas)."""
        if not (
            self._state == "answer"
            and not self._finished
            and not self._buf
            and (self._tags is None or not self._tags.answer_close)
        ):
            return 0
        late = self._watch_late
        if late and self._late_tail:
            return 0
        run = texts[:end]
        if all(run):  # the common run: plain text, searched once
            joined = "".join(run) if late else ""
            if _LT not in joined and _TRIANGLE not in joined:
                return end
        for index in range(end):
            text = texts[index]
            if not text or (late and (_LT in text or _TRIANGLE in text)):
                return index
        return end

    def finish(self) -> list[Piece]:
        """Everything still held back. Raises `RuntimeError` if called twice."""
        if self._finished:
            raise RuntimeError("ThinkSplitter.finish() called twice")
        self._finished = True
        out: list[Piece] = []
        self._run(out, final=True)
        return out

    def _count(self, outcome: str) -> None:
        if self._counts is not None:
            self._counts[outcome] += 1

    def _run(self, out: list[Piece], final: bool) -> None:
        while True:
            if self._state == "probe":
                progressed = self._probe(final)
            elif self._state == "reasoning":
                progressed = self._reasoning(out, final)
            elif self._state == "after_close":
                progressed = self._after_close(final)
            else:
                self._answer(out, final)
                progressed = False
            if not progressed:
                return

    # -- states; each returns True when it moved to another state ---------------------------

    def _probe(self, final: bool) -> bool:
        body = self._buf.lstrip()
        low = _lower(body)
        for tags, open_low in zip(self._all, self._opens, strict=True):
            if low.startswith(open_low):
                self._enter_reasoning(tags, "think.block", body[len(open_low) :])
                return True
        if not final and (not body or low in self._open_prefixes):
            return False  # could still become an opening tag
        if self._start_inside:
            self._enter_reasoning(None, "think.start_inside", self._buf)
            return True
        pos, i = _find_first(low, self._implicit_closes)
        if pos != -1 and pos < self._probe_chars:
            tags = self._implicit[i]
            if low.find(_lower(tags.open), 0, pos) == -1:
                self._enter_reasoning(None, "think.auto_inside", self._buf)
                return True
        elif not final:
            # Only a partial tag that starts within the bound matters (with the default bound
            # of 1, only the whole answer so far): checking every shorter suffix of the first
            # delta cost ~30 us per response.
            within = len(body) - self._probe_chars + 1
            partial = _partial_suffix(low, self._implicit_closes, within)
            if len(body) < self._probe_chars or (partial and len(body) - partial < self._probe_chars):
                return False  # a closing tag could still start within the bound
        self._count("think.none")
        self._watch_late = True
        self._state = "answer"
        return True

    def _enter_reasoning(self, tags: ThinkTags | None, how: str, rest: str) -> None:
        self._tags = tags
        self._how = how
        self._buf = rest
        self._state = "reasoning"

    def _reasoning(self, out: list[Piece], final: bool) -> bool:
        if not self._reasoning_started:
            self._buf = self._buf.lstrip()
            if not self._buf and not final:
                return False
            self._reasoning_started = True
        closes = (_lower(self._tags.close),) if self._tags else self._implicit_closes
        low = _lower(self._buf)
        pos, i = _find_first(low, closes)
        if pos != -1:
            _emit(out, "reasoning", self._buf[:pos].rstrip(_NEWLINES))
            if self._tags is None:
                self._tags = self._implicit[i]
            self._count(self._how)
            self._buf = self._buf[pos + len(closes[i]) :]
            self._state = "after_close"
            return True
        if final:
            _emit(out, "reasoning", self._buf)
            self._buf = ""
            self._count("think.unclosed")
            return False
        keep = len(self._buf) - _partial_suffix(low, closes)
        keep = len(self._buf[:keep].rstrip(_NEWLINES))  # newlines before a closing tag are dropped
        _emit(out, "reasoning", self._buf[:keep])
        self._buf = self._buf[keep:]
        return False

    def _after_close(self, final: bool) -> bool:
        while True:
            self._buf = self._buf.lstrip(_NEWLINES)
            if not self._buf and not final:
                return False
            marker = _lower(self._tags.answer_open) if self._tags else ""
            if not marker or self._answer_open_done:
                break
            low = _lower(self._buf)
            if low.startswith(marker):
                self._buf = self._buf[len(marker) :]
                self._answer_open_done = True
                continue
            if marker.startswith(low) and not final:
                return False
            self._answer_open_done = True
        self._state = "answer"
        return True

    def _answer(self, out: list[Piece], final: bool) -> None:
        marker = _lower(self._tags.answer_close) if self._tags else ""
        if marker:
            text = self._drop_marker(marker, final)
        else:
            text, self._buf = self._buf, ""
        if self._watch_late:
            self._watch_late_close(text)
        _emit(out, "text", text)

    def _drop_marker(self, marker: str, final: bool) -> str:
        parts: list[str] = []
        low = _lower(self._buf)
        start = 0
        while (pos := low.find(marker, start)) != -1:
            parts.append(self._buf[start:pos])
            start = pos + len(marker)
        rest = self._buf[start:]
        hold = 0 if final else _partial_suffix(_lower(rest), (marker,))
        parts.append(rest[: len(rest) - hold])
        self._buf = rest[len(rest) - hold :]
        return "".join(parts)

    def _watch_late_close(self, text: str) -> None:
        # On the hot path of every answer chunk: skip chunks that cannot hold or end a tag.
        if not text or not self._implicit_closes:
            return
        if not self._late_tail and not any(c in text for c in _TAG_STARTS):
            return
        window = self._late_tail + _lower(text)
        if _find_first(window, self._implicit_closes)[0] != -1:
            self._count("think.late_close")
            self._watch_late = False  # once per message
            return
        tail = window[-(max(len(c) for c in self._implicit_closes) - 1) :]
        start = max(tail.rfind(c) for c in _TAG_STARTS)
        self._late_tail = tail[start:] if start != -1 else ""
