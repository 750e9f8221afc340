"""Canonical events -> Messages stream events and bodies (translate/messages_face/events.py).

Events come from the real `ResponseBuilder` (and the turn, where stages matter), so the encoder
is held to the event grammar every backend produces; the stream is held to what Claude Code
requires of it (blocks in order, never interleaved, a signature before a thinking block stops,
usage with the cache fields), and folded it equals the non-streamed body."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codexgate.errors import (
    ContextLengthExceeded,
    GatewayError,
    ModelOutputLoop,
    RateLimited,
    UpstreamStreamCut,
)
from codexgate.translate.builder import ResponseBuilder
from codexgate.translate.envelope import Envelope
from codexgate.translate.messages_face.events import (
    INVALID_ARGUMENTS_KEY,
    MessagesEvent,
    MessagesEventEncoder,
    anthropic_usage,
    messages_body,
    tool_input_json,
)
from codexgate.translate.reasoning import encode_reasoning, encode_thinking
from codexgate.wire.responses_events import Event
from tests.support.turns import make_turn

MODEL = "claude-sonnet-4-5"  # what the client asked for (the canonical model may differ)
USAGE = {
    "input_tokens": 1200,
    "input_tokens_details": {"cached_tokens": 1000, "cache_creation_tokens": 150},
    "output_tokens": 30,
    "output_tokens_details": {"reasoning_tokens": 12},
    "total_tokens": 1230,
}
ANTHROPIC_USAGE = {
    "input_tokens": 50,
    "cache_creation_input_tokens": 150,
    "cache_read_input_tokens": 1000,
    "output_tokens": 30,
}

Script = Callable[[ResponseBuilder], None]


def answer(script: Script, **options: Any) -> list[Event]:
    """The events a backend makes for one answer, driven through the real builder."""
    ids = itertools.count(1)
    builder = ResponseBuilder(
        Envelope("resp_7f3a", 1_750_000_000, "qwen3-coder", b"{}"),
        lambda prefix: f"{prefix}_{next(ids)}",
        **options,
    )
    events = builder.start()
    script(builder)
    return events + builder.take()


def encode(events: list[Event], *, batch: int = 0, **options: Any) -> list[MessagesEvent]:
    """Through one encoder, all at once or `batch` events at a time."""
    encoder = MessagesEventEncoder(MODEL, **options)
    if not batch:
        return encoder.feed(events)
    out: list[MessagesEvent] = []
    for start in range(0, len(events), batch):
        out += encoder.feed(events[start : start + batch])
    assert encoder.finished
    return out


def kinds(out: list[MessagesEvent]) -> list[str]:
    return [event["type"] if "delta" not in event or event["type"] == "message_delta"
            else f"{event['type']}:{event['delta']['type']}" for event in out]  # fmt: skip


def fold(out: list[MessagesEvent]) -> dict[str, Any]:
    """A stream folded into the message it describes, checking the order Claude Code requires:
    one block open at a time, indexes from 0 in order, one signature right before a thinking
    block stops, the usage's four fields on message_start and message_delta."""
    assert out[0]["type"] == "message_start"
    message = dict(out[0]["message"], content=[])
    assert set(message["usage"]) == set(ANTHROPIC_USAGE)
    open_index: int | None = None
    signatures = 0
    buffers: dict[int, str] = {}
    for event in out[1:]:
        kind = event["type"]
        if kind == "content_block_start":
            assert open_index is None, "a block started before the one before it stopped"
            assert event["index"] == len(message["content"])
            open_index = event["index"]
            message["content"].append(dict(event["content_block"]))
            signatures = 0
        elif kind == "content_block_delta":
            assert event["index"] == open_index
            block, delta = message["content"][open_index], event["delta"]
            assert signatures == 0, "nothing follows a thinking block's signature but its stop"
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "signature_delta":
                block["signature"] = delta["signature"]
                signatures += 1
            else:
                assert delta["type"] == "input_json_delta"
                buffers[open_index] = buffers.get(open_index, "") + delta["partial_json"]
        elif kind == "content_block_stop":
            assert event["index"] == open_index
            block = message["content"][open_index]
            if block["type"] == "thinking":
                assert signatures == 1 and block["signature"], "a thinking block stops after one signature"
            if block["type"] == "tool_use":
                block["input"] = orjson.loads(buffers.get(open_index) or "{}")
                assert block["name"]
            open_index = None
        elif kind == "message_delta":
            assert open_index is None
            assert set(event["usage"]) == set(ANTHROPIC_USAGE)
            message.update(event["delta"], usage=event["usage"])
        else:
            assert kind == "message_stop" and event is out[-1]
    return message


