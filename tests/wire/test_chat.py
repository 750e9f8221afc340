"""The chat face's request validation (wire/chat.py): every wrong shape is a 400 naming the
field, every field the gateway cannot carry is refused by name, unknown fields pass."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from codexgate.errors import Code, InvalidRequest
from codexgate.wire.chat import validate_chat_request
from codexgate.wire.responses import MAX_DEPTH

MISSING = object()  # a value that deletes the key
# Fields the gateway cannot carry, with the values that ask for nothing it would drop.
BENIGN = {"n": 1, "logprobs": False, "top_logprobs": 0, "modalities": ["text"], "store": False, "audio": None}


def full_body() -> dict[str, Any]:
    """A request using every message role, part kind, tool kind and most fields."""
    return {
        "model": "qwen3-coder",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": [{"type": "text", "text": "Use tools."}]},
            {
                "role": "user",
                "name": "ada",
                "content": [
                    {"type": "text", "text": "What is in this picture?"},
                    {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "low"}},
                ],
            },
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "Looking."}, {"type": "refusal", "refusal": "No."}],
                "refusal": None,
                "reasoning_content": "The user wants a description.",
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{}"}},
                    {
                        "id": "call_2",
                        "type": "custom",
                        "custom": {"name": "apply_patch", "input": "*** Begin"},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "a cat"},
            {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "Done!"}]},
            {"role": "assistant", "content": None, "function_call": {"name": "legacy", "arguments": "{}"}},
            {"role": "function", "name": "legacy", "content": "ok"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "read",
                    "description": "Read a file.",
                    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
                    "strict": True,
                },
            },
            {
                "type": "custom",
                "custom": {
                    "name": "apply_patch",
                    "description": "Edit files.",
                    "format": {"type": "grammar", "grammar": {"definition": "start: /.+/", "syntax": "lark"}},
                },
            },
        ],
        "functions": [{"name": "legacy", "parameters": {"type": "object"}}],
        "tool_choice": {
            "type": "allowed_tools",
            "allowed_tools": {
                "mode": "auto",
                "tools": [{"type": "function", "function": {"name": "read"}}],
            },
        },
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": {"type": "object"}, "strict": True},
        },
        "stream": True,
        "stream_options": {"include_usage": True},
        "stop": ["END"],
        "metadata": {"ticket": "42"},
        "logit_bias": {"50256": -100},
        "temperature": 0.2,
        "max_completion_tokens": 500,
        **BENIGN,
        "some_new_field": {"anything": [1, 2]},
    }


def set_path(body: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of `body` with `path` (`messages[2].content[0].type`) set, or deleted (MISSING)."""
    body = copy.deepcopy(body)
    steps: list[str | int] = [
        int(index) if index else name for name, index in re.findall(r"([^.\[\]]+)|\[(\d+)\]", path)
    ]
    target: Any = body
    for step in steps[:-1]:
        target = target[step]
    if value is MISSING:
        del target[steps[-1]]
    else:
        target[steps[-1]] = value
    return body


def refused(body: dict[str, Any]) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        validate_chat_request(body)
    assert caught.value.status == 400 and caught.value.code == Code.INVALID_REQUEST
    return caught.value


def test_a_request_using_every_form_passes() -> None:
    validate_chat_request(full_body())


def test_the_smallest_request_passes() -> None:
    validate_chat_request({"model": "m", "messages": [{"role": "user", "content": "hi"}]})


def test_unknown_fields_are_not_an_error_anywhere() -> None:
    body = full_body()
    body["top_k"] = 20
    body["messages"][0]["cache_control"] = {"type": "ephemeral"}
    body["messages"][2]["content"][0]["cache_control"] = {"type": "ephemeral"}
    body["tools"][0]["function"]["x-extension"] = 1
    validate_chat_request(body)


def test_benign_values_of_refusable_fields_pass() -> None:
    body = full_body() | BENIGN | {"prediction": None, "web_search_options": None}
    validate_chat_request(body)


