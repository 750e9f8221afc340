"""The hot path for plain deltas gives the very events of the general path.

`Pipeline.feed_text`/`feed_reasoning` skip the stages' general `feed` when a delta passes every
stage unchanged (translate/stages.py). Here the same streams go through a translator that takes
that path and through one whose pipeline always uses `feed`, split into deltas of many sizes:
the events (ids, numbers, text, calls, failures) and the counts must be identical.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import orjson
import pytest

from codexgate.errors import GatewayError, ModelOutputLoop
from codexgate.translate.builder import ResponseBuilder
from codexgate.translate.catalogue import catalogue_of
from codexgate.translate.chat_upstream import stream as stream_module
from codexgate.translate.chat_upstream.stream import ChatStreamTranslator
from codexgate.translate.envelope import Envelope
from codexgate.translate.open_models.textcalls import TextPiece, TextToolCallParser
from codexgate.translate.open_models.think import ThinkSplitter
from codexgate.translate.stages import Part, Pipeline, Reasoning, Text, build_pipeline
from codexgate.wire.responses import parse_request
from tests.support.turns import chat_translator, counter_ids, sse_of, translate_sse
from tests.translate.open_models.test_textcalls import merged

Event = dict[str, Any]

SHELL = {
    "type": "function",
    "name": "shell",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
}
CALL = '{"name": "shell", "arguments": {"cmd": "ls -la"}}'


class GeneralOnly(Pipeline):
    """A pipeline that never takes the hot path: every delta goes through `feed`."""

    __slots__ = ()

    def feed_text(self, text: str) -> list[Part] | None:
        return self.feed(Text(text))

    def feed_reasoning(self, text: str) -> list[Part] | None:
        return self.feed(Reasoning(text))


def translator(general: bool, counts: Counter[str], **settings: Any) -> ChatStreamTranslator:
    t = chat_translator([SHELL], counts=counts, input_token_estimate=100, **settings)
    if general:
        # Same stages, same layout (slots): only the two hot-path methods differ.
        t.turn._stages.__class__ = GeneralOnly
    return t


def chunk(**delta: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}


def deltas(text: str, size: int, field: str = "content") -> list[dict[str, Any]]:
    return [chunk(**{field: text[i : i + size]}) for i in range(0, len(text), size)]


def run(chunks: list[dict[str, Any]], general: bool, **settings: Any) -> tuple[list[Event], Counter[str]]:
    """The backend's way: SSE bytes -> payloads -> feed; [DONE]; a GatewayError ends in fail()."""
    counts: Counter[str] = Counter()
    t = translator(general, counts, **settings)
    return translate_sse(t, [sse_of(chunks)]), counts


ALL_ON = {"think_tags": "auto", "text_tool_calls": "auto", "loop_guard": True}


def aperiodic(n: int, seed: int = 3) -> str:
    rng = random.Random(seed)
    words = "the parser `tokenize` fails on a [list] {dict} <tag> x < y café 東京 ok\n".split(" ")
    out: list[str] = []
    while sum(map(len, out)) < n:
        out.append(rng.choice(words))
    return " ".join(out)[:n]


STREAMS: dict[str, list[dict[str, Any]]] = {
    "think block, answer, hermes call": [
        chunk(role="assistant", content=""),
        *deltas("<think>\nLet me see.\n</think>\n\nThe answer uses `x` and [y].\n", 3),
        *deltas(f"<tool_call>{CALL}</tool_call>", 5),
    ],
    "implicit close at the start": deltas("</think>\n\nplain answer after an empty block", 2),
    "late close stays text": deltas("an answer that mentions </think> late, then <b>bold</b>", 4),
    "whitespace first, then a json call": [*deltas("\n\n  ", 1), *deltas(f"\n{CALL}", 6)],
    "json call after a prose line": [chunk(content="Here it is:\n"), *deltas(CALL, 5)],
    "json mid-line stays text": [chunk(content="Here it is: "), *deltas(CALL, 5)],
    "mistral call after prose": deltas(f"Sure.\n[TOOL_CALLS][{CALL}]", 4),
    "refusal beside content": [
        chunk(content="I can"),
        chunk(refusal="not <think> help"),
        chunk(content="no"),
    ],
    "reasoning field then text": [*deltas(aperiodic(900), 7, "reasoning_content"), *deltas("done", 2)],
    "a loop in the answer": deltas("I'm sure you'll like them all. " * 120, 5),
    "a loop in the reasoning": deltas("Wait, let me check again. " * 150, 6, "reasoning_content"),
    "long aperiodic answer": deltas(aperiodic(5000), 4),
    "harmony text": deltas(
        "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>hi<|return|>",
        3,
    ),
}