# -- the stream


def text_answer(b: ResponseBuilder) -> None:
    b.text("Hel")
    b.text("lo!")
    b.finish(USAGE)


def test_a_text_answer_is_one_text_block_between_message_start_and_message_stop() -> None:
    out = encode(answer(text_answer))
    assert out == [
        {"type": "message_start", "message": {
            "id": "msg_7f3a", "type": "message", "role": "assistant", "model": MODEL, "content": [],
            "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                      "output_tokens": 0},
        }},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hel"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "lo!"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None}, "usage": ANTHROPIC_USAGE},
        {"type": "message_stop"},
    ]  # fmt: skip


def test_message_start_carries_the_input_estimate_it_is_given() -> None:
    assert encode(answer(text_answer), input_tokens=812)[0]["message"]["usage"]["input_tokens"] == 812


def reasoning_then_text(b: ResponseBuilder) -> None:
    b.reasoning("The user ")
    b.reasoning("greets me.")
    b.text("Hi there.")
    b.finish(USAGE)


def test_reasoning_is_a_thinking_block_with_one_signature_before_it_stops() -> None:
    out = encode(answer(reasoning_then_text, reasoning_blob=encode_reasoning))
    assert kinds(out) == [
        "message_start",
        "content_block_start",
        "content_block_delta:thinking_delta",
        "content_block_delta:thinking_delta",
        "content_block_delta:signature_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta:text_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert out[1]["content_block"] == {"type": "thinking", "thinking": "", "signature": ""}
    assert out[4]["delta"]["signature"] == "cgs1:cgr2:The user greets me."
    assert fold(out)["content"][0] == {
        "type": "thinking", "thinking": "The user greets me.", "signature": "cgs1:cgr2:The user greets me.",
    }  # fmt: skip


def test_with_thinking_omitted_the_block_and_its_signature_go_out_without_the_text() -> None:
    out = encode(answer(reasoning_then_text, reasoning_blob=encode_reasoning), show_thinking=False)
    assert "content_block_delta:thinking_delta" not in kinds(out)
    assert fold(out)["content"][0] == {
        "type": "thinking",
        "thinking": "",
        "signature": "cgs1:cgr2:The user greets me.",
    }


def test_reasoning_without_a_blob_of_its_own_is_signed_empty() -> None:
    assert fold(encode(answer(reasoning_then_text)))["content"][0]["signature"] == "cgs1:"


def test_an_upstreams_own_thinking_blocks_go_out_exactly() -> None:
    signed = {"type": "thinking", "thinking": "Let me see.", "signature": "EqQBCkYIBxgCKkDj"}
    redacted = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}

    def script(b: ResponseBuilder) -> None:
        b.reasoning("Let me see.")
        b.close_reasoning(encode_thinking(signed))
        b.close_reasoning(encode_thinking(redacted))  # none open: an item of its own, no deltas
        b.text("Done.")
        b.finish(USAGE)

    out = encode(answer(script))
    assert fold(out)["content"] == [signed, redacted, {"type": "text", "text": "Done."}]
    assert out[5]["content_block"] == redacted  # started whole, stopped at once


def call_answer(b: ResponseBuilder) -> None:
    b.text("Listing.")
    b.function_call("Bash", '{"command": "ls"}', call_id="toolu_01")
    b.function_call("Read", "", call_id="toolu_02")
    b.finish(USAGE)