@pytest.mark.parametrize(
    ("path", "value", "param"),
    [
        ("model", MISSING, "model"),
        ("model", 3, "model"),
        ("model", "", "model"),
        ("model", "a\nb", "model"),
        ("messages", MISSING, "messages"),
        ("messages", [], "messages"),
        ("messages", {"role": "user"}, "messages"),
        ("messages[0]", "hi", "messages[0]"),
        ("messages[0].role", "robot", "messages[0].role"),
        ("messages[0].role", MISSING, "messages[0].role"),
        ("messages[0].content", MISSING, "messages[0].content"),
        ("messages[0].content", 5, "messages[0].content"),
        ("messages[1].content[0].type", "image_url", "messages[1].content[0].type"),
        ("messages[1].content[0].text", 5, "messages[1].content[0].text"),
        ("messages[2].name", 7, "messages[2].name"),
        ("messages[2].content", MISSING, "messages[2].content"),
        ("messages[2].content[0]", "text", "messages[2].content[0]"),
        ("messages[2].content[0].type", MISSING, "messages[2].content[0].type"),
        ("messages[2].content[0].type", "video", "messages[2].content[0].type"),
        ("messages[2].content[0].text", None, "messages[2].content[0].text"),
        ("messages[2].content[1].image_url", "https://example.com/a.png", "messages[2].content[1].image_url"),
        ("messages[2].content[1].image_url.url", 5, "messages[2].content[1].image_url.url"),
        ("messages[2].content[1].image_url.url", MISSING, "messages[2].content[1].image_url.url"),
        ("messages[2].content[1].image_url.detail", 1, "messages[2].content[1].image_url.detail"),
        ("messages[3].content", 5, "messages[3].content"),
        ("messages[3].content[0].type", "image_url", "messages[3].content[0].type"),
        ("messages[3].content[1].refusal", 5, "messages[3].content[1].refusal"),
        ("messages[3].refusal", 5, "messages[3].refusal"),
        ("messages[3].reasoning_content", ["a"], "messages[3].reasoning_content"),
        ("messages[3].reasoning", {"text": "a"}, "messages[3].reasoning"),
        ("messages[3].tool_calls", {}, "messages[3].tool_calls"),
        ("messages[3].tool_calls[0]", "call", "messages[3].tool_calls[0]"),
        ("messages[3].tool_calls[0].id", MISSING, "messages[3].tool_calls[0].id"),
        ("messages[3].tool_calls[0].type", "code_interpreter", "messages[3].tool_calls[0].type"),
        ("messages[3].tool_calls[0].function", MISSING, "messages[3].tool_calls[0].function"),
        ("messages[3].tool_calls[0].function.name", 1, "messages[3].tool_calls[0].function.name"),
        ("messages[3].tool_calls[0].function.arguments", 1, "messages[3].tool_calls[0].function.arguments"),
        (
            "messages[3].tool_calls[0].function.arguments",
            MISSING,
            "messages[3].tool_calls[0].function.arguments",
        ),
        ("messages[3].tool_calls[1].custom", MISSING, "messages[3].tool_calls[1].custom"),
        ("messages[3].tool_calls[1].custom.input", {}, "messages[3].tool_calls[1].custom.input"),
        ("messages[4].tool_call_id", MISSING, "messages[4].tool_call_id"),
        ("messages[4].tool_call_id", 1, "messages[4].tool_call_id"),
        ("messages[4].content", MISSING, "messages[4].content"),
        ("messages[5].content[0].type", "image_url", "messages[5].content[0].type"),
        ("messages[6].function_call", "legacy", "messages[6].function_call"),
        ("messages[6].function_call.name", MISSING, "messages[6].function_call.name"),
        ("messages[7].name", MISSING, "messages[7].name"),
        ("messages[7].content", ["ok"], "messages[7].content"),
        ("tools", {}, "tools"),
        ("tools[0]", "read", "tools[0]"),
        ("tools[0].type", MISSING, "tools[0].type"),
        ("tools[0].function", MISSING, "tools[0].function"),
        ("tools[0].function.name", MISSING, "tools[0].function.name"),
        ("tools[0].function.parameters", "object", "tools[0].function.parameters"),
        ("tools[0].function.strict", "yes", "tools[0].function.strict"),
        ("tools[1].custom.name", 1, "tools[1].custom.name"),
        ("tools[1].custom.format", "lark", "tools[1].custom.format"),
        ("tools[1].custom.format.type", "regex", "tools[1].custom.format.type"),
        ("tools[1].custom.format.grammar", MISSING, "tools[1].custom.format.grammar"),
        ("tools[1].custom.format.grammar.definition", MISSING, "tools[1].custom.format.grammar.definition"),
        ("tools[1].custom.format.grammar.syntax", 1, "tools[1].custom.format.grammar.syntax"),
        ("functions[0]", "legacy", "functions[0]"),
        ("functions[0].name", MISSING, "functions[0].name"),
        ("tool_choice", "sometimes", "tool_choice"),
        ("tool_choice", 1, "tool_choice"),
        ("tool_choice", {"type": "function"}, "tool_choice.function"),
        ("tool_choice", {"type": "function", "function": {}}, "tool_choice.function.name"),
        ("tool_choice", {"type": "custom", "custom": {"name": 1}}, "tool_choice.custom.name"),
        ("tool_choice", {"type": "web_search"}, "tool_choice.type"),
        ("tool_choice.allowed_tools.mode", "none", "tool_choice.allowed_tools.mode"),
        ("tool_choice.allowed_tools.tools", MISSING, "tool_choice.allowed_tools.tools"),
        ("tool_choice.allowed_tools.tools[0].type", "mcp", "tool_choice.allowed_tools.tools[0].type"),
        ("function_call", "required", "function_call"),
        ("function_call", {"name": 1}, "function_call.name"),
        ("response_format", "json", "response_format"),
        ("response_format.type", "xml", "response_format.type"),
        ("response_format.json_schema", MISSING, "response_format.json_schema"),
        ("response_format.json_schema.name", MISSING, "response_format.json_schema.name"),
        ("response_format.json_schema.schema", "object", "response_format.json_schema.schema"),
        ("response_format.json_schema.strict", 1, "response_format.json_schema.strict"),
        ("stream", "yes", "stream"),
        ("stream_options", True, "stream_options"),
        ("stream_options.include_usage", "yes", "stream_options.include_usage"),
        ("stop", 3, "stop"),
        ("stop", ["a", ""], "stop"),
        ("stop", ["a", "b", "c", "d", "e"], "stop"),
        ("metadata", [], "metadata"),
        ("metadata.ticket", 42, "metadata.ticket"),
        ("metadata", {f"k{i}": "v" for i in range(17)}, "metadata"),
        ("logit_bias", [], "logit_bias"),
        ("logit_bias.50256", "ban", "logit_bias.50256"),
        ("temperature", "hot", "temperature"),
        ("temperature", True, "temperature"),
        ("top_p", "1", "top_p"),
        ("seed", 1.5, "seed"),
        ("max_completion_tokens", 0, "max_completion_tokens"),
        ("max_completion_tokens", True, "max_completion_tokens"),
        ("max_tokens", -1, "max_tokens"),
        ("parallel_tool_calls", "no", "parallel_tool_calls"),
        ("reasoning_effort", 1, "reasoning_effort"),
        ("verbosity", 1, "verbosity"),
        ("user", 1, "user"),
        ("safety_identifier", 1, "safety_identifier"),
        ("prompt_cache_key", 1, "prompt_cache_key"),
        ("service_tier", 1, "service_tier"),
        ("frequency_penalty", "0", "frequency_penalty"),
        ("presence_penalty", [], "presence_penalty"),
        ("n", "1", "n"),
        ("modalities", "text", "modalities"),
        ("modalities", ["text", 1], "modalities[1]"),
        ("top_logprobs", -1, "top_logprobs"),
    ],
)
def test_a_wrong_shape_is_a_400_naming_the_field(path: str, value: Any, param: str) -> None:
    assert refused(set_path(full_body(), path, value)).param == param


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("n", 2),
        ("n", 0),
        ("audio", {"voice": "alloy", "format": "wav"}),
        ("modalities", ["text", "audio"]),
        ("logprobs", True),
        ("top_logprobs", 3),
        ("prediction", {"type": "content", "content": "old code"}),
        ("web_search_options", {}),
        ("store", True),
    ],
)
def test_what_the_gateway_cannot_carry_is_refused_by_name(field: str, value: Any) -> None:
    assert refused(full_body() | {field: value}).param == field


