"""Anthropic's event stream read into the turn (translate/messages_upstream/stream.py): text,
thinking closed with its signed block, redacted thinking, tool calls by their flat names
(custom input unwrapped, namespaces restored), usage with the cache counts, every stop
reason, an error event, a cut, a whole (unstreamed) message. Streams are made by the scripted
server (tests/support/fake_messages_upstream.py) and split at every size."""

from __future__ import annotations

import itertools
from typing import Any

import orjson
import pytest

from codexgate.translate.messages_upstream.request import to_messages_request
from codexgate.translate.messages_upstream.stream import MessagesStreamReader, read_usage
from codexgate.translate.reasoning import decode_thinking
from codexgate.translate.turn import Turn, TurnOptions
from codexgate.wire.responses import parse_request
from codexgate.wire.responses_events import stop_sequence_of
from tests.support.codex_requests import CODEX_TOOLS
from tests.support.fake_messages_upstream import (
    MessageReply,
    Text,
    Thinking,
    ToolUse,
    message_events,
    redacted_data,
    sign,
)
from tests.support.openresponses import validate_stream
from tests.support.turns import translate_sse

Event = dict[str, Any]
USAGE = {"input_tokens": 120, "cache_creation_input_tokens": 300, "cache_read_input_tokens": 6000}
SPLITS = [1, 17, None]
PATCH = "*** Begin Patch\n*** Add File: a.txt\n+a\n*** End Patch\n"


def make_turn() -> Turn:
    req = parse_request({"model": "m", "input": "hi", "tools": CODEX_TOOLS})
    translated = to_messages_request(req, "claude-sonnet-4-5")
    counter = itertools.count()
    options = TurnOptions(think_tags="off", text_tool_calls="off", mark_cuts=True)
    return Turn(req, translated.catalogue, options, new_id=lambda p: f"{p}_{next(counter)}", now=lambda: 0,
                response_id="resp_gw", sent=translated.body)  # fmt: skip