def test_a_tool_call_is_a_tool_use_block_with_its_input_and_stop_reason_tool_use() -> None:
    out = encode(answer(call_answer))
    assert out[4]["content_block"] == {"type": "tool_use", "id": "toolu_01", "name": "Bash", "input": {}}
    assert out[5]["delta"] == {"type": "input_json_delta", "partial_json": '{"command": "ls"}'}
    message = fold(out)
    assert [block["type"] for block in message["content"]] == ["text", "tool_use", "tool_use"]
    assert message["content"][1]["input"] == {"command": "ls"} and message["content"][2]["input"] == {}
    assert message["stop_reason"] == "tool_use"


@pytest.mark.parametrize(
    ("item", "json"),
    [
        ({"type": "function_call", "arguments": '{"a": 1}'}, '{"a": 1}'),
        ({"type": "function_call", "arguments": ""}, "{}"),
        ({"type": "function_call", "arguments": "  "}, "{}"),
        ({"type": "function_call", "arguments": "[1, 2]"}, '{"' + INVALID_ARGUMENTS_KEY + '":"[1, 2]"}'),
        ({"type": "function_call", "arguments": '{"a": '}, '{"' + INVALID_ARGUMENTS_KEY + '":"{\\"a\\": "}'),
        ({"type": "custom_tool_call", "input": "*** Begin Patch"}, '{"input":"*** Begin Patch"}'),
    ],
)
def test_a_tool_use_input_is_always_a_json_object(item: dict[str, Any], json: str) -> None:
    assert tool_input_json(item) == json


def test_a_tool_call_without_a_name_fails_the_answer_instead_of_an_empty_block() -> None:
    def script(b: ResponseBuilder) -> None:
        b.text("Calling.")
        b.function_call("", "{}", call_id="toolu_01")
        b.finish(USAGE)

    out = encode(answer(script))
    assert (
        out[-1]["type"] == "error" and out[-1]["error"]["type"] == "overloaded_error"
    )  # retried by Claude Code
    assert not any(event.get("content_block", {}).get("type") == "tool_use" for event in out)
    status, body = messages_body(answer(script)[-1], MODEL)
    assert (status, body["error"]["type"]) == (502, "api_error")


def test_usage_excludes_cache_reads_and_writes_from_input_tokens() -> None:
    assert anthropic_usage(USAGE) == ANTHROPIC_USAGE
    assert anthropic_usage({"input_tokens": 10, "output_tokens": 2}) == {
        "input_tokens": 10, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 2,
    }  # fmt: skip
    assert anthropic_usage(None) == dict.fromkeys(ANTHROPIC_USAGE, 0)
    assert (
        anthropic_usage({"input_tokens": 5, "input_tokens_details": {"cached_tokens": 9}})["input_tokens"]
        == 0
    )


@pytest.mark.parametrize(
    ("reason", "stop_reason"),
    [("max_output_tokens", "max_tokens"), ("content_filter", "refusal"), ("other", "max_tokens")],
)
def test_an_incomplete_answer_says_why_in_its_stop_reason(reason: str, stop_reason: str) -> None:
    def script(b: ResponseBuilder) -> None:
        b.text("cut")
        b.finish(USAGE, incomplete_reason=reason)

    assert fold(encode(answer(script)))["stop_reason"] == stop_reason
    assert messages_body(answer(script)[-1], MODEL)[1]["stop_reason"] == stop_reason


def test_a_refusal_is_text_and_stop_reason_refusal() -> None:
    refusal = {"type": "message", "id": "msg_r", "role": "assistant", "status": "completed",
               "content": [{"type": "refusal", "refusal": "I can't help with that."}]}  # fmt: skip

    def script(b: ResponseBuilder) -> None:
        b.item(refusal)
        b.finish(USAGE)

    message = fold(encode(answer(script)))
    assert (message["content"], message["stop_reason"]) == (
        [{"type": "text", "text": "I can't help with that."}],
        "refusal",
    )