SETTINGS = {
    "all stages": ALL_ON,
    "think start_inside": {**ALL_ON, "think_tags": "start_inside"},
    "no content stage": {"think_tags": "off", "text_tool_calls": "off", "loop_guard": True},
    "calls only": {"think_tags": "off", "text_tool_calls": "hermes", "loop_guard": False},
}


@pytest.mark.parametrize("settings", SETTINGS.values(), ids=SETTINGS.keys())
@pytest.mark.parametrize("name", STREAMS.keys())
def test_the_hot_path_makes_the_same_events_as_the_general_path(name: str, settings: dict[str, Any]) -> None:
    fast = run(STREAMS[name], general=False, **settings)
    slow = run(STREAMS[name], general=True, **settings)
    assert fast == slow
    assert fast[0][-1]["type"] in ("response.completed", "response.failed", "response.incomplete")


def raw(choice: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"id": "c", "choices": [choice], **extra}


# Chunks next to the commonest shape, each of which the chunk hot path must leave to the
# general walk (or read the same way).
ODD_CHUNKS: list[dict[str, Any]] = [
    raw({"index": 0, "delta": {"content": "plain"}, "finish_reason": None, "logprobs": None}, usage=None),
    raw({"delta": {"content": " no index"}}),
    raw({"index": 1, "delta": {"content": "second choice"}}),
    raw({"index": 0, "delta": {"role": "assistant", "content": " with a role"}}),
    raw({"index": 0, "delta": {"content": ""}}),
    raw({"index": 0, "delta": {"content": 5}}),
    raw({"index": 0, "delta": "not an object"}),
    raw({"index": 0, "delta": {"content": " and reasoning", "reasoning_content": "hm"}}),
    raw({"index": 0, "delta": {"content": " <think>"}}),
    raw({"index": 0, "message": {"content": " as a message"}}),
    {"choices": [{"index": 0, "delta": {"content": " a"}}, {"index": 1, "delta": {"content": "b"}}]},
    raw({"index": 0, "delta": {"content": " end"}, "finish_reason": "stop"}),
    raw({"index": 0, "delta": {"content": " usage"}}, usage={"prompt_tokens": 3, "completion_tokens": 2}),
]
FAILING_CHUNKS: list[dict[str, Any]] = [
    raw({"index": 0, "delta": {"content": "x"}}),
    raw({"index": 0, "delta": {"content": " failed"}, "finish_reason": "error"}),
]
ERROR_CHUNKS: list[dict[str, Any]] = [
    raw({"index": 0, "delta": {"content": "x"}}),
    raw({"index": 0, "delta": {"content": " error"}}, error={"message": "boom", "code": 500}),
]


