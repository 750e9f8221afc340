"""The open-model fixes as stages between a backend's semantic output and the response builder.
Pure and synchronous.

A backend feeds its upstream's output to the turn (translate/turn.py) as semantic parts (answer
text, reasoning, tool calls, the end); the turn runs them through a `Pipeline` of stages and
hands what comes out to the `ResponseBuilder`. Stages know nothing about the upstream's dialect
and read the request's tools from its neutral catalogue (translate/catalogue.py), so every
backend serving an open model runs the same ones:

- `ContentStage`: `<think>` text -> reasoning, tool calls written as text -> `TextCall`s
  (translate/open_models/content.py, think.py, textcalls.py);
- `LoopGuardStage`: a model repeating itself -> a `Failure` (translate/open_models/loops.py);
- `ArgumentRepairStage`: a finished function call's arguments, repaired where unambiguous
  (translate/open_models/repair.py);
- `GrammarCheckStage`: a finished custom tool call's input against the grammar the client
  advertised (translate/open_models/patch_grammar.py);
- `StopSequenceStage`: the request's `stop` sequences, for a backend whose upstream cannot
  apply them itself (translate/stops.py);
- `UsageEstimateStage`: token counts when the upstream sent none (Codex only compacts when it
  sees them).

Each stage declares the part types it `accepts`; the others pass by untouched, so a text delta
costs only the stages that look at text. A text stage may also offer `feed_text`, which says
"unchanged" without building parts: the common delta, plain text, then costs a few checks
(`Pipeline.feed_text`; tests/translate/test_fast_path.py holds it to `feed`'s events).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar, Protocol, TypeAlias

from codexgate.errors import GatewayError, ModelOutputLoop
from codexgate.translate.catalogue import ToolCatalogue, ToolSpec
from codexgate.translate.dialect import ThinkMode
from codexgate.translate.envelope import estimated_usage
from codexgate.translate.open_models import content as content_module
from codexgate.translate.open_models.loops import Loop, RepetitionGuard
from codexgate.translate.open_models.patch_grammar import check_custom_input
from codexgate.translate.open_models.repair import repair_arguments
from codexgate.translate.open_models.textcalls import CallPiece, TextPiece
from codexgate.translate.stops import StopScanner

# -- the parts


@dataclass(slots=True)
class Text:
    """Answer text. `verbatim` text is the model's own words in a field no stage parses (a
    refusal): it is watched and counted, never read for tags or calls."""

    text: str
    verbatim: bool = False


@dataclass(slots=True)
class Reasoning:
    text: str


# A tool call recognised in the answer text, named as the model wrote it; the turn resolves it
# against the request's catalogue and sends it on as a `ToolCall` when the model's turn ends.
TextCall: TypeAlias = CallPiece


@dataclass(slots=True)
class ToolCall:
    """A finished tool call: the request's tool it calls, and what the model passed."""

    spec: ToolSpec
    arguments: str  # a function call's JSON arguments, or a custom tool's raw input
    call_id: str | None = None
    checked: bool = False  # arguments already validated (a call recognised in text)


@dataclass(slots=True)
class Stop:
    """The model's turn ends here (a stop sequence was met): the upstream is not read further."""

    sequence: str | None = None  # the sequence met


@dataclass(slots=True)
class Failure:
    """The response must fail with `error` once the current input is handled."""

    error: GatewayError


@dataclass(slots=True)
class Finish:
    """The end of the model's turn. `usage` is Responses-shaped, None when the upstream sent
    none; `output_chars` is what the model produced (for the estimate); `error` set: failed."""

    usage: dict[str, Any] | None
    output_chars: int
    incomplete_reason: str | None = None
    error: GatewayError | None = None


Part: TypeAlias = Text | Reasoning | TextCall | ToolCall | Failure | Stop | Finish


class Stage(Protocol):
    accepts: ClassVar[tuple[type, ...]]

    def feed(self, part: Any) -> list[Part]:
        """Parts that `part` (of a type in `accepts`) becomes."""
        ...

    # Optional, for a stage that accepts Text (`feed_text`) or Reasoning (`feed_reasoning`):
    # `feed_text(text)` is `feed(Text(text))`, except that None stands for `[Text(text)]`,
    # the text passed on unchanged (the common delta: no part object, no list). A stage
    # without it gets `feed`. With `feed_text`, a stage may also offer `take_texts(texts,
    # end)`: `feed_text` for `texts[:end]` in order while it gives None, returning how many it
    # took; it leaves the first it would change, and those after, untouched (one call for a
    # run of deltas). A stage without it takes none that way.

    def flush(self) -> list[Part]:
        """Release what is held back (at the end of the text, or before a structured call)."""
        ...