def test_a_stop_sequence_the_gateway_applied_is_the_stop_reason_with_the_sequence() -> None:
    turn = make_turn(stop=["\n\nHuman:"], reasoning_blob=None, mark_cuts=False)
    events = turn.start()
    turn.text("The answer.\n\nHu")
    turn.text("man: more")
    events += turn.take()
    message = fold(encode(events))
    assert (message["stop_reason"], message["stop_sequence"]) == ("stop_sequence", "\n\nHuman:")
    assert message["content"] == [{"type": "text", "text": "The answer."}]
    body = messages_body(events[-1], MODEL)[1]
    assert (body["stop_reason"], body["stop_sequence"]) == ("stop_sequence", "\n\nHuman:")


@pytest.mark.parametrize(
    ("error", "error_type", "words"),
    [
        (UpstreamStreamCut("The upstream stopped before the model finished."), "overloaded_error", "stopped"),
        (ModelOutputLoop("codexgate stopped the model: it repeated"), "overloaded_error", "repeated"),
        (RateLimited("Upstream error: slow down. Please try again in 2s."), "rate_limit_error", "slow down"),
        (ContextLengthExceeded("Upstream error: request (40000 tokens) exceeds the available context size "
                               "(32768 tokens), try increasing it"), "invalid_request_error",
         "prompt is too long: 40000 tokens > 32768 maximum"),
        (GatewayError("internal gateway error: KeyError"), "api_error", "KeyError"),
    ],
)  # fmt: skip
def test_a_failure_after_the_first_byte_is_an_error_event_in_anthropics_shape(
    error: GatewayError, error_type: str, words: str
) -> None:
    def script(b: ResponseBuilder) -> None:
        b.text("Half an ans")
        b.fail(error, USAGE)

    encoder = MessagesEventEncoder(MODEL)
    out = encoder.feed(answer(script))
    assert encoder.finished and out[-1]["type"] == "error"
    assert out[-1]["error"]["type"] == error_type and words in out[-1]["error"]["message"]
    assert encoder.feed(answer(text_answer)) == []  # nothing after the end


def test_the_same_stream_in_any_batches_gives_the_same_events() -> None:
    events = answer(reasoning_then_text, reasoning_blob=encode_reasoning)
    whole = encode(events)
    for size in (1, 2, 3, 5):
        assert encode(events, batch=size) == whole


def test_items_open_at_once_go_out_one_block_after_the_other() -> None:
    """Two items open together (a source other than the builder): the later one's events are
    held until the earlier one's block stops, so indexes never interleave."""

    def added(item_id: str, kind: str, index: int) -> Event:
        return {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {"type": kind, "id": item_id},
        }

    text = {
        "type": "message",
        "id": "m",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "ab"}],
    }
    thought = {"type": "reasoning", "id": "r", "summary": [{"type": "summary_text", "text": "xy"}],
               "encrypted_content": "cgr2:xy"}  # fmt: skip
    events: list[Event] = [
        {"type": "response.created", "response": {"id": "resp_1"}},
        added("m", "message", 0),
        added("r", "reasoning", 1),
        {"type": "response.reasoning_summary_text.delta", "item_id": "r", "delta": "x"},
        {"type": "response.output_text.delta", "item_id": "m", "delta": "a"},
        {"type": "response.reasoning_summary_text.delta", "item_id": "r", "delta": "y"},
        {"type": "response.output_item.done", "output_index": 1, "item": thought},
        {"type": "response.output_text.delta", "item_id": "m", "delta": "b"},
        {"type": "response.output_item.done", "output_index": 0, "item": text},
        {
            "type": "response.completed",
            "response": {"id": "resp_1", "output": [text, thought], "usage": USAGE},
        },
    ]
    message = fold(encode(events))
    assert message["content"] == [
        {"type": "text", "text": "ab"},
        {"type": "thinking", "thinking": "xy", "signature": "cgs1:cgr2:xy"},
    ]


