"""Responses request -> Chat Completions request."""

from __future__ import annotations

import base64
import itertools
from typing import Any

import orjson
import pytest

from codexgate.errors import InvalidRequest, ModelOutputLoop
from codexgate.translate.chat_upstream.request import LATE_DEVELOPER_PREFIX, MISSING_OUTPUT, to_chat_request
from codexgate.translate.cuts import cut_marker
from codexgate.translate.dialect import ChatDialect
from codexgate.translate.reasoning import encode_reasoning
from codexgate.wire.checks import decode_json_object
from codexgate.wire.responses import parse_request
from tests.support.turns import chat_translator

APPLY_PATCH = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Use apply_patch to edit files.",
    "format": {
        "type": "grammar",
        "syntax": "lark",
        "definition": 'start: begin_patch hunk+ end_patch\nbegin_patch: "*** Begin Patch" LF',
    },
}
EXEC = {
    "type": "function",
    "name": "exec_command",
    "description": "Run a command.",
    "strict": False,
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
}


def dev(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": text}]}


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def chat(body: dict[str, Any], dialect: ChatDialect | None = None) -> dict[str, Any]:
    return to_chat_request(parse_request(body), dialect or ChatDialect(), "up-model").body


def test_codex_first_request_merges_leading_developer_messages_into_one_system_message() -> None:
    body = chat(
        {"model": "m", "input": [dev("base prompt"), dev("<permissions/>"), user("<env/>"), user("hi")]}
    )
    assert body["model"] == "up-model"
    assert body["messages"] == [
        {"role": "system", "content": "base prompt\n\n<permissions/>"},
        {"role": "user", "content": "<env/>"},
        {"role": "user", "content": "hi"},
    ]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


def test_instructions_come_first_in_the_system_message() -> None:
    body = chat({"model": "m", "instructions": "be brief", "input": [dev("more"), user("hi")]})
    assert body["messages"][0] == {"role": "system", "content": "be brief\n\nmore"}


def test_a_later_developer_message_becomes_a_marked_user_message_by_default() -> None:
    body = chat({"model": "m", "input": [dev("base"), user("hi"), dev("now in plan mode")]})
    assert body["messages"][-1] == {"role": "user", "content": LATE_DEVELOPER_PREFIX + "now in plan mode"}
    assert [m["role"] for m in body["messages"]].count("system") == 1


@pytest.mark.parametrize("mode,role", [("system", "system"), ("developer", "developer")])
def test_developer_role_modes_keep_messages_in_place(mode: str, role: str) -> None:
    body = chat(
        {"model": "m", "input": [dev("base"), user("hi"), dev("later")]}, ChatDialect(developer_role=mode)
    )  # type: ignore[arg-type]
    assert [m["role"] for m in body["messages"]] == [role, "user", role]


def test_tool_calls_and_outputs_pair_up_with_parallel_calls_in_one_assistant_message() -> None:
    items = [
        user("list files twice"),
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "c1",
            "name": "exec_command",
            "arguments": '{"cmd":"ls"}',
        },
        {
            "type": "function_call",
            "id": "fc_2",
            "call_id": "c2",
            "name": "exec_command",
            "arguments": '{"cmd":"pwd"}',
        },
        {"type": "function_call_output", "call_id": "c1", "output": "a.txt"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "/w"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]},
    ]
    messages = chat({"model": "m", "input": items, "tools": [EXEC]})["messages"]
    assert messages[1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "exec_command", "arguments": '{"cmd":"ls"}'},
            },
            {
                "id": "c2",
                "type": "function",
                "function": {"name": "exec_command", "arguments": '{"cmd":"pwd"}'},
            },
        ],
    }
    assert messages[2] == {"role": "tool", "tool_call_id": "c1", "content": "a.txt"}
    assert messages[3] == {"role": "tool", "tool_call_id": "c2", "content": "/w"}
    assert messages[4] == {"role": "assistant", "content": "done"}


def test_assistant_text_followed_by_a_call_is_one_assistant_message() -> None:
    items = [
        user("x"),
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Let me look."}],
        },
        {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    ]
    messages = chat({"model": "m", "input": items})["messages"]
    assert messages[1]["content"] == "Let me look." and messages[1]["tool_calls"][0]["id"] == "c1"