class Pipeline:
    """Stages composed in order: each part goes through every later stage that accepts it."""

    __slots__ = ("_stages", "_steps", "_text_feeds", "_reasoning_feeds", "_text_takes")

    def __init__(self, stages: list[Stage]) -> None:
        self._stages = stages
        # (accepted types, feed) per stage, looked up once: this runs for every delta
        self._steps = [(frozenset(stage.accepts), stage.feed) for stage in stages]
        self._text_feeds = self._string_feeds(Text, "feed_text")
        self._reasoning_feeds = self._string_feeds(Reasoning, "feed_reasoning")
        # (position, take_texts or None) of each stage that accepts Text, in order
        self._text_takes: list[tuple[int, TextTake | None]] = [
            (position, getattr(stages[position], "take_texts", None)) for position, _ in self._text_feeds
        ]

    def _string_feeds(self, kind: type[Text | Reasoning], name: str) -> list[tuple[int, StringFeed]]:
        """(position, `name` or else `feed` with a part made for it) of each stage that
        accepts `kind`, in order."""
        feeds: list[tuple[int, StringFeed]] = []
        for position, stage in enumerate(self._stages):
            if kind in stage.accepts:
                method = getattr(stage, name, None)
                feeds.append((position, method or partial(_feed_string, stage.feed, kind)))
        return feeds

    def feed_text(self, text: str) -> list[Part] | None:
        """`feed(Text(text))`, except that None stands for `[Text(text)]` when every stage
        passed the text on unchanged: the common answer delta. From the first stage that
        changes something, the rest of the way is `feed`'s."""
        return self.feed_text_from(0, text)

    def take_texts(self, texts: Sequence[str], position: int = 0) -> tuple[int, int, list[Rest]]:
        """`feed_text` for a run of answer deltas at once, from the stage at `position` on (the
        stages before it passed them on unchanged), as far as every stage passes them on
        unchanged. Returns (passed, taken, rest): `texts[:passed]` went through every stage
        unchanged (the builder's now); `texts[taken:]` were not touched (`texts[taken]` is for
        `feed_text_from(position, ...)`); and each (later, start, end) of `rest`, in the order
        of the texts, says that `texts[start:end]` passed the stages before `later` unchanged
        and go on from there."""
        end = len(texts)
        rest: list[Rest] = []
        taken = -1
        for at, take in self._text_takes:
            if at < position:
                continue
            passed = take(texts, end) if take is not None else 0
            if taken < 0:
                taken = passed
            elif passed < end:
                rest.append((at, passed, end))
            end = passed
        rest.reverse()
        return end, end if taken < 0 else taken, rest

    def feed_text_from(self, position: int, text: str) -> list[Part] | None:
        """`feed_text(text)` from the stage at `position` on (the stages before it passed the
        text on unchanged)."""
        for at, feed_text in self._text_feeds:
            if at < position:
                continue
            parts = feed_text(text)
            if parts is not None:
                return self._run(at + 1, parts)
        return None

    def feed_reasoning(self, text: str) -> list[Part] | None:
        """`feed_text` for reasoning: None stands for `[Reasoning(text)]`."""
        for position, feed_reasoning in self._reasoning_feeds:
            parts = feed_reasoning(text)
            if parts is not None:
                return self._run(position + 1, parts)
        return None

    def feed(self, part: Part) -> list[Part]:
        return self._run(0, [part])

    def _run(self, start: int, parts: list[Part]) -> list[Part]:
        """`parts` through the stages from the one at `start` on."""
        for accepts, feed in self._steps[start:] if start else self._steps:
            if len(parts) == 1:  # the common case, one delta: no new list unless a stage acts
                if type(parts[0]) in accepts:
                    parts = feed(parts[0])
            else:
                parts = self._each(parts, accepts, feed)
        return parts

    def flush(self) -> list[Part]:
        out: list[Part] = []
        steps = self._steps
        for position, stage in enumerate(self._stages):
            parts = stage.flush()
            for accepts, feed in steps[position + 1 :]:
                parts = self._each(parts, accepts, feed)
            out.extend(parts)
        return out

    @staticmethod
    def _each(parts: list[Part], accepts: frozenset[type], feed: Callable[[Any], list[Part]]) -> list[Part]:
        out: list[Part] = []
        for part in parts:
            if type(part) in accepts:
                out.extend(feed(part))
            else:
                out.append(part)
        return out


