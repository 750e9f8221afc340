"""The Responses request's validation (wire/responses.py): what a tool, a tool choice or a field
must have to be read, each refusal naming the parameter; and what Codex sends still passes."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from codexgate.errors import InvalidRequest
from codexgate.wire.responses import parse_request
from tests.support.codex_requests import codex_body


def body(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "input": "hi", **fields}


def refused_param(data: dict[str, Any]) -> str | None:
    with pytest.raises(InvalidRequest) as info:
        parse_request(data)
    assert info.value.status == 400 and info.value.code == "invalid_request_error"
    return info.value.param


@pytest.mark.parametrize(
    "tools,param",
    [
        ([{"type": "function"}], "tools[0].name"),
        ([{"type": "function", "name": ""}], "tools[0].name"),
        ([{"type": "function", "name": 3}], "tools[0].name"),
        ([{"type": "function", "function": {"description": "no name"}}], "tools[0].name"),
        ([{"type": "function", "name": "a"}, {"type": "custom"}], "tools[1].name"),
        ([{"type": "custom", "name": "c", "format": {"syntax": "lark"}}], "tools[0].format.type"),
        ([{"type": "custom", "name": "c", "format": {"type": "regexp"}}], "tools[0].format.type"),
        (
            [{"type": "custom", "name": "c", "format": {"type": "grammar", "syntax": "lark"}}],
            "tools[0].format.definition",
        ),
        (
            [{"type": "custom", "name": "c", "format": {"type": "grammar", "definition": "start: x"}}],
            "tools[0].format.syntax",
        ),
        ([{"type": "namespace", "tools": []}], "tools[0].name"),
        ([{"type": "namespace", "name": "ns", "tools": [{"type": "function"}]}], "tools[0].tools[0].name"),
        ([{"type": "namespace", "name": "ns", "tools": [{"description": "x"}]}], "tools[0].tools[0].name"),
        ([{"type": "namespace", "name": "ns", "tools": [{"type": "custom"}]}], "tools[0].tools[0].name"),
        ([{"type": "tool_search", "parameters": "query"}], "tools[0].parameters"),
    ],
)
def test_a_tool_without_what_it_is_read_by_is_refused_naming_it(tools: list[Any], param: str) -> None:
    assert refused_param(body(tools=tools)) == param


def test_tools_of_additional_tools_items_are_held_to_the_same() -> None:
    item = {
        "type": "additional_tools",
        "tools": [{"type": "namespace", "name": "f", "tools": [{"type": "custom"}]}],
    }
    assert refused_param(body(input=[item])) == "input[0].tools[0].tools[0].name"


def test_a_function_named_in_its_chat_shape_and_kinds_the_gateway_does_not_read_pass() -> None:
    parse_request(body(tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}]))
    parse_request(body(tools=[{"type": "web_search"}, {"type": "mcp"}, {"type": "some_new_kind"}]))
    parse_request(body(tools=[{"type": "custom", "name": "c", "format": {"type": "text"}}]))


@pytest.mark.parametrize(
    "choice,param",
    [
        ("sometimes", "tool_choice"),
        (3, "tool_choice"),
        ({"name": "f"}, "tool_choice.type"),
        ({"type": "function"}, "tool_choice.name"),
        ({"type": "custom", "name": 5}, "tool_choice.name"),
        ({"type": "allowed_tools", "mode": "auto"}, "tool_choice.tools"),
        ({"type": "allowed_tools", "mode": "maybe", "tools": []}, "tool_choice.mode"),
        ({"type": "allowed_tools", "tools": [{"name": "f"}]}, "tool_choice.tools[0]"),
    ],
)
def test_a_tool_choice_that_names_nothing_readable_is_refused(choice: Any, param: str) -> None:
    assert refused_param(body(tool_choice=choice)) == param


@pytest.mark.parametrize(
    "fields,param",
    [
        ({"include": "reasoning.encrypted_content"}, "include"),
        ({"include": [5]}, "include[0]"),
        ({"truncation": "sometimes"}, "truncation"),
        ({"truncation": True}, "truncation"),
        ({"top_logprobs": 21}, "top_logprobs"),
        ({"top_logprobs": "3"}, "top_logprobs"),
        ({"max_tool_calls": 0}, "max_tool_calls"),
        ({"stream_options": {"include_obfuscation": "no"}}, "stream_options.include_obfuscation"),
        ({"stream_options": []}, "stream_options"),
        ({"safety_identifier": 7}, "safety_identifier"),
        ({"prompt_cache_retention": 24}, "prompt_cache_retention"),
        ({"presence_penalty": "high"}, "presence_penalty"),
        ({"frequency_penalty": True}, "frequency_penalty"),
        ({"logit_bias": [1]}, "logit_bias"),
        ({"text": {"format": {"name": "x"}}}, "text.format.type"),
        ({"text": {"format": {"type": "grammar"}}}, "text.format.type"),
    ],
)
def test_fields_without_a_canonical_slot_are_still_type_checked(fields: dict[str, Any], param: str) -> None:
    assert refused_param(body(**fields)) == param


@pytest.mark.parametrize(
    "fields,param",
    [
        ({"include": ["reasoning.encrypted_content", "message.output_text.logprobs"]}, "include[1]"),
        ({"top_logprobs": 5}, "top_logprobs"),
    ],
)
def test_logprobs_no_backend_carries_back_are_refused_not_left_out(
    fields: dict[str, Any], param: str
) -> None:
    assert refused_param(body(**fields)) == param


@pytest.mark.parametrize(
    "part,param",
    [
        ({"type": "input_file", "file_data": 5}, "input[0].content[0].file_data"),
        ({"type": "input_file", "filename": ["a"]}, "input[0].content[0].filename"),
        ({"type": "input_file", "file_url": {}}, "input[0].content[0].file_url"),
        ({"type": "input_image", "image_url": 5}, "input[0].content[0].image_url"),
        ({"type": "input_image", "file_id": 5}, "input[0].content[0].file_id"),
    ],
)
def test_file_and_image_parts_have_string_fields(part: dict[str, Any], param: str) -> None:
    assert refused_param(body(input=[{"role": "user", "content": [part]}])) == param


def test_every_field_codex_sends_passes_and_stays_where_backends_read_it() -> None:
    data = codex_body(
        service_tier="priority",
        text={
            "verbosity": "low",
            "format": {
                "type": "json_schema",
                "name": "codex_output_schema",
                "strict": True,
                "schema": {"type": "object"},
            },
        },
        reasoning={"effort": "low", "summary": "auto", "context": "all_turns"},
    )
    req = parse_request(data)
    assert req.extra["include"] == ["reasoning.encrypted_content"]
    assert req.extra["client_metadata"]["session_id"] == "019a8c1e-thread"
    parse_request(codex_body(parallel_tool_calls=False, generate=False))


def test_the_spec_fields_are_accepted_with_their_documented_values() -> None:
    req = parse_request(
        body(
            truncation="auto",
            top_logprobs=0,
            max_tool_calls=3,
            stream_options={"include_obfuscation": False},
            safety_identifier="user-1",
            prompt_cache_retention="24h",
            include=["message.input_image.image_url"],
            presence_penalty=0.5,
            frequency_penalty=0,
        )
    )
    assert req.extra["truncation"] == "auto" and req.extra["safety_identifier"] == "user-1"


def test_tools_checked_lately_are_shared_by_the_next_conversation() -> None:
    # Every Codex session sends the same tools, each perhaps with its own MCP tools besides: a
    # tool checked lately is one comparison, and the request holds the tool checked before
    # (what is made of it is then found by identity).
    first = parse_request(orjson.loads(orjson.dumps(codex_body())))
    own = {"type": "function", "name": "mcp__notes__search", "parameters": {"type": "object"}}
    again = parse_request(
        orjson.loads(orjson.dumps({**codex_body(), "tools": [*codex_body()["tools"], own]}))
    )
    assert first.tools and all(a is b for a, b in zip(again.tools, first.tools, strict=False))
    assert again.tools[-1] == own


def test_a_tool_unlike_those_seen_is_checked_in_full() -> None:
    parse_request(orjson.loads(orjson.dumps(codex_body())))
    tools = orjson.loads(orjson.dumps(codex_body()["tools"]))
    index = next(i for i, tool in enumerate(tools) if tool["type"] == "function")
    tools[index]["parameters"] = "not a schema"  # a name seen lately, a tool not
    assert refused_param(body(tools=tools)) == f"tools[{index}].parameters"