def test_a_call_without_output_gets_a_placeholder_so_the_upstream_accepts_the_history() -> None:
    items = [
        user("x"),
        {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"},
        user("stop"),
    ]
    messages = chat({"model": "m", "input": items})["messages"]
    assert messages[2] == {"role": "tool", "tool_call_id": "c1", "content": MISSING_OUTPUT}
    assert messages[3] == {"role": "user", "content": "stop"}


def test_an_output_without_its_call_is_kept_as_user_text() -> None:
    messages = chat(
        {
            "model": "m",
            "input": [user("x"), {"type": "function_call_output", "call_id": "zz", "output": "42"}],
        }
    )["messages"]
    assert messages[-1] == {"role": "user", "content": "Tool output for call zz:\n42"}


def test_custom_tool_becomes_a_function_with_one_string_parameter_and_its_grammar() -> None:
    request = to_chat_request(
        parse_request({"model": "m", "input": "x", "tools": [EXEC, APPLY_PATCH]}), ChatDialect(), "u"
    )
    tools = request.body["tools"]
    assert [t["function"]["name"] for t in tools] == ["exec_command", "apply_patch"]
    patch = tools[1]["function"]
    assert patch["parameters"]["required"] == ["input"]
    assert "*** Begin Patch" in patch["description"]
    assert request.catalogue.resolve("apply_patch").kind == "custom"


def test_custom_tool_call_in_history_is_sent_as_a_function_call_with_json_input() -> None:
    items = [
        user("x"),
        {
            "type": "custom_tool_call",
            "call_id": "p1",
            "name": "apply_patch",
            "input": "*** Begin Patch\n*** End Patch",
        },
        {"type": "custom_tool_call_output", "call_id": "p1", "output": "Done!"},
    ]
    messages = chat({"model": "m", "input": items, "tools": [APPLY_PATCH]})["messages"]
    call = messages[1]["tool_calls"][0]["function"]
    assert call["name"] == "apply_patch"
    assert orjson.loads(call["arguments"]) == {"input": "*** Begin Patch\n*** End Patch"}
    assert messages[2] == {"role": "tool", "tool_call_id": "p1", "content": "Done!"}


def test_namespace_tools_are_flattened_to_valid_names_and_history_uses_the_same_names() -> None:
    namespace = {
        "type": "namespace",
        "name": "mcp__my.server",
        "description": "srv",
        "tools": [
            {"type": "function", "name": "read file", "parameters": {"type": "object", "properties": {}}}
        ],
    }
    items = [
        user("x"),
        {
            "type": "function_call",
            "call_id": "c1",
            "namespace": "mcp__my.server",
            "name": "read file",
            "arguments": "{}",
        },
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    ]
    request = to_chat_request(
        parse_request({"model": "m", "input": items, "tools": [namespace]}), ChatDialect(), "u"
    )
    name = request.body["tools"][0]["function"]["name"]
    assert name == "mcp__my_server__read_file"
    assert request.body["messages"][1]["tool_calls"][0]["function"]["name"] == name
    target = request.catalogue.resolve(name)
    assert (target.namespace, target.name) == ("mcp__my.server", "read file")


def test_long_namespace_names_stay_within_64_chars_and_distinct() -> None:
    tools = [
        {
            "type": "namespace",
            "name": "n" * 60,
            "tools": [{"type": "function", "name": f"tool_{i}" + "x" * 40}],
        }
        for i in range(2)
    ]
    names = [t["function"]["name"] for t in chat({"model": "m", "input": "x", "tools": tools})["tools"]]
    assert all(len(n) <= 64 for n in names) and len(set(names)) == 2


def test_hosted_tools_are_left_out_the_model_is_told_and_client_tools_become_functions() -> None:
    request = to_chat_request(
        parse_request(
            {
                "model": "m",
                "input": "x",
                "tools": [
                    {"type": "web_search", "external_web_access": False},
                    {"type": "tool_search", "execution": "client"},
                    {"type": "local_shell"},
                    {"type": "brand_new_kind"},
                    EXEC,
                ],
            }
        ),
        ChatDialect(),
        "u",
    )
    # Client-executed tool_search and local_shell are functions now; hosted and unknown kinds
    # are left out, and the system prompt says so in one line.
    assert [t["function"]["name"] for t in request.body["tools"]] == [
        "tool_search",
        "local_shell",
        "exec_command",
    ]
    assert request.catalogue.skipped == ["web_search", "brand_new_kind"]
    assert request.catalogue.unavailable == ["web_search", "brand_new_kind"]
    system = request.body["messages"][0]
    assert system["role"] == "system"
    assert system["content"].startswith("Note: these tools are not available here")
    assert "web_search, brand_new_kind" in system["content"]


def test_no_tools_means_no_tool_fields() -> None:
    body = chat({"model": "m", "input": "x", "tools": [], "tool_choice": "auto", "parallel_tool_calls": True})
    assert "tools" not in body and "tool_choice" not in body and "parallel_tool_calls" not in body


def test_tool_choice_and_parallel_tool_calls_pass() -> None:
    body = chat(
        {
            "model": "m",
            "input": "x",
            "tools": [EXEC],
            "tool_choice": {"type": "function", "name": "exec_command"},
            "parallel_tool_calls": False,
        }
    )
    assert body["tool_choice"] == {"type": "function", "function": {"name": "exec_command"}}
    assert body["parallel_tool_calls"] is False


def test_reasoning_items_are_replayed_as_reasoning_content_on_the_next_assistant_message() -> None:
    items = [
        user("x"),
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "shown"}],
            "encrypted_content": encode_reasoning("I should run ls"),
        },
        {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    ]
    messages = chat({"model": "m", "input": items})["messages"]
    assert messages[1]["reasoning_content"] == "I should run ls"
    none = chat({"model": "m", "input": items}, ChatDialect(reasoning_replay="none"))["messages"]
    assert "reasoning_content" not in none[1]
    other = chat({"model": "m", "input": items}, ChatDialect(reasoning_replay="reasoning"))["messages"]
    assert other[1]["reasoning"] == "I should run ls"