@pytest.mark.parametrize(
    ("part", "param"),
    [
        (
            {"type": "input_audio", "input_audio": {"data": "UklGR", "format": "wav"}},
            "messages[2].content[1]",
        ),
        ({"type": "file", "file": {"file_id": "file-1"}}, "messages[2].content[1]"),
    ],
)
def test_audio_and_file_parts_are_refused_naming_the_part(part: dict[str, Any], param: str) -> None:
    error = refused(set_path(full_body(), "messages[2].content[1]", part))
    assert error.param == param
    assert part["type"].split("_")[-1] in error.message  # says which kind could not be carried


def test_an_audio_reference_on_an_assistant_message_is_refused() -> None:
    body = set_path(full_body(), "messages[3].audio", {"id": "audio_1"})
    assert refused(body).param == "messages[3].audio"


def test_tools_of_other_types_are_refused_naming_the_type() -> None:
    body = set_path(full_body(), "tools[1]", {"type": "web_search_preview"})
    error = refused(body)
    assert error.param == "tools[1].type" and "web_search_preview" in error.message


def test_a_tool_call_without_a_type_is_a_function_call() -> None:
    validate_chat_request(set_path(full_body(), "messages[3].tool_calls[0].type", MISSING))


def test_call_arguments_may_be_an_object() -> None:
    validate_chat_request(
        set_path(full_body(), "messages[3].tool_calls[0].function.arguments", {"path": "a"})
    )


def test_an_assistant_message_may_hold_only_calls_and_a_function_message_no_content() -> None:
    body = set_path(full_body(), "messages[3].content", MISSING)
    validate_chat_request(set_path(body, "messages[7].content", None))


def nested(depth: int) -> Any:
    value: Any = {}
    for _ in range(depth - 1):
        value = {"p": value}
    return value


def test_nesting_is_held_to_the_responses_face_limit_naming_the_top_level_field() -> None:
    body = full_body()
    body["tools"][0]["function"]["parameters"] = nested(MAX_DEPTH)
    assert refused(body).param == "tools"
    body = full_body()
    body["some_new_field"] = nested(MAX_DEPTH)
    assert refused(body).param == "some_new_field"


def test_nesting_just_within_the_limit_passes() -> None:
    body = full_body()
    # the body (1), tools (2), the tool (3), function (4): parameters may nest MAX_DEPTH - 4 more
    body["tools"][0]["function"]["parameters"] = nested(MAX_DEPTH - 4)
    validate_chat_request(body)