def test_an_answer_whose_items_came_only_with_its_end_still_has_them() -> None:
    text = {
        "type": "message",
        "id": "m",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "whole"}],
    }
    call = {
        "type": "function_call",
        "id": "fc",
        "call_id": "toolu_9",
        "name": "Bash",
        "arguments": '{"command":"pwd"}',
    }
    terminal = {
        "type": "response.completed",
        "response": {"id": "resp_2", "output": [text, call], "usage": USAGE},
    }
    message = fold(encode([terminal]))
    assert message["id"] == "msg_2"
    assert message["content"] == [
        {"type": "text", "text": "whole"},
        {"type": "tool_use", "id": "toolu_9", "name": "Bash", "input": {"command": "pwd"}},
    ]
    assert message["stop_reason"] == "tool_use"


# -- the non-streamed answer


@pytest.mark.parametrize(
    "script", [text_answer, reasoning_then_text, call_answer], ids=["text", "reasoning", "calls"]
)
@pytest.mark.parametrize("shown", [True, False])
def test_the_body_is_the_stream_folded(script: Script, shown: bool) -> None:
    events = answer(script, reasoning_blob=encode_reasoning)
    streamed = fold(encode(events, show_thinking=shown))
    status, body = messages_body(events[-1], MODEL, show_thinking=shown)
    assert status == 200
    assert body == streamed | {"usage": body["usage"]}
    assert body["usage"] == ANTHROPIC_USAGE


def test_a_failed_answer_is_the_error_status_and_body() -> None:
    def script(b: ResponseBuilder) -> None:
        b.fail(RateLimited("Upstream error: slow down.", retry_after=3), USAGE)

    status, body = messages_body(answer(script)[-1], MODEL)
    assert (status, body) == (
        429,
        {"type": "error", "error": {"type": "rate_limit_error", "message": "Upstream error: slow down."}},
    )


def test_only_a_terminal_event_makes_a_body() -> None:
    with pytest.raises(ValueError):
        messages_body({"type": "response.created", "response": {}}, MODEL)


# -- any answer the builder makes


STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("text"), st.text(max_size=5)),
        st.tuples(st.just("reasoning"), st.text(max_size=5)),
        st.tuples(st.just("call"), st.sampled_from(["Bash", "Read"])),
        st.tuples(
            st.just("blob"),
            st.sampled_from([None, "cgt1:bad", encode_thinking({"type": "redacted_thinking", "data": "d"})]),
        ),
        st.tuples(st.just("close"), st.none()),
    ),
    max_size=12,
)


@given(
    steps=STEPS,
    shown=st.booleans(),
    batch=st.integers(min_value=0, max_value=4),
    end=st.sampled_from(["ok", "cut", "fail"]),
)
@settings(max_examples=300, deadline=None)
def test_no_answer_of_the_builder_gives_blocks_out_of_order(
    steps: list[tuple[str, Any]], shown: bool, batch: int, end: str
) -> None:
    def script(b: ResponseBuilder) -> None:
        for step, value in steps:
            if step == "text":
                b.text(value)
            elif step == "reasoning":
                b.reasoning(value)
            elif step == "call":
                b.function_call(value, '{"x": 1}')
            elif step == "blob":
                b.close_reasoning(value)
            else:
                b.close_text()
        if end == "fail":
            b.fail(UpstreamStreamCut("cut"), USAGE)
        else:
            b.finish(USAGE, incomplete_reason="max_output_tokens" if end == "cut" else None)

    events = answer(script, reasoning_blob=encode_reasoning)
    out = encode(events, batch=batch, show_thinking=shown)
    if end == "fail":
        assert out[-1]["type"] == "error"
        return
    message = fold(out)  # checks the order as it folds
    status, body = messages_body(events[-1], MODEL, show_thinking=shown)
    assert status == 200 and body["content"] == message["content"]