@pytest.mark.parametrize(
    "chunks",
    [ODD_CHUNKS, FAILING_CHUNKS, ERROR_CHUNKS, STREAMS["a loop in the answer"], ["not a dict", 3, None]],
    ids=["odd", "finish_reason error", "error object", "loop", "junk"],
)
def test_the_chunk_hot_path_makes_the_same_events_as_the_general_walk(
    chunks: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = run(chunks, general=False, **ALL_ON)
    monkeypatch.setattr(stream_module, "_plain_content", lambda chunk: None)
    assert run(chunks, general=False, **ALL_ON) == fast


def test_the_chunk_hot_path_takes_only_the_plain_shape() -> None:
    plain = stream_module._plain_content
    taken = [c for c in ODD_CHUNKS if plain(c) is not None]
    # a tag is the stages' business, not the chunk's: that shape is taken too
    assert [plain(c) for c in taken] == ["plain", " no index", " <think>"]


def test_the_streams_cover_what_the_hot_path_must_leave_alone() -> None:
    """The comparison above is only worth something if the streams hit every stage."""
    events, counts = run(STREAMS["think block, answer, hermes call"], general=False, **ALL_ON)
    output = events[-1]["response"]["output"]
    assert [item["type"] for item in output] == ["reasoning", "message", "function_call"]
    assert counts["textcalls.hermes.parsed"] == 1
    _, counts = run(STREAMS["late close stays text"], general=False, **ALL_ON)
    assert counts["think.late_close"] == 1


@pytest.mark.parametrize("name", ["a loop in the answer", "a loop in the reasoning"])
def test_the_loop_guard_still_stops_periodic_text_on_the_hot_path(name: str) -> None:
    events, counts = run(STREAMS[name], general=False, **ALL_ON)
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"]["code"] == ModelOutputLoop.default_code
    assert counts["loops.stopped"] == 1


def test_the_loop_guard_never_stops_aperiodic_text_on_the_hot_path() -> None:
    for seed in range(5):
        events, counts = run(deltas(aperiodic(20000, seed), 3), general=False, **ALL_ON)
        assert events[-1]["type"] == "response.completed"
        assert counts["loops.stopped"] == 0


def test_plain_text_passes_without_parts_and_text_with_a_tag_does_not() -> None:
    stages = build_pipeline(catalogue_of([SHELL]), **ALL_ON)
    assert stages.feed_text("plain start") is None  # the think probe decided at once
    assert stages.feed_text(" more text") is None
    assert stages.feed_text(" a <") == [Text(" a ")]  # '<' may open a call: held back
    assert stages.feed_reasoning("thinking") is None


def test_the_splitter_says_pass_only_when_feed_would_give_the_text_back() -> None:
    splitter = ThinkSplitter(probe_chars=1)
    assert not splitter.passes("x")  # still probing for a closing tag
    splitter.feed("hello")
    assert splitter.passes(" world") and splitter.feed(" world") == [("text", " world")]
    assert not splitter.passes("<")  # may begin a late closing tag
    assert not splitter.passes("")


def test_take_plain_updates_the_parser_as_feed_would() -> None:
    """Line starts matter (a `{` opens a JSON call only at the start of a line): after text
    taken by `take_plain`, the parser must see a `{` exactly as after `feed`."""
    for before in ("prose\n", "prose ", "\n  ", "a\n \t"):
        taken, fed = TextToolCallParser({"shell": None}), TextToolCallParser({"shell": None})
        fed_out = fed.feed("x")
        assert taken.take_plain("x") and fed_out == [TextPiece("x")]
        if taken.take_plain(before):
            assert fed.feed(before) == [TextPiece(before)]
        else:
            assert taken.feed(before) == fed.feed(before)
        rest = f"{CALL}\n"
        assert taken.feed(rest) + taken.finish() == fed.feed(rest) + fed.finish()


def test_take_plain_leaves_leading_whitespace_and_candidates_to_feed() -> None:
    parser = TextToolCallParser({"shell": None})
    assert not parser.take_plain("\n ")  # may be dropped before a call
    assert not parser.take_plain("see <tool_call>")
    assert not parser.take_plain("see <tool")  # the start of an opener: the next delta decides
    assert parser.take_plain("see [1] and {a: b} and a < b")  # inert where they stand
    assert not parser.take_plain("\n[1]")  # a line starts with it
    assert parser.take_plain(" x")
    assert not TextToolCallParser({"shell": None}).take_plain('  {"name": "shell"}')
    assert parser.take_plain("plain")


def test_a_text_delta_event_has_the_shape_and_key_order_of_every_event() -> None:
    """`text()` builds its delta event by hand; it must match what `_event` would build, down
    to the key order (the JSON on the wire)."""
    envelope = Envelope.for_request(parse_request({"model": "m", "input": "hi"}), "resp_t", 0)
    builder = ResponseBuilder(envelope, counter_ids())
    builder.start()
    builder.text("a")
    builder.text("b")
    builder.reasoning("r")
    builder.reasoning("s")
    events = builder.take()
    reference = ResponseBuilder(envelope, counter_ids())
    reference.start()
    reference.take()
    reference._seq = events[3]["sequence_number"]
    reference._event(
        "response.output_text.delta", item_id="msg_0", output_index=0, content_index=0, delta="b", logprobs=[]
    )
    reference._seq = events[-1]["sequence_number"]
    reference._event(
        "response.reasoning_summary_text.delta", item_id="rs_1", output_index=1, summary_index=0, delta="s"
    )
    expected = reference.take()
    assert orjson.dumps(events[3]) == orjson.dumps(expected[0])
    assert orjson.dumps(events[-1]) == orjson.dumps(expected[1])


class Shout:
    """A text stage without `feed_text`: the pipeline must fall back on its `feed`."""

    accepts = (Text,)

    def feed(self, part: Text) -> list[Part]:
        return [Text(part.text.upper())] if "!" in part.text else [part]

    def flush(self) -> list[Part]:
        return []


def test_a_stage_without_feed_text_gets_feed() -> None:
    fast = Pipeline([Shout()])
    assert fast.feed_text("calm") == [Text("calm")]  # not None: the stage was asked
    assert fast.feed_text("loud!") == [Text("LOUD!")]
    assert fast.feed_reasoning("thought") is None  # no stage takes reasoning


_CODEY = [
    "def f(a: list[int]) -> dict[str, int]:",
    "{",
    "}",
    "[",
    "]",
    "<",
    ">",
    "`",
    "```",
    "\n",
    "  ",
    " x < y ",
    "<tool_call>",
    '{"name": "shell", "arguments": {"cmd": "ls"}}',
    "</tool_call>",
    "[TOOL_CALLS]",
    "<function=shell>",
    "<|python_tag|>",
    "words",
    " and ",
    "\n\n",
    "\t",
]


@pytest.mark.parametrize("seed", range(60))
def test_take_plain_then_feed_gives_what_feed_alone_gives_on_code_text(seed: int) -> None:
    """The hot path lets inert `[`, `{`, `<` and backticks through (`_Openers.live`); cut
    anywhere, any mix of code and real openers must come out as `feed` alone makes it."""
    rng = random.Random(seed)
    text = "".join(rng.choice(_CODEY) for _ in range(rng.randint(5, 60)))
    cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(1, 25))))
    deltas = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    fast, slow = TextToolCallParser({"shell": None}), TextToolCallParser({"shell": None})
    fast_out: list[Any] = []
    slow_out: list[Any] = []
    for delta in deltas:
        fast_out += [TextPiece(delta)] if fast.take_plain(delta) else fast.feed(delta)
        slow_out += slow.feed(delta)
    fast_out += fast.finish()
    slow_out += slow.finish()
    assert merged(fast_out) == merged(slow_out)


