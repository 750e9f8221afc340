"""A Responses upstream's events read into the turn (translate/responses_upstream/stream.py): recorded-style
streams (tests/fixtures/responses_streams, as OpenAI, Ollama and vLLM send them) split at every
size, calls resolved through the catalogue, reasoning blobs wrapped and given back, usage,
incomplete answers and failures."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from codexgate.translate.responses_upstream.request import to_upstream_request, unwrap_reasoning
from codexgate.translate.responses_upstream.stream import ResponsesStreamReader, read_usage, upstream_failure
from codexgate.wire.responses import parse_request
from tests.support import openresponses
from tests.support.codex_requests import (
    CODEX_TOOLS,
    EXEC_COMMAND,
    MULTI_AGENT,
    TOOL_SEARCH,
    WEB_SEARCH,
    text_message,
)
from tests.support.openresponses import validate_stream
from tests.support.responses_turns import (
    UPSTREAM,
    WEB_SEARCH_CALL_SCHEMA,
    Event,
    make_turn,
    output,
    read,
    read_events,
    text_deltas,
)

FIXTURES_DIR = Path(__file__).parents[2] / "fixtures" / "responses_streams"
FIXTURES = sorted(p.name for p in FIXTURES_DIR.glob("*.sse"))
SPLITS = [1, 13, None]  # None: the whole body in one piece


def fixture(name: str) -> bytes:
    return (FIXTURES_DIR / name).read_bytes()


@pytest.fixture(autouse=True)
def hosted_items_validate(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(openresponses.EXTENSION_ITEM_SCHEMAS, "web_search_call", WEB_SEARCH_CALL_SCHEMA)
    yield


# name -> (terminal type, error code / incomplete reason, output (type, name or text))
EXPECTED: dict[str, tuple[str, str | None, list[tuple[str, str]]]] = {
    "openai_text.sse": ("response.completed", None, [("reasoning", ""), ("message", "Hello! The tests pass on main.")]),
    "openai_reasoning_function_call.sse": (
        "response.completed", None,
        [("reasoning", "**Checking the test suite**\n\nI should run the tests first.\n\n**Running pytest**\n\n"
                       "Let me run it quietly."), ("function_call", "exec_command")],
    ),
    "openai_custom_tool_call.sse": ("response.completed", None, [("reasoning", ""), ("custom_tool_call", "apply_patch")]),
    "openai_web_search.sse": ("response.completed", None, [("web_search_call", ""), ("message", "uv supports Python 3.14.")]),
    "openai_incomplete.sse": ("response.incomplete", "max_output_tokens", [("message", "The failing test is in tests/test_app.py: the")]),
    "openai_failed_midstream.sse": ("response.failed", "server_error", [("message", "I'll start by"), ("reasoning", "")]),
    "openai_cut.sse": ("response.failed", "upstream_stream_cut", [("message", "Running the build"), ("reasoning", "")]),
    "ollama_reasoning_tool_call.sse": (
        "response.completed", None,
        [("reasoning", "The user wants the files listed. I will call exec_command."), ("function_call", "exec_command")],
    ),
    "vllm_reasoning_text.sse": (
        "response.completed", None, [("reasoning", "We need to read the config first."), ("function_call", "exec_command")],
    ),
}  # fmt: skip
USAGE: dict[str, tuple[int, int, int]] = {  # input, output, cached
    "openai_text.sse": (3182, 75, 2944),
    "openai_reasoning_function_call.sse": (4210, 112, 3968),
    "openai_custom_tool_call.sse": (5120, 96, 4864),
    "openai_web_search.sse": (8731, 41, 0),
    "openai_incomplete.sse": (912, 16, 0),
    "ollama_reasoning_tool_call.sse": (412, 38, 0),
    "vllm_reasoning_text.sse": (1290, 61, 0),
}


def summary_of(item: dict[str, Any]) -> str:
    if item["type"] == "reasoning":
        return "".join(part["text"] for part in item["summary"])
    if item["type"] == "message":
        return str(item["content"][0]["text"])
    return str(item.get("name", ""))


def test_every_fixture_has_expectations() -> None:
    assert set(EXPECTED) == set(FIXTURES)


@pytest.mark.parametrize("name", FIXTURES)
def test_split_does_not_change_the_events(name: str) -> None:
    whole = read(fixture(name))
    for split in SPLITS:
        assert read(fixture(name), split) == whole, f"split {split}"


@pytest.mark.parametrize("name", FIXTURES)
def test_stream_is_valid_open_responses(name: str) -> None:
    for split in SPLITS:
        validate_stream(read(fixture(name), split))


@pytest.mark.parametrize("name", FIXTURES)
def test_the_answer_says_what_the_upstream_said(name: str) -> None:
    events = read(fixture(name))
    kind, detail, expected = EXPECTED[name]
    last = events[-1]
    assert last["type"] == kind and [e["type"] for e in events].count(kind) == 1
    if kind == "response.failed":
        assert last["response"]["error"]["code"] == detail
    if kind == "response.incomplete":
        assert last["response"]["incomplete_details"] == {"reason": detail}
    assert [(item["type"], summary_of(item)) for item in output(events)] == expected
    if name in USAGE:
        usage = last["response"]["usage"]
        input_tokens, output_tokens, cached = USAGE[name]
        assert (usage["input_tokens"], usage["output_tokens"]) == (input_tokens, output_tokens)
        assert usage["input_tokens_details"]["cached_tokens"] == cached
        assert usage["total_tokens"] == input_tokens + output_tokens


def test_calls_keep_their_ids_and_arguments() -> None:
    [_, call] = output(read(fixture("openai_reasoning_function_call.sse")))
    assert call["call_id"] == "call_Qm8Z2rT5vX9bN3kL7pW1dF4h"
    assert orjson.loads(call["arguments"]) == {
        "cmd": "uv run pytest -q", "workdir": "/home/dev/project", "yield_time_ms": 10000,
    }  # fmt: skip
    [_, patch] = output(read(fixture("openai_custom_tool_call.sse")))
    assert (
        patch["input"]
        == "*** Begin Patch\n*** Update File: src/app.py\n@@\n-    return 1\n+    return 2\n*** End Patch"
    )
    assert patch["call_id"] == "call_Hx7Yk2Lm9Np4Qr6St8Uv0Wz1"
    [_, vllm_call] = output(read(fixture("vllm_reasoning_text.sse")))  # only a done item was sent
    assert (
        vllm_call["arguments"] == '{"cmd":"cat pyproject.toml"}'
        and vllm_call["call_id"] == "call_7d2f9a1b3c4e5f60"
    )


def test_hosted_calls_pass_through_whole() -> None:
    [search, _] = output(read(fixture("openai_web_search.sse")))
    assert search == {
        "id": "ws_0d4e5f607180718069270011aa22bb33cc44dd55ee66ff77", "type": "web_search_call",
        "status": "completed",
        "action": {"type": "search", "query": "uv python 3.14 support",
                   "sources": [{"type": "url", "url": "https://docs.astral.sh/uv/"}]},
    }  # fmt: skip


# -- reasoning blobs: out wrapped, back unwrapped


@pytest.mark.parametrize(
    ("name", "item_id", "field", "blob_start"),
    [
        ("openai_text.sse", "rs_0a1b2c3d4e5f6071806926a4f1b3c881a1b2c3d4e5f60718", "summary", "gAAAAABpJk7Yq3"),
        ("openai_reasoning_function_call.sse", "rs_0b2c3d4e5f607180692700aa11bb22cc33dd44ee55ff6677", "summary",
         "gAAAAABpJk7fW9"),
        ("ollama_reasoning_tool_call.sse", "rs_613077", "summary", "The user wants"),
        ("vllm_reasoning_text.sse", "rs_4f2a9b1c7d3e5f60", "content", ""),
    ],
)  # fmt: skip
def test_reasoning_is_closed_with_the_upstreams_blob_wrapped(
    name: str, item_id: str, field: str, blob_start: str
) -> None:
    reasoning = output(read(fixture(name)))[0]
    own = unwrap_reasoning(UPSTREAM, reasoning["encrypted_content"])
    assert own is not None and (own.item_id, own.text_field) == (item_id, field)
    assert own.blob.startswith(blob_start) and (own.blob != "") == (blob_start != "")


def test_a_whole_conversation_gives_each_upstream_blob_back_as_it_was() -> None:
    raw = [
        orjson.loads(line[6:]) for line in fixture("openai_reasoning_function_call.sse").split(b"\n")
        if line.startswith(b"data: ")
    ]  # fmt: skip
    upstream_blob = raw[-1]["response"]["output"][0]["encrypted_content"]
    answer = output(read(fixture("openai_reasoning_function_call.sse")))
    call = answer[1]
    history = [
        text_message("user", "run the tests"), *answer,
        {"type": "function_call_output", "call_id": call["call_id"], "output": "ok"},
    ]  # fmt: skip
    req = parse_request({"model": "m", "input": history, "tools": CODEX_TOOLS})
    sent = to_upstream_request(req, "up-model", upstream=UPSTREAM, tool_format="native").body["input"]
    assert [item["type"] for item in sent] == [
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    assert sent[1]["encrypted_content"] == upstream_blob and "id" not in sent[1]
    assert "\n\n**Running pytest**" in sent[1]["summary"][0]["text"]
    assert "id" not in sent[2]


# -- tool calls resolved through the catalogue


def call_events(item: dict[str, Any], arguments: str, field: str = "arguments") -> list[Event]:
    kind = (
        "response.custom_tool_call_input"
        if item["type"] == "custom_tool_call"
        else "response.function_call_arguments"
    )
    added = {**item, field: ""}
    done = {**item, field: arguments, "status": "completed"}
    return [
        {"type": "response.output_item.added", "output_index": 0, "item": added},
        {"type": f"{kind}.delta", "item_id": item["id"], "output_index": 0, "delta": arguments[:5]},
        {"type": f"{kind}.delta", "item_id": item["id"], "output_index": 0, "delta": arguments[5:]},
        {"type": "response.output_item.done", "output_index": 0, "item": done},
        {"type": "response.completed", "response": {"id": "r", "status": "completed", "output": [done]}},
    ]


def test_functions_format_calls_come_back_as_the_clients_tool_kinds() -> None:
    flat = {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "multi_agent_v1__spawn_agent"}
    [spawn] = output(read_events(call_events(flat, '{"message":"go"}')))
    assert (spawn["type"], spawn["namespace"], spawn["name"]) == (
        "function_call",
        "multi_agent_v1",
        "spawn_agent",
    )
    patch = {"type": "function_call", "id": "fc_2", "call_id": "c2", "name": "apply_patch"}
    [custom] = output(read_events(call_events(patch, '{"input":"*** Begin Patch\\n*** End Patch"}')))
    assert (custom["type"], custom["input"]) == ("custom_tool_call", "*** Begin Patch\n*** End Patch")
    search = {"type": "function_call", "id": "fc_3", "call_id": "c3", "name": "tool_search"}
    [found] = output(read_events(call_events(search, '{"query":"mail","limit":2}')))
    assert (found["type"], found["arguments"], found["call_id"]) == (
        "tool_search_call",
        {"query": "mail", "limit": 2},
        "c3",
    )


def test_native_format_calls_keep_their_namespace_and_raw_input() -> None:
    spawn = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "c1",
        "name": "spawn_agent",
        "namespace": "multi_agent_v1",
    }
    [call] = output(read_events(call_events(spawn, '{"message":"go"}'), make_turn(tool_format="native")))
    assert (call["namespace"], call["name"], call["arguments"]) == (
        "multi_agent_v1",
        "spawn_agent",
        '{"message":"go"}',
    )
    patch = {"type": "custom_tool_call", "id": "ctc_1", "call_id": "c2", "name": "apply_patch"}
    body = "*** Begin Patch\n*** End Patch"
    [custom] = output(read_events(call_events(patch, body, "input"), make_turn(tool_format="native")))
    assert (custom["type"], custom["input"]) == ("custom_tool_call", body)


def test_native_client_tool_calls_come_back_as_the_kinds_the_client_runs() -> None:
    search = {"type": "tool_search_call", "id": "tsc_1", "call_id": "c1", "status": "completed",
              "execution": "client", "arguments": {"query": "calendar"}}  # fmt: skip
    shell = {"type": "local_shell_call", "id": "lsh_1", "call_id": "c2", "status": "completed",
             "action": {"type": "exec", "command": ["ls", "-la"]}}  # fmt: skip
    tools = [TOOL_SEARCH, {"type": "local_shell"}]
    turn = make_turn({"model": "m", "input": "hi", "tools": tools}, "native")
    done = [
        {"type": "response.output_item.done", "output_index": i, "item": item}
        for i, item in enumerate([search, shell])
    ]
    answer = output(read_events([*done, {"type": "response.completed", "response": {}}], turn))
    assert [(i["type"], i["call_id"]) for i in answer] == [
        ("tool_search_call", "c1"),
        ("local_shell_call", "c2"),
    ]
    assert answer[0]["arguments"] == {"query": "calendar"}
    assert answer[1]["action"] == {"type": "exec", "command": ["ls", "-la"]}


def test_a_call_opened_by_its_deltas_gets_its_name_from_the_done_item() -> None:
    events = [
        {"type": "response.function_call_arguments.delta", "output_index": 0, "delta": '{"cmd":'},
        {"type": "response.function_call_arguments.delta", "output_index": 0, "delta": '"ls"}'},
        {"type": "response.output_item.done", "output_index": 0, "item": {
            "type": "function_call", "name": "spawn_agent", "namespace": "multi_agent_v1", "call_id": "c1",
            "arguments": '{"cmd":"ls"}'}},
        {"type": "response.completed", "response": {}},
    ]  # fmt: skip
    [call] = output(read_events(events))
    assert (call["namespace"], call["name"], call["arguments"], call["call_id"]) == (
        "multi_agent_v1", "spawn_agent", '{"cmd":"ls"}', "c1",
    )  # fmt: skip


def test_deltas_without_item_ids_are_not_said_twice_by_the_done_item() -> None:
    events = [
        {"type": "response.output_text.delta", "delta": "Hel"},
        {"type": "response.output_text.delta", "delta": "lo"},
        {"type": "response.output_item.done", "item": {"type": "message", "role": "assistant",
                                                        "content": [{"type": "output_text", "text": "Hello"}]}},
        {"type": "response.completed", "response": {}},
    ]  # fmt: skip
    [message] = output(read_events(events))
    assert message["content"][0]["text"] == "Hello"


def test_a_done_item_completes_what_the_deltas_left_out() -> None:
    events = [
        {"type": "response.output_item.added", "output_index": 0, "item": {"type": "message", "id": "m1"}},
        {"type": "response.output_text.delta", "item_id": "m1", "output_index": 0, "delta": "Hel"},
        {"type": "response.output_item.done", "output_index": 0, "item": {"type": "message", "id": "m1",
            "content": [{"type": "output_text", "text": "Hello"}, {"type": "refusal", "refusal": " no"}]}},
        {"type": "response.completed", "response": {}},
    ]  # fmt: skip
    [message] = output(read_events(events))
    assert message["content"][0]["text"] == "Hello no"


# -- the end: usage, incomplete, failures


def test_usage_is_read_leniently_and_never_costs_the_terminal_event() -> None:
    assert read_usage({"input_tokens": "12", "output_tokens": 3.7, "total_tokens": None}) == {
        "input_tokens": 12, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 3,
        "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15,
    }  # fmt: skip
    assert read_usage({"prompt_tokens": 7, "completion_tokens": 2})["total_tokens"] == 9
    details = read_usage(
        {"input_tokens": 5, "output_tokens": 1, "input_tokens_details": {"cache_write_tokens": 4}}
    )
    assert details is not None and details["input_tokens_details"] == {
        "cached_tokens": 0,
        "cache_write_tokens": 4,
    }
    for garbage in (None, "many", [], {"input_tokens": -4, "output_tokens": True}, {"input_tokens": 0}):
        assert read_usage(garbage) is None
    bad = {
        "type": "response.completed",
        "response": {"usage": {"input_tokens": {"x": 1}, "output_tokens": "?"}},
    }
    events = read_events([*text_deltas("hi"), bad], make_turn(input_token_estimate=100))
    last = events[-1]
    assert last["type"] == "response.completed"
    assert last["response"]["usage"]["input_tokens"] == 100  # the gateway's estimate instead


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("max_output_tokens", "max_output_tokens"),
        ("content_filter", "content_filter"),
        ("unknown", "max_output_tokens"),
    ],
)
def test_incomplete_answers_stay_incomplete(reason: str, expected: str) -> None:
    end = {"type": "response.incomplete", "response": {"incomplete_details": {"reason": reason}}}
    events = read_events([*text_deltas("cut"), end])
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": expected}


@pytest.mark.parametrize(
    ("error", "code"),
    [
        ({"code": "context_length_exceeded", "message": "Your input exceeds the context window."},
         "context_length_exceeded"),
        ({"code": "rate_limit_exceeded", "message": "Rate limit reached. Please try again in 1.5s."},
         "rate_limit_exceeded"),
        ({"code": "invalid_prompt", "message": "Invalid prompt: flagged."}, "invalid_prompt"),
        ({"code": "model_output_loop", "message": "Upstream error: the model repeated itself."}, "model_output_loop"),
        ({"code": "server_error", "message": "An error occurred."}, "server_error"),
        ({"message": "something broke"}, "upstream_error"),
        ({"code": 503, "message": "busy"}, "server_is_overloaded"),
        (None, "upstream_error"),
    ],
)  # fmt: skip
def test_failures_keep_the_code_codex_acts_on(error: Any, code: str) -> None:
    failed = {"type": "response.failed", "response": {"status": "failed", "error": error}}
    events = read_events([*text_deltas("partial"), failed])
    last = events[-1]
    assert last["type"] == "response.failed" and last["response"]["error"]["code"] == code
    assert output(events)[0]["content"][0]["text"] == "partial"  # what came before is kept, closed
    assert upstream_failure(error).code == code


def test_a_top_level_error_event_fails_the_response() -> None:
    openai_shape = {
        "type": "error",
        "code": "rate_limit_exceeded",
        "message": "Slow down; try again in 2s.",
        "param": None,
    }
    nested = {"type": "error", "error": {"code": "insufficient_quota", "message": "Quota exceeded."}}
    assert read_events([openai_shape])[-1]["response"]["error"]["code"] == "rate_limit_exceeded"
    assert read_events([nested])[-1]["response"]["error"]["code"] == "insufficient_quota"


def test_a_stream_without_a_terminal_event_is_cut() -> None:
    events = read_events(text_deltas("no end"))
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"]["code"] == "upstream_stream_cut"


def test_unknown_events_and_unreadable_data_are_skipped() -> None:
    data = (
        b"data: {\"type\":\"response.made_up\",\"x\":1}\n\n: comment\n\ndata: not json\n\ndata: [1,2]\n\n"
        + b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in [*text_deltas("fine"), {"type": "response.completed", "response": {}}])
    )  # fmt: skip
    events = read(data)
    assert events[-1]["type"] == "response.completed" and output(events)[0]["content"][0]["text"] == "fine"


def test_a_whole_response_object_reads_like_a_stream() -> None:
    streamed = read(fixture("openai_reasoning_function_call.sse"))
    raw = [
        orjson.loads(line[6:]) for line in fixture("openai_reasoning_function_call.sse").split(b"\n")
        if line.startswith(b"data: ")
    ]  # fmt: skip
    turn = make_turn()
    events = turn.start()
    ResponsesStreamReader(turn, UPSTREAM).feed_response(raw[-1]["response"])
    events += turn.take()
    validate_stream(events)
    assert output(events) == output(streamed)


# -- an open model behind /v1/responses: the stages still apply


def test_think_tags_and_tool_calls_written_as_text_are_fixed_by_the_stages() -> None:
    text = (
        "<think>The user wants a listing.</think>I'll look.\n"
        '<tool_call>\n{"name": "exec_command", "arguments": {"cmd": "ls"}}\n</tool_call>'
    )
    pieces = [text[i : i + 7] for i in range(0, len(text), 7)]
    events = read_events(
        [
            {"type": "response.output_text.delta", "item_id": "m1", "output_index": 0, "delta": p}
            for p in pieces
        ]
        + [{"type": "response.completed", "response": {}}],
        make_turn(think_tags="auto", text_tool_calls="auto"),
    )
    validate_stream(events)
    reasoning, message, call = output(events)
    assert reasoning["summary"][0]["text"] == "The user wants a listing."
    assert message["content"][0]["text"].strip() == "I'll look."
    assert (call["type"], call["name"], orjson.loads(call["arguments"])) == (
        "function_call",
        "exec_command",
        {"cmd": "ls"},
    )


def test_the_stop_sequence_is_applied_by_the_gateway() -> None:
    events = read_events(
        [*text_deltas("one two END three"), {"type": "response.completed", "response": {}}],
        make_turn(stop=["END"]),
    )
    assert events[-1]["type"] == "response.completed"
    assert output(events)[0]["content"][0]["text"] == "one two "


def test_hosted_tools_are_noted_in_the_response_metadata_only_when_left_out() -> None:
    body = {"model": "m", "input": "hi", "tools": [EXEC_COMMAND, WEB_SEARCH, MULTI_AGENT]}
    done = [*text_deltas("ok"), {"type": "response.completed", "response": {}}]
    functions = read_events(done, make_turn(body))
    assert functions[-1]["response"]["metadata"] == {"codexgate_unavailable_tools": "web_search"}
    native = read_events(done, make_turn(body, "native"))
    assert native[-1]["response"]["metadata"] == {}


def test_arguments_an_added_item_already_holds_are_not_said_twice() -> None:
    item = {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "exec_command"}
    events = [
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**item, "arguments": '{"cmd":"ls"}'},
        },
        {
            "type": "response.function_call_arguments.delta",
            "item_id": "fc_1",
            "output_index": 0,
            "delta": '{"cmd":"ls"}',
        },
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": {**item, "arguments": '{"cmd":"ls"}'},
        },
        {"type": "response.completed", "response": {}},
    ]
    [call] = output(read_events(events))
    assert call["arguments"] == '{"cmd":"ls"}'


def test_reasoning_with_nothing_to_show_is_an_item_only_when_it_has_a_blob() -> None:
    hidden = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAAABhidden"}
    empty = {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": None}
    events = read_events(
        [
            {"type": "response.output_item.done", "output_index": 0, "item": hidden},
            {"type": "response.output_item.done", "output_index": 1, "item": empty},
            *text_deltas("ok"),
            {"type": "response.completed", "response": {}},
        ]
    )
    validate_stream(events)
    reasoning, message = output(events)
    assert reasoning["summary"] == [] and message["content"][0]["text"] == "ok"
    own = unwrap_reasoning(UPSTREAM, reasoning["encrypted_content"])
    assert own is not None and (own.item_id, own.blob) == ("rs_1", "gAAAAABhidden")