StringFeed: TypeAlias = Callable[[str], "list[Part] | None"]
TextTake: TypeAlias = Callable[[Sequence[str], int], int]
Rest: TypeAlias = tuple[int, int, int]  # (a stage's position, start, end): see take_texts


def _feed_string(feed: Callable[[Any], list[Part]], kind: type[Text | Reasoning], text: str) -> list[Part]:
    """A stage's general `feed` standing in for its missing `feed_text`/`feed_reasoning`."""
    return feed(kind(text))


# -- the stages


class ContentStage:
    """Think tags and tool calls written as text, out of the answer (translate/open_models/content.py)."""

    accepts: ClassVar[tuple[type, ...]] = (Text,)

    def __init__(self, content: content_module.ContentStage) -> None:
        self._content: content_module.ContentStage | None = content

    def feed_text(self, text: str) -> list[Part] | None:
        if self._content is None:
            return None
        pieces = self._content.feed_text(text)
        return None if pieces is None else self._parts(pieces)

    def take_texts(self, texts: Sequence[str], end: int) -> int:
        if self._content is None:
            return end
        return self._content.take_texts(texts, end)

    def feed(self, part: Text) -> list[Part]:
        if part.verbatim or self._content is None:
            return [part]
        pieces = self._content.feed(part.text)
        if len(pieces) == 1 and type(pieces[0]) is TextPiece and pieces[0].text == part.text:
            return [part]  # plain text went through whole: no new part
        return self._parts(pieces)

    def flush(self) -> list[Part]:
        """Once: what follows (text after a structured call) passes through as it is."""
        if self._content is None:
            return []
        stage, self._content = self._content, None
        return self._parts(stage.finish())

    @staticmethod
    def _parts(pieces: list[content_module.Output]) -> list[Part]:
        parts: list[Part] = []
        for piece in pieces:
            if isinstance(piece, TextPiece):
                parts.append(Text(piece.text))
            elif isinstance(piece, CallPiece):
                parts.append(piece)
            else:
                parts.append(Reasoning(piece[1]))
        return parts


class LoopGuardStage:
    """Stops a model that repeats one unit of text over and over (translate/open_models/loops.py): one
    guard for the reasoning, one for the answer."""

    accepts: ClassVar[tuple[type, ...]] = (Text, Reasoning)

    def __init__(self, counts: Counter[str] | None = None) -> None:
        self._reasoning = RepetitionGuard()
        self._answer = RepetitionGuard()
        self._counts = counts
        self._stopped = False

    def feed_text(self, text: str) -> list[Part] | None:
        # The guard checks only every few hundred characters: until one is due, the text
        # is just stored (`take`), with no part object.
        if self._stopped or self._answer.take(text):
            return None
        return self.feed(Text(text))

    def take_texts(self, texts: Sequence[str], end: int) -> int:
        return end if self._stopped else self._answer.take_all(texts, end)

    def feed_reasoning(self, text: str) -> list[Part] | None:
        if self._stopped or self._reasoning.take(text):
            return None
        return self.feed(Reasoning(text))

    def feed(self, part: Text | Reasoning) -> list[Part]:
        if self._stopped:
            return [part]
        guard = self._answer if type(part) is Text else self._reasoning
        loop = guard.feed(part.text)
        if loop is None:
            return [part]
        self._stopped = True
        return [part, Failure(self._error(loop))]

    def flush(self) -> list[Part]:
        return []

    def _error(self, loop: Loop) -> ModelOutputLoop:
        if self._counts is not None:
            self._counts["loops.stopped"] += 1
        unit = loop.unit if len(loop.unit) <= 80 else loop.unit[:77] + "..."
        return ModelOutputLoop(
            f"codexgate stopped the model: it repeated the same {len(loop.unit)} characters at least "
            f"{loop.repeats} times in a row ({unit!r}). A repetition penalty in the model's settings "
            "(see `codexgate doctor`) usually prevents this."
        )