def sse(events: list[Event]) -> bytes:
    return b"".join(b"event: " + e["type"].encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n" for e in events)


def read(events: list[Event], split: int | None = None) -> list[Event]:
    data = sse(events)
    pieces = [data] if split is None else [data[i : i + split] for i in range(0, len(data), split)]
    return translate_sse(MessagesStreamReader(make_turn()), pieces)


def reply(*blocks: Any, **options: Any) -> list[Event]:
    return message_events(MessageReply(list(blocks), **options), "claude-sonnet-4-5", USAGE)


def final(events: list[Event]) -> dict[str, Any]:
    validate_stream(events)
    return dict(events[-1]["response"])


@pytest.mark.parametrize("split", SPLITS)
def test_thinking_text_and_a_call_with_the_signed_block_kept(split: int | None) -> None:
    plan = "The tests fail. Run them."
    events = read(
        reply(Thinking(plan), Text("Running."), ToolUse("exec_command", {"cmd": "pytest"}, id="toolu_1")),
        split,
    )
    response = final(events)
    assert events[-1]["type"] == "response.completed"
    reasoning, message, call = response["output"]
    assert reasoning["summary"][0]["text"] == plan
    assert decode_thinking(reasoning["encrypted_content"]) == {
        "type": "thinking",
        "thinking": plan,
        "signature": sign(plan),
    }
    assert message["content"][0]["text"] == "Running."
    assert (call["type"], call["name"], call["call_id"], orjson.loads(call["arguments"])) == (
        "function_call", "exec_command", "toolu_1", {"cmd": "pytest"},
    )  # fmt: skip


def test_redacted_thinking_is_a_reasoning_item_of_its_own_with_its_data_kept() -> None:
    response = final(read(reply(Thinking("secret", redacted=True), Thinking("shown"), Text("Hi."))))
    redacted, shown, _ = response["output"]
    assert redacted["summary"] == []
    assert decode_thinking(redacted["encrypted_content"]) == {
        "type": "redacted_thinking",
        "data": redacted_data("secret"),
    }
    assert decode_thinking(shown["encrypted_content"])["thinking"] == "shown"  # type: ignore[index]


def test_custom_and_namespaced_calls_reach_the_client_as_it_knows_them() -> None:
    blocks = [
        ToolUse("apply_patch", {"input": PATCH}, id="toolu_p"),
        ToolUse("multi_agent_v1__spawn_agent", {"message": "review"}, id="toolu_s"),
    ]
    patch, spawn = final(read(reply(*blocks)))["output"]
    assert (patch["type"], patch["name"], patch["input"]) == ("custom_tool_call", "apply_patch", PATCH)
    assert (spawn["type"], spawn["namespace"], spawn["name"]) == (
        "function_call",
        "multi_agent_v1",
        "spawn_agent",
    )


def test_usage_sums_the_cache_reads_and_writes_into_the_input() -> None:
    usage = final(read(reply(Text("Hi."))))["usage"]
    assert usage["input_tokens"] == 120 + 300 + 6000
    assert usage["input_tokens_details"] == {"cached_tokens": 6000, "cache_creation_tokens": 300}
    assert usage["output_tokens"] == 1 and usage["total_tokens"] == 6421
    assert read_usage({"input_tokens": 0, "output_tokens": 0}) is None


@pytest.mark.parametrize(
    "stop_reason,terminal,reason",
    [
        ("end_turn", "response.completed", None),
        ("stop_sequence", "response.completed", None),
        ("max_tokens", "response.incomplete", "max_output_tokens"),
        ("model_context_window_exceeded", "response.incomplete", "max_output_tokens"),
        ("refusal", "response.incomplete", "content_filter"),
    ],
)
def test_each_stop_reason(stop_reason: str, terminal: str, reason: str | None) -> None:
    events = read(reply(Text("Partial answer"), stop_reason=stop_reason))
    assert events[-1]["type"] == terminal
    details = events[-1]["response"]["incomplete_details"]
    assert (details or {}).get("reason") == reason
    assert final(events)["output"][0]["content"][0]["text"] == "Partial answer"


def test_the_stop_sequence_the_upstream_met_rides_on_the_terminal_event() -> None:
    """For the Messages face to answer `stop_reason: stop_sequence` with the sequence."""
    events = read(reply(Text("one two"), stop_reason="stop_sequence", stop_sequence="THREE"))
    assert stop_sequence_of(events[-1]) == "THREE"
    assert stop_sequence_of(read(reply(Text("one two")))[-1]) is None


def test_a_call_cut_by_max_tokens_is_not_run() -> None:
    events = read(reply(Text("Let me."), ToolUse("exec_command", {"cmd": "rm"}), stop_reason="max_tokens"))
    assert [item["type"] for item in final(events)["output"]] == ["message"]


def test_an_error_event_fails_the_response_with_its_mapped_code() -> None:
    events = read(reply(Text("Half"), error={"type": "overloaded_error", "message": "Overloaded"}))
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"]["code"] == "server_is_overloaded"
    assert final(events)["output"][0]["content"][0]["text"] == "Half"


def test_a_stream_cut_before_message_stop_fails() -> None:
    events = read(reply(Text("Half"), cut=True))
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"]["code"] == "upstream_stream_cut"


def test_a_whole_message_reads_as_its_stream_does() -> None:
    plan = "Plan."
    message = {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m", "stop_reason": "tool_use",
        "content": [
            {"type": "thinking", "thinking": plan, "signature": sign(plan)},
            {"type": "tool_use", "id": "toolu_w", "name": "exec_command", "input": {"cmd": "ls"}},
        ],
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }  # fmt: skip
    turn = make_turn()
    reader = MessagesStreamReader(turn)
    events = turn.start()
    assert reader.feed_whole(message, {})
    events += turn.take()
    reasoning, call = final(events)["output"]
    assert decode_thinking(reasoning["encrypted_content"])["signature"] == sign(plan)  # type: ignore[index]
    assert (call["call_id"], orjson.loads(call["arguments"])) == ("toolu_w", {"cmd": "ls"})
    assert not MessagesStreamReader(make_turn()).feed_whole({"object": "list"}, {})


def test_pings_and_unknown_blocks_are_passed_over() -> None:
    events = reply(Text("Hi."))
    events.insert(
        2,
        {
            "type": "content_block_start",
            "index": 9,
            "content_block": {"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}},
        },
    )
    events.insert(3, {"type": "content_block_stop", "index": 9})
    events.insert(4, {"type": "ping"})
    assert [i["type"] for i in final(read(events))["output"]] == ["message"]