def test_foreign_reasoning_falls_back_to_its_summary_text() -> None:
    items = [
        user("x"),
        {
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": "thought"}],
            "encrypted_content": "gAAAAopaque",
        },
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]},
    ]
    assert chat({"model": "m", "input": items})["messages"][1]["reasoning_content"] == "thought"


def test_reasoning_written_before_the_plain_blob_is_still_replayed_and_a_damaged_one_falls_back() -> None:
    # Conversations that span the upgrade carry the first blob format: base64 of {"text": ...}.
    legacy = "cgr1:" + base64.b64encode(orjson.dumps({"text": "I should run ls"})).decode()
    assert encode_reasoning("I should run ls") == "cgr2:I should run ls"
    cases = ((legacy, "I should run ls"), ("cgr1:not base64!", "shown"), ("cgr2:", None))  # None: no text
    for blob, replayed in cases:
        items = [
            user("x"),
            {
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": "shown"}],
                "encrypted_content": blob,
            },
            {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        ]
        assert chat({"model": "m", "input": items})["messages"][1].get("reasoning_content") == replayed, blob


# -- answers a failure cut short (translate/cuts.py)

_IDS = itertools.count()


def failed_output(text: str, reasoning: str | None = None) -> list[dict[str, Any]]:
    """The output of a response that failed mid-answer, as the gateway streams it."""
    translator = chat_translator([], response_id="resp_x", new_id=lambda prefix: f"{prefix}_{next(_IDS)}")
    delta = {"content": text} | ({"reasoning_content": reasoning} if reasoning else {})
    translator.feed({"choices": [{"index": 0, "delta": delta}]})
    *_, failed = translator.turn.fail(ModelOutputLoop("stopped"))
    output: list[dict[str, Any]] = failed["response"]["output"]
    return output


def answer(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


def test_codex_retry_after_a_failure_leaves_the_cut_answer_out() -> None:
    first = [dev("base"), user("hello")]
    retry = [*first, *failed_output("Sure. Sure. Sure.", reasoning="I will greet them.")]
    assert (
        chat({"model": "m", "input": retry})["messages"] == chat({"model": "m", "input": first})["messages"]
    )
    again = [*retry, *failed_output("Sure. Sure.")]  # llama.cpp refused two trailing assistants
    assert chat({"model": "m", "input": again})["messages"][-1] == {"role": "user", "content": "hello"}


def test_later_turns_keep_the_real_answer_without_the_cut_one_or_its_reasoning() -> None:
    items = [
        user("hello"),
        *failed_output("Sure. Sure.", reasoning="cut thinking"),
        answer("Hi!"),
        user("next"),
    ]
    assert chat({"model": "m", "input": items})["messages"] == [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "Hi!"},
        {"role": "user", "content": "next"},
    ]


def test_items_as_codex_echoes_them_are_recognised() -> None:
    # Codex 0.169 sends the marker back with `content: null` and the message with its status.
    cut = {**answer("Sure. Sure."), "id": "msg_a", "status": "incomplete"}
    marker = {**cut_marker("rs_b", ["msg_a"]), "content": None}
    messages = chat({"model": "m", "input": [user("hello"), cut, marker]})["messages"]
    assert messages == [{"role": "user", "content": "hello"}]


def test_a_trailing_assistant_message_without_a_marker_is_a_prefill_passed_unchanged() -> None:
    prefill = {**answer("Sure, here is the list:"), "id": "msg_a", "status": "incomplete"}
    messages = chat({"model": "m", "input": [user("list three fruits"), prefill]})["messages"]
    assert messages[-1] == {"role": "assistant", "content": "Sure, here is the list:"}


def test_a_marker_never_removes_a_users_message_and_a_damaged_one_removes_nothing() -> None:
    said = {**user("hello"), "id": "msg_u"}
    items = [said, {**answer("Hi"), "id": "msg_a"}, cut_marker("rs_b", ["msg_u"])]
    assert [m["role"] for m in chat({"model": "m", "input": items})["messages"]] == ["user", "assistant"]
    damaged = {**cut_marker("rs_b", ["msg_a"]), "encrypted_content": "cgcut1:not base64!"}
    items = [said, {**answer("Hi"), "id": "msg_a"}, damaged]
    assert [m["role"] for m in chat({"model": "m", "input": items})["messages"]] == ["user", "assistant"]


def test_images_in_user_messages_and_tool_outputs() -> None:
    image = {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "high"}
    items = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "look"}, image]},
        {"type": "function_call", "call_id": "c1", "name": "view_image", "arguments": "{}"},
        {
            "type": "function_call_output",
            "call_id": "c1",
            "output": [{"type": "input_text", "text": "here"}, image],
        },
        user("and?"),
    ]
    messages = chat({"model": "m", "input": items})["messages"]
    assert messages[0]["content"] == [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "high"}},
    ]
    assert messages[2] == {"role": "tool", "tool_call_id": "c1", "content": "here"}
    assert messages[3]["role"] == "user" and messages[3]["content"][0]["type"] == "image_url"
    assert messages[4] == {"role": "user", "content": "and?"}