class ArgumentRepairStage:
    """Repairs only what is unambiguous; otherwise the model's text goes on and the client
    reports the error to the model."""

    accepts: ClassVar[tuple[type, ...]] = (ToolCall,)

    def __init__(self, counts: Counter[str] | None) -> None:
        self._counts = counts

    def feed(self, call: ToolCall) -> list[Part]:
        if call.spec.kind != "custom" and not call.checked:
            checked = repair_arguments(call.arguments, call.spec.parameters, counts=self._counts)
            if checked.arguments is not None and checked.outcome == "repaired":
                call.arguments = checked.arguments
        return [call]

    def flush(self) -> list[Part]:
        return []


class GrammarCheckStage:
    """A custom tool's input checked (and repaired where that makes it parse) against the
    grammar the client advertised for it."""

    accepts: ClassVar[tuple[type, ...]] = (ToolCall,)

    def __init__(self, counts: Counter[str] | None) -> None:
        self._counts = counts

    def feed(self, call: ToolCall) -> list[Part]:
        grammar = call.spec.grammar
        if call.spec.kind == "custom" and grammar is not None:
            call.arguments = check_custom_input(call.arguments, grammar, self._counts).text
        return [call]

    def flush(self) -> list[Part]:
        return []


class StopSequenceStage:
    """The request's stop sequences: the answer ends before the first one met (the sequence
    itself is not sent), holding back only text that may start one."""

    accepts: ClassVar[tuple[type, ...]] = (Text,)

    def __init__(self, sequences: list[str]) -> None:
        self._scanner = StopScanner(sequences)

    def feed_text(self, text: str) -> list[Part] | None:
        if self._scanner.passes(text):
            return None
        return self.feed(Text(text))

    def take_texts(self, texts: Sequence[str], end: int) -> int:
        return self._scanner.passing(texts, end)

    def feed(self, part: Text) -> list[Part]:
        scanner = self._scanner
        if scanner.stopped:
            return []
        released = scanner.feed(part.text)
        parts: list[Part] = [Text(released, part.verbatim)] if released else []
        if scanner.stopped:
            parts.append(Stop(scanner.matched))
        return parts

    def flush(self) -> list[Part]:
        held = self._scanner.finish()
        return [Text(held)] if held else []


class UsageEstimateStage:
    """Token counts when the upstream sent none: input from the request's size, output from
    the characters produced (see envelope.estimated_usage)."""

    accepts: ClassVar[tuple[type, ...]] = (Finish,)

    def __init__(self, input_token_estimate: int) -> None:
        self._input = input_token_estimate

    def feed(self, finish: Finish) -> list[Part]:
        if finish.usage is None:
            finish.usage = estimated_usage(self._input, finish.output_chars)
        return [finish]

    def flush(self) -> list[Part]:
        return []


def build_pipeline(
    catalogue: ToolCatalogue,
    *,
    think_tags: ThinkMode = "off",
    text_tool_calls: str = "off",
    loop_guard: bool = False,
    stop: list[str] | None = None,
    counts: Counter[str] | None = None,
    input_token_estimate: int = 0,
) -> Pipeline:
    """The stages for one response, from the backend's, upstream's and model's settings.
    `stop`: sequences the gateway applies (None when the upstream applies them). Raises
    ValueError for an unknown `text_tool_calls` mode."""
    stages: list[Stage] = []
    if think_tags != "off" or text_tool_calls != "off":
        content = content_module.ContentStage(
            catalogue.schemas, think=think_tags, text_calls=text_tool_calls, counts=counts
        )
        stages.append(ContentStage(content))
    if stop:
        # After the content stage: a stop sequence inside thinking or a text tool call is not
        # the end of the answer.
        stages.append(StopSequenceStage(stop))
    if loop_guard:
        stages.append(LoopGuardStage(counts))
    stages.append(ArgumentRepairStage(counts))
    stages.append(GrammarCheckStage(counts))
    stages.append(UsageEstimateStage(input_token_estimate))
    return Pipeline(stages)
