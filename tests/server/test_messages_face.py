"""The Messages face (server/faces/messages.py): what it reads from a request besides the body
(Claude Code's headers), and how it frames each event. The SDK's view of it is
tests/server/test_messages_sdk.py."""

from __future__ import annotations

import itertools
from collections.abc import Iterable

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codexgate.errors import InvalidRequest, UpstreamStreamCut
from codexgate.server.faces.messages import MessagesFace, MessagesJSON, MessagesSSE, frame
from codexgate.translate.builder import ResponseBuilder
from codexgate.translate.envelope import Envelope
from codexgate.translate.messages_face.events import MessagesEvent, MessagesEventEncoder
from codexgate.translate.reasoning import encode_reasoning
from codexgate.wire.responses_events import Event
from tests.support.turns import make_turn


def test_the_face_reads_the_headers_claude_code_sends() -> None:
    body = orjson.dumps({
        "model": "qwen3-coder", "max_tokens": 100, "stream": True, "messages": [{"role": "user", "content": "hi"}],
        "metadata": {"user_id": '{"device_id":"d","account_uuid":"","session_id":"s-from-body"}'},
        "thinking": {"type": "adaptive", "display": "omitted"},
    })  # fmt: skip
    headers = {"Anthropic-Version": "2023-06-01", "anthropic-beta": "claude-code-20250219,effort-2025-11-24",
               "X-Claude-Code-Session-Id": "s-from-header"}  # fmt: skip
    ask_, messages_ask = MessagesFace().read_messages(body, "alice", headers)
    assert ask_.inbound.conversation == "alice\x00s-from-header" and ask_.inbound.body_size == len(body)
    assert (
        messages_ask.betas == ("claude-code-20250219", "effort-2025-11-24")
        and messages_ask.version == "2023-06-01"
    )
    assert isinstance(ask_.encoder, MessagesSSE)
    assert MessagesFace.name == "messages"
    plain = MessagesFace().read(body, None)
    assert plain.inbound.conversation == "\x00s-from-body"  # the caller-less scope, the session from the body


def test_each_frame_names_its_event_as_its_data_does() -> None:
    turn = make_turn(reasoning_blob=None, mark_cuts=False)
    events = turn.start()
    turn.text("hi")
    turn.finish("stop")
    events += turn.take()
    data = MessagesSSE("m").batch(events) + MessagesSSE("m").keepalive
    frames = [frame for frame in data.split(b"\n\n") if frame]
    for raw in frames:
        event_line, data_line = raw.split(b"\n")
        assert event_line.startswith(b"event: ") and data_line.startswith(b"data: ")
        assert orjson.loads(data_line[6:])["type"] == event_line[7:].decode()
    assert frames[-1] == b'event: ping\ndata: {"type":"ping"}'


def test_ids_are_not_reused_across_answers() -> None:
    ids = itertools.count()
    seen = set()
    for _ in range(3):
        turn = make_turn(reasoning_blob=None, mark_cuts=False, response_id=f"resp_{next(ids)}")
        events = turn.start()
        turn.text("x")
        turn.finish("stop")
        out = MessagesSSE("m").batch(events + turn.take())
        seen.add(orjson.loads(out.split(b"\n\n")[0].split(b"data: ")[1])["message"]["id"])
    assert len(seen) == 3


def test_a_request_not_streamed_is_answered_with_one_messages_body() -> None:
    body = orjson.dumps(
        {"model": "claude-x", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    )
    ask = MessagesFace().read(body, None)
    assert isinstance(ask.encoder, MessagesJSON) and ask.inbound.conversation is None
    turn = make_turn(reasoning_blob=None, mark_cuts=False)
    turn.start()
    turn.text("hello")
    turn.finish("stop")
    status, answer = ask.encoder.whole(turn.take()[-1])
    assert (
        status == 200
        and answer["model"] == "claude-x"
        and answer["content"] == [{"type": "text", "text": "hello"}]
    )


def test_count_tokens_is_read_without_max_tokens_and_refused_like_a_request() -> None:
    face = MessagesFace()
    status, answer = face.count_tokens(
        orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "foo"}]})
    )
    assert status == 200 and set(answer) == {"input_tokens"} and answer["input_tokens"] > 0
    with pytest.raises(InvalidRequest) as caught:
        face.count_tokens(orjson.dumps({"model": "m", "messages": []}))
    assert caught.value.param == "messages"
    with pytest.raises(InvalidRequest):
        face.count_tokens(b"not json")