def test_sampling_structured_output_and_reasoning_effort() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    req = {
        "model": "m",
        "input": "x",
        "max_output_tokens": 50,
        "temperature": 0.2,
        "top_p": 0.9,
        "reasoning": {"effort": "high"},
        "text": {
            "format": {"type": "json_schema", "name": "codex_output_schema", "strict": True, "schema": schema}
        },
    }
    body = chat(req)
    assert body["max_tokens"] == 50 and body["temperature"] == 0.2 and body["top_p"] == 0.9
    assert "reasoning_effort" not in body
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "codex_output_schema", "schema": schema, "strict": True},
    }
    body = chat(req, ChatDialect(send_reasoning_effort=True, max_tokens_field="max_completion_tokens"))
    assert body["reasoning_effort"] == "high" and body["max_completion_tokens"] == 50


def test_unknown_fields_never_fail_and_hosted_calls_become_notes() -> None:
    request = to_chat_request(
        parse_request(
            {
                "model": "m",
                "client_metadata": {"a": "b"},
                "include": ["reasoning.encrypted_content"],
                "input": [
                    user("x"),
                    {"type": "web_search_call", "id": "ws", "action": {"type": "search", "query": "q"}},
                    {
                        "type": "message",
                        "role": "user",
                        "content": "y",
                        "internal_chat_message_metadata_passthrough": {},
                    },
                ],
            }
        ),
        ChatDialect(),
        "u",
    )
    assert request.dropped_items == []
    assert [m["content"] for m in request.body["messages"]] == ["x", "[web_search ran on the server: q]", "y"]


def test_extra_body_defaults_are_overridden_by_the_client() -> None:
    body = chat(
        {"model": "m", "input": "x", "temperature": 0.1},
        ChatDialect(extra_body={"temperature": 0.7, "top_k": 20}),
    )
    assert body["temperature"] == 0.1 and body["top_k"] == 20


@pytest.mark.parametrize(
    "body,param",
    [
        ({"input": "x"}, "model"),
        ({"model": 5, "input": "x"}, "model"),
        ({"model": "m"}, "input"),
        ({"model": "m", "input": 3}, "input"),
        ({"model": "m", "input": [5]}, "input[0]"),
        ({"model": "m", "input": [{"type": "message", "role": "robot", "content": "x"}]}, "input[0].role"),
        (
            {"model": "m", "input": [{"type": "function_call", "call_id": "c", "name": "n"}]},
            "input[0].arguments",
        ),
        (
            {"model": "m", "input": [{"type": "function_call_output", "call_id": "c", "output": {"a": 1}}]},
            "input[0].output",
        ),
        ({"model": "m", "input": "x", "stream": "yes"}, "stream"),
        ({"model": "m", "input": "x", "temperature": "hot"}, "temperature"),
        ({"model": "m", "input": "x", "max_output_tokens": True}, "max_output_tokens"),
        ({"model": "m", "input": "x", "max_output_tokens": 0}, "max_output_tokens"),
        ({"model": "m", "input": "x", "tools": [{"name": "x"}]}, "tools[0]"),
    ],
)
def test_bad_requests_name_the_parameter(body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_request(body)
    assert info.value.param == param and info.value.status == 400


@pytest.mark.parametrize("raw", [b"{", b"[1]", b"", b"\xff"])
def test_bodies_that_are_not_json_objects_are_invalid_requests(raw: bytes) -> None:
    with pytest.raises(InvalidRequest):
        decode_json_object(raw, "The request body")
