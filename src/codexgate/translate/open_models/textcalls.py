"""Tool calls that a model printed as text -> calls, recognised while the text streams.

Open models served without a tool parser (Ollama templates, llama.cpp without `--jinja`, LM
Studio, plain vLLM) write their tool calls into `content` in their family's own markup.
`TextToolCallParser` is fed that content piece by piece and gives back `TextPiece`s and
`CallPiece`s. It never invents: a call is only returned when the markup is complete, the tool is
one the client advertised and the arguments pass `repair_arguments` (the tool's JSON Schema
included). Anything else is handed back as the very text the model wrote, and counted.

Text is held back only from a character that may begin a call marker (`<`, `[`, and at the start
of a line `{`, `[` or three backticks) until it is clearly a call or clearly not; the rest is
released at once. Whitespace alone at the start of the message, between calls and after the last
call is dropped. A block holding several calls (a Mistral array, a DeepSeek section) becomes calls
only when every call in it is good; otherwise the whole block is text.

The formats themselves are in translate/open_models/textcall_formats.py.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from types import MappingProxyType
from typing import Any, TypeAlias

from codexgate.translate.open_models.repair import repair_arguments
from codexgate.translate.open_models.textcall_formats import (
    FORMATS,
    MODES,
    NEED_MORE,
    Block,
    NeedMore,
    NotACall,
    Opener,
    Problem,
    RawCall,
    ScanContext,
    ScanResult,
    TextCallFormat,
)

__all__ = [
    "FORMATS",
    "MODES",
    "NEED_MORE",
    "Block",
    "CallPiece",
    "NotACall",
    "Opener",
    "Piece",
    "RawCall",
    "ScanContext",
    "ScanResult",
    "TextCallFormat",
    "TextPiece",
    "TextToolCallParser",
]


@dataclass(frozen=True, slots=True)
class TextPiece:
    text: str


@dataclass(frozen=True, slots=True)
class CallPiece:
    name: str
    arguments: str  # a compact JSON object


Piece: TypeAlias = TextPiece | CallPiece


@dataclass(frozen=True, slots=True)
class _Openers:
    """A mode's call openers by their first character, in order (a candidate is tried only
    against those that can match it: a backtick in prose against one, not all fourteen), and
    the pattern that finds a candidate. Built once per mode, not per response."""

    at: Mapping[str, tuple[tuple[TextCallFormat, Opener], ...]]
    candidate: re.Pattern[str] | None
    # What can open a call in a delta, in its context (`take_plain`): an `anywhere` opener,
    # or the start of one at the delta's end; a `line_start` opener's first character after
    # a newline (and spaces), or at the delta's start when a line starts there; a
    # `message_start` one's at the start of the message. A code answer is full of `[`, `{`
    # and `<` that are none of these.
    live: re.Pattern[str] | None
    line_firsts: str
    message_firsts: str

    @classmethod
    def of(cls, mode: str) -> _Openers:
        formats = FORMATS if mode == "auto" else tuple(f for f in FORMATS if f.name == mode)
        at: dict[str, tuple[tuple[TextCallFormat, Opener], ...]] = {}
        anywhere: set[str] = set()
        line_firsts, message_firsts = set(), set()
        for fmt in formats:
            for opener in fmt.openers:
                at[opener.text[0]] = (*at.get(opener.text[0], ()), (fmt, opener))
                if opener.where == "anywhere":
                    anywhere.add(opener.text)
                elif opener.where == "line_start":
                    line_firsts.add(opener.text[0])
                else:
                    message_firsts.add(opener.text[0])
        firsts = "".join(sorted(at))
        if not firsts:
            return cls(MappingProxyType(at), None, None, "", "")
        whole = [re.escape(text) for text in sorted(anywhere)]
        starts = {re.escape(text[:n]) for text in anywhere for n in range(1, len(text))}
        live = [*whole, rf"(?:{'|'.join(sorted(starts))})\Z"] if starts else whole
        if line_firsts:
            live.append(rf"\n[ \t]*[{re.escape(''.join(sorted(line_firsts)))}]")
        return cls(
            MappingProxyType(at),
            re.compile(f"[{re.escape(firsts)}]"),
            re.compile("|".join(live)) if live else None,
            "".join(sorted(line_firsts)),
            "".join(sorted(message_firsts)),
        )


_OPENERS: Mapping[str, _Openers] = MappingProxyType({mode: _Openers.of(mode) for mode in MODES})


# -- the parser


class TextToolCallParser:
    """Streaming recogniser of tool calls written as text. Pure and synchronous.

    `tools` maps each advertised (chat-side) tool name to its JSON Schema for parameters (None
    accepts any object). `mode` is `auto` (every format), one format's name, or `off` (text
    passes through untouched). With `counts`, adds one to `textcalls.<format>.parsed` per call
    returned and to `.unknown_tool`, `.bad_arguments` or `.unterminated` per call (or block)
    given back as text; `repair_arguments` counts its own `arguments.*`. Raises ValueError for
    an unknown mode."""

    def __init__(
        self,
        tools: Mapping[str, dict[str, Any] | None],
        mode: str = "auto",
        counts: Counter[str] | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown text tool-call mode {mode!r}; expected one of {', '.join(MODES)}")
        self._tools = dict(tools)
        self._counts = counts
        self._off = mode == "off"
        openers = _OPENERS[mode]
        self._openers = openers
        self._openers_at = openers.at
        self._candidate = openers.candidate
        self._buf = ""
        self._base = 0  # stream offset of _buf[0]
        self._ctx: ScanContext | None = None  # the held candidate's scan state
        self._ctx_at = -1  # its stream offset
        self._drop_ws = True  # whitespace here may go: nothing yet, or right after a call
        self._line_blank = True  # _buf[0] starts a line (after optional spaces)
        self._message_start = True  # nothing but droppable whitespace before _buf[0]

    def feed(self, text: str) -> list[Piece]:
        """The next piece of the model's content; returns what can be decided now."""
        if self._off:
            return [TextPiece(text)] if text else []
        self._buf += text
        return self._drain(final=False)

    def take_plain(self, text: str) -> bool:
        """Takes `text` and returns True when it is plain text that `feed` would release whole,
        as one `TextPiece(text)`, updating the same state; returns False, having done nothing,
        when `feed` must decide (something is held, `text` has a character that may open a
        call, or it is whitespace that may be dropped). The hot path of every answer delta."""
        return self.take_plains((text,), 1) == 1

    def take_plains(self, texts: Sequence[str], end: int) -> int:
        """`take_plain` for `texts[:end]` in order, up to the first it leaves to `feed`: how
        many were taken. One call for a run of deltas (an upstream's read of many chunks):
        the run is searched once for characters that may open a call, and only a text that
        holds one is looked at on its own."""
        run = list(texts[:end])
        if "" in run:
            run = run[: run.index("")]
        if self._off or not run:
            return len(run)
        if self._buf or (self._drop_ws and not run[0].strip()):
            return 0
        joined = "".join(run)
        candidate = self._candidate
        ends: list[int] = []  # where each text ends in `joined`, once a candidate is found
        taken = offset = 0
        while taken < len(run):
            found = candidate.search(joined, offset) if candidate is not None else None
            if found is None:
                self._released(joined, offset, len(joined))
                taken = len(run)
                break
            ends = ends or list(accumulate(map(len, run)))
            holder = bisect_right(ends, found.start())  # the text holding the candidate
            if holder > taken:
                self._released(joined, offset, ends[holder - 1])
            if self._live(run[holder]):
                taken = holder
                break
            self._released(joined, ends[holder - 1] if holder else 0, ends[holder])
            taken, offset = holder + 1, ends[holder]
        if taken:
            self._ctx = None
        return taken

    def _released(self, joined: str, start: int, stop: int) -> None:
        """What `_drain` does when it finds no call in `joined[start:stop]` and releases it."""
        if stop <= start:
            return
        self._drop_ws = self._message_start = False
        last = joined[start:stop].rstrip(" \t")
        if last:
            self._line_blank = last[-1] == "\n"
        self._base += stop - start

    def _live(self, text: str) -> bool:
        """Whether a candidate character in `text` may open a call where it stands (what
        `_drain` would have to try); False when every one is inert there."""
        openers = self._openers
        if openers.live is not None and openers.live.search(text):
            return True
        if self._line_blank and text.lstrip(" \t")[:1] in openers.line_firsts:
            return bool(openers.line_firsts)
        first = text.lstrip()[:1]
        return self._message_start and bool(openers.message_firsts) and first in openers.message_firsts

    def finish(self) -> list[Piece]:
        """The content has ended: decides everything still held."""
        if self._off:
            return []
        return self._drain(final=True)

    # -- the scan

    def _drain(self, final: bool) -> list[Piece]:
        buf = self._buf
        out: list[Piece] = []
        text_start = 0  # unreleased plain text begins here
        anchor = 0  # self._line_blank describes this position
        i = 0
        held = -1
        while self._candidate is not None:
            found = self._candidate.search(buf, i)
            if found is None:
                break
            j = found.start()
            at_line_start = self._line_start(buf, j, anchor)
            at_message_start = self._message_start and not buf[text_start:j].strip()
            owner, result = self._try(buf, j, final, at_line_start, at_message_start)
            if isinstance(result, NeedMore):
                held = j
                break
            if isinstance(result, NotACall):
                i = j + max(result.skip, 1)
                continue
            assert owner is not None
            calls = self._judge(owner, result)
            if calls is None:  # the block stays text
                i = j + max(result.end, 1)
                continue
            before = buf[text_start:j]
            if not (self._drop_ws and not before.strip()):
                self._release(out, before)
            out.extend(calls)
            i = text_start = anchor = j + result.end
            self._drop_ws, self._line_blank, self._message_start = True, True, False

        cut = held if held >= 0 else len(buf)
        pending = buf[text_start:cut]
        if self._drop_ws and not pending.strip():
            keep_from = len(buf) if final and held < 0 else text_start  # hold it, or drop it at the end
        else:
            self._release(out, pending)
            keep_from = cut
        self._line_blank = self._line_start(buf, keep_from, anchor)
        self._buf = buf[keep_from:]
        self._base += keep_from
        if held < 0:
            self._ctx = None
        return out

    def _line_start(self, buf: str, j: int, anchor: int) -> bool:
        k = j - 1
        while k >= anchor and buf[k] in " \t":
            k -= 1
        return self._line_blank if k < anchor else buf[k] == "\n"

    def _try(
        self, buf: str, j: int, final: bool, line_start: bool, message_start: bool
    ) -> tuple[TextCallFormat | None, ScanResult]:
        """The first format whose opener is at `buf[j]` and claims the text."""
        text = buf[j:]
        skip = 1
        for fmt, opener in self._openers_at.get(buf[j], ()):
            if (opener.where == "line_start" and not line_start) or (
                opener.where == "message_start" and not message_start
            ):
                continue
            if text.startswith(opener.text):
                result = fmt.scan(text, opener.text, self._context(j, final))
                if isinstance(result, NotACall):
                    skip = max(skip, result.skip)
                    continue
                return fmt, result
            if not final and opener.text.startswith(text):
                return fmt, NEED_MORE
        return None, NotACall(skip)

    def _context(self, j: int, final: bool) -> ScanContext:
        if self._ctx is None or self._ctx_at != self._base + j:
            self._ctx, self._ctx_at = ScanContext(self._tools), self._base + j
        self._ctx.final = final
        return self._ctx

    def _judge(self, fmt: TextCallFormat, block: Block) -> list[Piece] | None:
        """The block's calls, or None (counted) when the block must stay text."""
        if block.problem is not None or not block.calls:
            self._count(fmt, block.problem or "bad_arguments")
            return None
        pieces: list[Piece] = []
        problems: list[Problem] = []
        for call in block.calls:
            name = call.name.strip() if isinstance(call.name, str) else None
            if not name:
                problems.append("bad_arguments")
                continue
            if name not in self._tools:
                problems.append("unknown_tool")
                continue
            raw = call.arguments
            arguments: str | list[Any] | None
            if raw is None or isinstance(raw, str | list):
                arguments = raw
            else:  # the markup's own object form (not a repair), or a number, true, ...
                arguments = json.dumps(raw, ensure_ascii=False)
            result = repair_arguments(
                arguments, self._tools[name], counts=self._counts, prior_repairs=call.repairs
            )
            if result.arguments is None:
                problems.append("bad_arguments")
                continue
            pieces.append(CallPiece(name, result.arguments))
        if problems:
            for problem in problems:
                self._count(fmt, problem)
            return None
        self._count(fmt, "parsed", len(pieces))
        return pieces

    def _count(self, fmt: TextCallFormat, what: str, n: int = 1) -> None:
        if self._counts is not None:
            self._counts[f"textcalls.{fmt.name}.{what}"] += n

    def _release(self, out: list[Piece], text: str) -> None:
        if not text:
            return
        if out and isinstance(out[-1], TextPiece):
            out[-1] = TextPiece(out[-1].text + text)
        else:
            out.append(TextPiece(text))
        self._drop_ws = self._message_start = False