# -- a read of many chunks at once: `feed_all` and `Turn.texts`

STOPPING = {**ALL_ON, "stop": ["STOP", "x < y"]}
BATCH_STREAMS: dict[str, list[dict[str, Any]]] = {
    **STREAMS,
    "a stop sequence mid-answer": deltas(aperiodic(600) + " then STOP and more text after it", 3),
    "a stop sequence split across deltas": deltas("plain words then ST" + "OP and the rest", 2),
    "odd chunks between text": [*deltas("start of it ", 3), *ODD_CHUNKS[:-2], *deltas(" and the end", 2)],
}
BATCH_SETTINGS = {**SETTINGS, "stop sequences": STOPPING, "no stages": {"think_tags": "off",
                  "text_tool_calls": "off", "loop_guard": False}}  # fmt: skip


def run_in_reads(chunks: list[Any], seed: int, **settings: Any) -> tuple[list[Event], Counter[str]]:
    """As `run`, but the chunks come in reads of random sizes, each fed with `feed_all`."""
    counts: Counter[str] = Counter()
    t = translator(False, counts, **settings)
    turn, rng = t.turn, random.Random(seed)
    events = turn.start()
    try:
        at = 0
        while at < len(chunks):
            size = rng.choice((1, 2, 3, 7, 50, 1000))
            t.feed_all(chunks[at : at + size])
            events += turn.take()
            at += size
        t.end_of_stream_marker()
        events += turn.take()
    except GatewayError as exc:
        events += turn.fail(exc)
    return events, counts


@pytest.mark.parametrize("settings", BATCH_SETTINGS.values(), ids=BATCH_SETTINGS.keys())
@pytest.mark.parametrize("name", BATCH_STREAMS.keys())
def test_a_read_of_many_chunks_makes_the_same_events_as_one_chunk_at_a_time(
    name: str, settings: dict[str, Any]
) -> None:
    one_by_one = run(BATCH_STREAMS[name], general=False, **settings)
    for seed in range(4):
        assert run_in_reads(BATCH_STREAMS[name], seed, **settings) == one_by_one


@pytest.mark.parametrize("seed", range(40))
def test_runs_of_code_text_make_the_same_events_in_reads_as_one_at_a_time(seed: int) -> None:
    """Cut anywhere into reads of any size, text with openers, tags and stop sequences in it
    comes out as it does one delta at a time, whichever stage leaves a delta first."""
    rng = random.Random(seed)
    pieces = [*_CODEY, "<think>", "</think>", "STOP", "x < y", "I'm sure. " * 30]
    text = "".join(rng.choice(pieces) for _ in range(rng.randint(5, 80)))
    cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(1, 60))))
    chunks = [chunk(content=text[a:b]) for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    settings = rng.choice(list(BATCH_SETTINGS.values()))
    assert run_in_reads(chunks, seed, **settings) == run(chunks, general=False, **settings)


def test_a_pipeline_says_which_stage_left_which_texts() -> None:
    """The loop guard (after the content stage) takes deltas up to the one whose check finds
    a loop; the deltas the content stage took past it go on from the guard's place."""
    stages = build_pipeline(catalogue_of([SHELL]), **ALL_ON)
    assert stages.feed_text("plain start") is None
    texts = ["I'm sure. "] * 200  # a loop from ~1,200 characters: the guard checks every 200
    passed, taken, rest = stages.take_texts(texts)
    assert taken == 200  # the content stage took every one
    assert 100 < passed < 200
    assert rest == [(1, passed, 200)]