@given(
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("text"), st.text(max_size=4)),
            st.tuples(st.just("reasoning"), st.text(max_size=4)),
            st.tuples(st.just("call"), st.sampled_from(["Bash", ""])),
            st.tuples(st.just("close"), st.just("")),
        ),
        max_size=14,
    ),
    batch=st.integers(min_value=1, max_value=5) | st.just(10_000),  # or the whole answer in one batch
    fail=st.booleans(),
)
@settings(max_examples=200, deadline=None)
def test_the_text_written_straight_is_byte_for_byte_the_encoders_event(
    steps: list[tuple[str, str]], batch: int, fail: bool
) -> None:
    ids = itertools.count()
    builder = ResponseBuilder(Envelope("resp_1", 0, "m", b"{}"), lambda prefix: f"{prefix}_{next(ids)}",
                              reasoning_blob=encode_reasoning)  # fmt: skip
    events = builder.start()
    for step, value in steps:
        if step == "text":
            builder.text(value)
        elif step == "reasoning":
            builder.reasoning(value)
        elif step == "call":
            builder.function_call(value, "{}")
        else:
            builder.close_text()
    if fail:
        builder.fail(UpstreamStreamCut("cut"), {})
    else:
        builder.finish({})
    events += builder.take()
    sse = MessagesSSE("m")
    written = b"".join(sse.batch(events[start : start + batch]) for start in range(0, len(events), batch))
    assert written == b"".join(frame(event) for event in MessagesEventEncoder("m").feed(events))


def test_a_whole_answer_in_one_batch_writes_each_text_block_at_its_index() -> None:
    # A fast upstream's whole answer is one batch: a run of deltas asks the encoder for the
    # open block once, and asks again once another block opened.
    ids = itertools.count()
    builder = ResponseBuilder(Envelope("resp_1", 0, "m", b"{}"), lambda prefix: f"{prefix}_{next(ids)}")
    events = builder.start()
    builder.text("one ")
    builder.text("two")
    builder.close_text()
    builder.function_call("Bash", "{}")
    builder.text("three ")
    builder.text("four")
    builder.finish({})
    events += builder.take()
    written = MessagesSSE("m").batch(events)
    frames = [orjson.loads(raw.split(b"\ndata: ")[1]) for raw in written.split(b"\n\n") if raw]
    texts = [
        (f["index"], f["delta"]["text"])
        for f in frames
        if f["type"] == "content_block_delta" and "text" in f["delta"]
    ]
    assert texts == [(0, "one "), (0, "two"), (2, "three "), (2, "four")]
    assert written == b"".join(frame(event) for event in MessagesEventEncoder("m").feed(events))


def test_a_delta_after_the_end_in_the_same_batch_is_not_written() -> None:
    # The open block is asked again after the encoder was fed: the end closed it.
    ids = itertools.count()
    builder = ResponseBuilder(Envelope("resp_1", 0, "m", b"{}"), lambda prefix: f"{prefix}_{next(ids)}")
    events = builder.start()
    builder.text("one")
    builder.text("two")
    builder.finish({})
    events += builder.take()
    late = [event for event in events if event["type"] == "response.output_text.delta"][-1]
    written = MessagesSSE("m").batch([*events, late])
    assert written.endswith(b'event: message_stop\ndata: {"type":"message_stop"}\n\n')
    assert written.count(b'"text_delta"') == 2


def test_the_deltas_after_the_first_of_a_block_are_written_without_the_encoder() -> None:
    ids = itertools.count()
    builder = ResponseBuilder(Envelope("resp_1", 0, "m", b"{}"), lambda prefix: f"{prefix}_{next(ids)}")
    events = builder.start()
    for word in ("one ", "two ", "three"):
        builder.text(word)
    builder.finish({})
    events += builder.take()
    fed: list[str] = []

    class Counting(MessagesEventEncoder):
        def feed(self, events: Iterable[Event]) -> list[MessagesEvent]:
            events = list(events)
            fed.extend(event["type"] for event in events)
            return super().feed(events)

    sse = MessagesSSE("m")
    sse._events = Counting("m")
    sse.batch(events)
    # the first opens the block (the encoder writes its start); the others go straight out
    assert fed.count("response.output_text.delta") == 1
