"""The canonical request as a Responses server takes it (translate/responses_upstream/request.py), in both
tool formats, for every item and tool kind Codex sends: the fields carried and refused, the
history rewritten to match the tools, ids and Codex's own keys left out, reasoning (the
upstream's own blob back, anything else left out), cut answers left out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from codexgate.errors import InvalidRequest
from codexgate.translate.catalogue import unavailable_notice
from codexgate.translate.chat_upstream.messages import MISSING_OUTPUT
from codexgate.translate.cuts import cut_marker
from codexgate.translate.reasoning import encode_reasoning
from codexgate.translate.responses_upstream.request import (
    ToolFormat,
    UpstreamRequest,
    to_upstream_request,
    unwrap_reasoning,
    wrap_reasoning,
)
from codexgate.wire.responses import parse_request
from tests.support.codex_requests import (
    APPLY_PATCH,
    CODEX_TOOLS,
    EXEC_COMMAND,
    TOOL_SEARCH,
    codex_body,
    text_message,
)

Event = dict[str, Any]
UPSTREAM = "openai"
FIXTURES_DIR = Path(__file__).parents[2] / "fixtures" / "responses_streams"
FIXTURES = sorted(p.name for p in FIXTURES_DIR.glob("*.sse"))
SPLITS = [1, 13, None]  # None: the whole body in one piece


def upstream(body: dict[str, Any], tool_format: ToolFormat = "functions", **options: Any) -> UpstreamRequest:
    return to_upstream_request(
        parse_request(body), "up-model", upstream=UPSTREAM, tool_format=tool_format, **options
    )


def by_type(items: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [item for item in items if item.get("type") == kind]


# -- the request: fields


def test_the_body_streams_unstored_with_the_fields_a_responses_server_takes() -> None:
    body = upstream(
        codex_body(
            temperature=0.2, top_p=0.9, max_output_tokens=900, metadata={"k": "v"}, service_tier="priority",
            user="u1", truncation="auto", reasoning={"effort": "low", "summary": "auto", "context": "all_turns"},
            text={"verbosity": "low", "format": {"type": "text"}},
        )
    ).body  # fmt: skip
    assert body["model"] == "up-model" and body["stream"] is True and body["store"] is False
    assert body["reasoning"] == {"effort": "low", "summary": "auto"}  # Codex's `context` left out
    assert body["include"] == ["reasoning.encrypted_content"]
    assert body["text"] == {"verbosity": "low", "format": {"type": "text"}}
    for name, value in [("temperature", 0.2), ("top_p", 0.9), ("max_output_tokens", 900), ("metadata", {"k": "v"}),
                        ("service_tier", "priority"), ("user", "u1"), ("truncation", "auto"),
                        ("prompt_cache_key", "019a8c1e-thread"), ("tool_choice", "auto"),
                        ("parallel_tool_calls", True)]:  # fmt: skip
        assert body[name] == value, name
    assert "client_metadata" not in body and "previous_response_id" not in body


def test_include_only_when_reasoning_is_asked_and_the_clients_include_is_not_passed() -> None:
    body = upstream({"model": "m", "input": "hi", "include": ["web_search_call.results"]}).body
    assert "include" not in body and "reasoning" not in body


def test_stop_is_left_to_the_gateway() -> None:
    body = upstream({"model": "m", "input": "hi", "stop": ["END"]}).body
    assert "stop" not in body


@pytest.mark.parametrize(
    ("field", "value"),
    [("seed", 7), ("frequency_penalty", 0.5), ("presence_penalty", 0.1), ("logit_bias", {"50256": -100})],
)
def test_fields_the_responses_api_cannot_carry_are_refused_naming_them(field: str, value: Any) -> None:
    with pytest.raises(InvalidRequest) as refused:
        upstream({"model": "m", "input": "hi", field: value})
    assert refused.value.param == field and field in refused.value.message


def test_extra_body_is_merged_under_the_clients_values() -> None:
    body = upstream(
        {"model": "m", "input": "hi", "temperature": 0.1},
        extra_body={"temperature": 0.7, "top_k": 20, "reasoning": {"effort": "high"}},
    ).body
    assert body["temperature"] == 0.1 and body["top_k"] == 20
    assert body["reasoning"] == {"effort": "high"}  # the client asked for none
    assert body["include"] == ["reasoning.encrypted_content"]


# -- the request: tools


def test_functions_format_offers_every_tool_as_a_function_under_its_flat_name() -> None:
    request = upstream(codex_body())
    tools = {tool["name"]: tool for tool in request.body["tools"]}
    assert list(tools) == [
        "exec_command", "write_stdin", "apply_patch", "multi_agent_v1__spawn_agent", "multi_agent_v1__wait_agent",
        "tool_search",
    ]  # fmt: skip
    assert all(tool["type"] == "function" and tool["strict"] is False for tool in tools.values())
    assert tools["exec_command"]["parameters"] == EXEC_COMMAND["parameters"]
    patch = tools["apply_patch"]
    assert patch["parameters"]["required"] == ["input"]
    assert APPLY_PATCH["format"]["definition"].strip() in patch["description"]  # the grammar, for the model
    spawn = tools["multi_agent_v1__spawn_agent"]["parameters"]["properties"]["message"]
    assert "encrypted" not in spawn  # not JSON Schema: strict servers refuse it
    assert tools["tool_search"]["parameters"] == TOOL_SEARCH["parameters"]


def test_functions_format_leaves_hosted_tools_out_with_a_notice() -> None:
    request = upstream(codex_body(instructions="Be brief."))
    assert all(tool["type"] == "function" for tool in request.body["tools"])
    notice = unavailable_notice(["web_search"])
    assert notice is not None and request.body["instructions"] == f"Be brief.\n\n{notice}"
    assert request.catalogue.unavailable == ["web_search"]


def test_native_format_sends_the_tools_as_the_client_did() -> None:
    request = upstream(codex_body(), "native")
    assert request.body["tools"] == CODEX_TOOLS
    assert "instructions" not in request.body
    assert request.catalogue.unavailable == []  # nothing left out: no notice in the metadata


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", "auto"),
        ("required", "required"),
        ({"type": "function", "name": "spawn_agent", "namespace": "multi_agent_v1"},
         {"type": "function", "name": "multi_agent_v1__spawn_agent"}),
        ({"type": "custom", "name": "apply_patch"}, {"type": "function", "name": "apply_patch"}),
        ({"type": "allowed_tools", "mode": "required", "tools": [{"type": "custom", "name": "apply_patch"}]},
         "required"),
    ],
)  # fmt: skip
def test_functions_format_names_the_chosen_tool_by_its_flat_name(choice: Any, expected: Any) -> None:
    assert upstream(codex_body(tool_choice=choice)).body["tool_choice"] == expected
    assert upstream(codex_body(tool_choice=choice), "native").body["tool_choice"] == choice


def test_functions_format_offers_only_the_tools_allowed_tools_allows() -> None:
    choice = {
        "type": "allowed_tools",
        "mode": "auto",
        "tools": [{"type": "function", "name": "exec_command"}],
    }
    body = upstream(codex_body(tool_choice=choice)).body
    assert [tool["name"] for tool in body["tools"]] == ["exec_command"] and body["tool_choice"] == "auto"


@pytest.mark.parametrize(
    ("choice", "param"),
    [
        ({"type": "web_search"}, "tool_choice.type"),
        ({"type": "function", "name": "not_offered"}, "tool_choice.name"),
        (
            {"type": "allowed_tools", "mode": "required", "tools": [{"type": "web_search"}]},
            "tool_choice.tools",
        ),
    ],
)
def test_functions_format_refuses_a_choice_of_a_tool_not_offered(choice: Any, param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        upstream(codex_body(tool_choice=choice))
    assert info.value.param == param
    assert upstream(codex_body(tool_choice=choice), "native").body["tool_choice"] == choice


def test_responses_lite_tools_become_top_level_tools_and_the_item_is_left_out() -> None:
    lite_tools = [
        {"type": "namespace", "name": "functions", "tools": [
            {"type": "custom", "name": "exec", "description": "Run JavaScript.",
             "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}},
            {"type": "function", "name": "wait", "parameters": {"type": "object", "properties": {}}},
        ]},
    ]  # fmt: skip
    body = {
        "model": "m",
        "input": [{"type": "additional_tools", "id": "at_1", "role": "developer", "tools": lite_tools},
                  text_message("user", "hi")],
        "parallel_tool_calls": False,
        "reasoning": {"effort": "low", "context": "all_turns"},
    }  # fmt: skip
    functions = upstream(body).body
    assert [t["name"] for t in functions["tools"]] == ["functions__exec", "functions__wait"]
    assert functions["parallel_tool_calls"] is False
    native = upstream(body, "native").body
    assert native["tools"] == lite_tools
    for sent in (functions, native):
        assert [item["type"] for item in sent["input"]] == ["message"]
        assert sent["reasoning"] == {"effort": "low"}


# -- the request: items


def test_functions_format_rewrites_the_history_to_match_its_tools() -> None:
    items = upstream(codex_body()).body["input"]
    calls = by_type(items, "function_call")
    assert [(c["name"], c["call_id"]) for c in calls] == [
        ("exec_command", "call_exec1"),
        ("multi_agent_v1__spawn_agent", "call_spawn1"),
        ("apply_patch", "call_patch1"),
        ("tool_search", "call_search1"),
    ]
    patch = orjson.loads(calls[2]["arguments"])
    assert patch == {"input": "*** Begin Patch\n*** Update File: app.py\n@@\n-a\n+b\n*** End Patch"}
    assert orjson.loads(calls[3]["arguments"]) == {"query": "calendar", "limit": 3}
    outputs = {o["call_id"]: o["output"] for o in by_type(items, "function_call_output")}
    assert outputs["call_exec1"] == "1 failed, 41 passed"
    assert outputs["call_patch1"] == "Success."  # a custom tool's output, as a function's
    assert outputs["call_search1"].startswith("Tools found:\n- list_events")
    assert not by_type(items, "custom_tool_call") and not by_type(items, "tool_search_call")
    messages = by_type(items, "message")
    assistant = [m["content"] for m in messages if m["role"] == "assistant"]
    assert assistant == [
        "[web_search ran on the server (completed): pytest fixtures scope]",
        "The test passes now.",
    ]
    agent = [m["content"] for m in messages if m["role"] == "user" and "agent_7" in str(m["content"])]
    assert agent == ["[Message from agent_7 to root]\nReview done: looks fine."]


def test_item_ids_and_unknown_keys_never_reach_the_upstream() -> None:
    for tool_format in ("functions", "native"):
        items = upstream(codex_body(), tool_format).body["input"]
        for item in items:
            if item["type"] == "web_search_call":
                assert item["id"] == "ws_up1"  # the upstream's own, passed back whole (native)
                continue
            assert "id" not in item, item
            assert "internal_chat_message_metadata_passthrough" not in item
            assert "status" not in item or item["type"].startswith("tool_search")
        assert not any(item.get("name") == "apply_patch" and "output" in item for item in items)


def test_native_format_keeps_the_items_as_the_client_sent_them() -> None:
    items = upstream(codex_body(), "native").body["input"]
    kinds = [item["type"] for item in items]
    assert kinds == [
        "message",
        "message",
        "message",
        "message",
        "function_call",
        "function_call_output",
        "function_call",
        "function_call_output",
        "custom_tool_call",
        "custom_tool_call_output",
        "tool_search_call",
        "tool_search_output",
        "web_search_call",
        "agent_message",
        "message",
        "message",
    ]  # fmt: skip  (the foreign reasoning item is left out)
    spawn = items[6]
    assert spawn == {
        "type": "function_call", "name": "spawn_agent", "namespace": "multi_agent_v1",
        "arguments": '{"message":"review app.py"}', "call_id": "call_spawn1",
    }  # fmt: skip
    assert items[7]["output"] == [{"type": "input_text", "text": "agent 7 spawned"}]
    assert items[8]["input"].startswith("*** Begin Patch") and "name" not in items[9]
    assert items[14]["phase"] == "final_answer"
    assert items[14]["content"] == [{"type": "output_text", "text": "The test passes now."}]


def test_an_assistant_message_is_plain_text_in_functions_format() -> None:
    message = {"type": "message", "role": "assistant", "content": [
        {"type": "output_text", "text": "one", "annotations": []}, {"type": "refusal", "refusal": "two"},
    ]}  # fmt: skip
    [sent] = upstream({"model": "m", "input": [message]}).body["input"]
    assert sent == {"type": "message", "role": "assistant", "content": "one\ntwo"}


def test_calls_and_outputs_are_paired_as_the_responses_api_requires() -> None:
    body = {
        "model": "m",
        "tools": [EXEC_COMMAND],
        "input": [
            text_message("user", "go"),
            {"type": "function_call", "name": "exec_command", "arguments": "{}", "call_id": "c1"},
            {"type": "function_call", "name": "exec_command", "arguments": "{}", "call_id": "c2"},
            {"type": "function_call_output", "call_id": "c2", "output": "two"},
            {"type": "function_call_output", "call_id": "c9", "output": "orphan"},
            text_message("user", "and?"),
        ],
    }
    for tool_format in ("functions", "native"):
        items = upstream(body, tool_format).body["input"]
        assert [(i["type"], i.get("call_id")) for i in items] == [
            ("message", None),
            ("function_call", "c1"),
            ("function_call_output", "c1"),
            ("function_call", "c2"),
            ("function_call_output", "c2"),
            ("message", None),
            ("message", None),
        ]
        assert items[2]["output"] == MISSING_OUTPUT
        assert items[5] == {"type": "message", "role": "user", "content": "Tool output for call c9:\norphan"}


def test_compaction_is_refused_in_functions_format_and_passed_in_native() -> None:
    body = {
        "model": "m",
        "input": [text_message("user", "hi"), {"type": "compaction", "encrypted_content": "x"}],
    }
    with pytest.raises(InvalidRequest) as refused:
        upstream(body)
    assert refused.value.param == "input[1]"
    assert upstream(body, "native").body["input"][1] == {"type": "compaction", "encrypted_content": "x"}


# -- reasoning: the upstream's own blob goes back, anything else is left out


def reasoning_item(blob: str | None, text: str = "Thinking.", item_id: str = "rs_gw1") -> dict[str, Any]:
    item: dict[str, Any] = {
        "type": "reasoning",
        "id": item_id,
        "summary": [{"type": "summary_text", "text": text}],
    }
    if blob is not None:
        item["encrypted_content"] = blob
    return item


def test_wrapping_names_the_upstream_and_survives_colons_in_names() -> None:
    wrapped = wrap_reasoning("lab:gpu", "rs_1", "summary", "gAAAA:blob")
    own = unwrap_reasoning("lab:gpu", wrapped)
    assert own is not None and (own.item_id, own.text_field, own.blob) == ("rs_1", "summary", "gAAAA:blob")
    assert unwrap_reasoning("lab", wrapped) is None
    assert unwrap_reasoning("lab:gpu", "gAAAA:blob") is None
    assert unwrap_reasoning("lab:gpu", None) is None


def test_the_upstreams_own_blob_goes_back_as_it_was() -> None:
    items = [
        text_message("user", "hi"),
        reasoning_item(wrap_reasoning(UPSTREAM, "rs_up1", "summary", "gAAAAABopaque")),
        reasoning_item(wrap_reasoning(UPSTREAM, "rs_up2", "summary", "gAAAAABquiet"), text=""),
        text_message("assistant", "hello"),
    ]
    for tool_format in ("functions", "native"):
        sent = upstream({"model": "m", "input": items}, tool_format).body["input"]
        reasoning = by_type(sent, "reasoning")
        # With a blob, no id: OpenAI pairs an id with the id of the item that followed.
        assert reasoning == [
            {"type": "reasoning", "encrypted_content": "gAAAAABopaque",
             "summary": [{"type": "summary_text", "text": "Thinking."}]},
            {"type": "reasoning", "encrypted_content": "gAAAAABquiet", "summary": []},
        ]  # fmt: skip


def test_reasoning_without_a_blob_goes_back_as_text_with_the_upstreams_id() -> None:
    items = [
        reasoning_item(wrap_reasoning(UPSTREAM, "rs_v1", "content", None), text="We need the config."),
        reasoning_item(wrap_reasoning(UPSTREAM, "rs_o1", "summary", None), text="Listing files."),
        reasoning_item(wrap_reasoning(UPSTREAM, "rs_e1", "summary", None), text=""),  # nothing to give
    ]
    sent = by_type(upstream({"model": "m", "input": items}).body["input"], "reasoning")
    assert sent == [
        {"type": "reasoning", "id": "rs_v1", "summary": [],
         "content": [{"type": "reasoning_text", "text": "We need the config."}]},
        {"type": "reasoning", "id": "rs_o1", "summary": [{"type": "summary_text", "text": "Listing files."}]},
    ]  # fmt: skip


@pytest.mark.parametrize(
    "blob",
    [
        None,  # OpenAI would look it up by id, and nothing is stored
        "gAAAAABanother-servers-or-openais-own-blob-0123456789",
        encode_reasoning("the chat backend's reasoning text"),
        wrap_reasoning("another-upstream", "rs_x", "summary", "gAAAAABx"),
        cut_marker("rs_cut", ["msg_1"])["encrypted_content"],
    ],
)
def test_foreign_reasoning_is_left_out_whole(blob: str | None) -> None:
    for tool_format in ("functions", "native"):
        request = upstream(
            {"model": "m", "input": [reasoning_item(blob), text_message("user", "hi")]}, tool_format
        )
        assert [item["type"] for item in request.body["input"]] == ["message"]
        assert request.dropped_items == ["reasoning"]


def test_items_a_failure_cut_short_are_left_out() -> None:
    items = [
        text_message("user", "do it", id="msg_u"),
        reasoning_item(wrap_reasoning(UPSTREAM, "rs_up", "summary", "gAAAAABkept"), item_id="rs_a"),
        text_message("assistant", "Working on", id="msg_a"),
        reasoning_item(None, text="", item_id="rs_b"),
        cut_marker("rs_m", ["rs_a", "msg_a", "msg_u"]),
        text_message("user", "again"),
    ]
    sent = upstream({"model": "m", "input": items}).body["input"]
    # The cut answer and its marker are gone; the user's own message, though named, stays.
    assert sent == [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "do it"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "again"}]},
    ]


def test_values_of_chat_sampling_fields_that_change_nothing_pass() -> None:
    body = upstream(
        {"model": "m", "input": "hi", "frequency_penalty": 0, "presence_penalty": 0.0, "logit_bias": {}}
    )
    assert not {"frequency_penalty", "presence_penalty", "logit_bias"} & set(body.body)
