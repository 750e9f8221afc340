"""Chat Completions request -> canonical request (translate/chat_face/request.py).

Each translation is checked against the Responses face itself: the chat body must give exactly
the `ResponsesRequest` that `parse_request` makes of the equivalent Responses body."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from codexgate.errors import InvalidRequest
from codexgate.translate.chat_face.request import ChatAsk, legacy_call_id, parse_chat_request
from codexgate.wire.responses import ResponsesRequest, parse_request

USER = {"role": "user", "content": "hi"}
READ_TOOL = {
    "type": "function",
    "function": {
        "name": "read",
        "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        "strict": True,
    },
}
PATCH_GRAMMAR = 'start: "*** Begin Patch" /(.|\\n)*/ "*** End Patch"'


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [USER]} | fields


def responses(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "input": [{"type": "message", "role": "user", "content": "hi"}]} | fields


def translated(body: dict[str, Any]) -> ResponsesRequest:
    return parse_chat_request(copy.deepcopy(body)).request


def assert_same_as_responses_face(chat_body: dict[str, Any], responses_body: dict[str, Any]) -> None:
    assert translated(chat_body) == parse_request(responses_body)


# -- messages


def test_system_developer_and_user_messages_stay_messages_in_their_place() -> None:
    chat_body = chat(
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hi"},
            {"role": "developer", "content": [{"type": "text", "text": "Use tools."}]},
            {"role": "system", "content": "A late rule."},
        ]
    )
    assert_same_as_responses_face(
        chat_body,
        responses(
            input=[
                {"type": "message", "role": "system", "content": "Be brief."},
                {"type": "message", "role": "user", "content": "hi"},
                {
                    "type": "message",
                    "role": "developer",
                    "content": [{"type": "input_text", "text": "Use tools."}],
                },
                {"type": "message", "role": "system", "content": "A late rule."},
            ]
        ),
    )
    assert translated(chat_body).instructions is None


def test_user_text_and_image_parts_become_input_parts() -> None:
    chat_body = chat(
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Compare"},
                    {
                        "type": "image_url",
                        "image_url": {"url": "https://example.com/a.png", "detail": "high"},
                    },
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
                ],
            }
        ]
    )
    assert_same_as_responses_face(
        chat_body,
        responses(
            input=[
                {
                    "type": "message",
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "Compare"},
                        {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "high"},
                        {"type": "input_image", "image_url": "data:image/png;base64,iVBO", "detail": "auto"},
                    ],
                }
            ]
        ),
    )


def test_an_assistant_turn_becomes_reasoning_message_and_calls_in_that_order() -> None:
    chat_body = chat(
        messages=[
            USER,
            {
                "role": "assistant",
                "content": "Let me look.",
                "reasoning_content": "I should read both files.",
                "tool_calls": [
                    {
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "read", "arguments": '{"path":"a"}'},
                    },
                    {
                        "id": "call_b",
                        "type": "function",
                        "function": {"name": "read", "arguments": {"path": "b"}},
                    },
                    {
                        "id": "call_p",
                        "type": "custom",
                        "custom": {"name": "apply_patch", "input": "*** Begin"},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_a", "content": "A"},
            {"role": "tool", "tool_call_id": "call_b", "content": [{"type": "text", "text": "B"}]},
            {"role": "tool", "tool_call_id": "call_p", "content": "Done!"},
        ]
    )
    assert_same_as_responses_face(
        chat_body,
        responses(
            input=[
                {"type": "message", "role": "user", "content": "hi"},
                {
                    "type": "reasoning",
                    "summary": [{"type": "summary_text", "text": "I should read both files."}],
                },
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "Let me look."}],
                },
                {"type": "function_call", "call_id": "call_a", "name": "read", "arguments": '{"path":"a"}'},
                {"type": "function_call", "call_id": "call_b", "name": "read", "arguments": '{"path":"b"}'},
                {
                    "type": "custom_tool_call",
                    "call_id": "call_p",
                    "name": "apply_patch",
                    "input": "*** Begin",
                },
                {"type": "function_call_output", "call_id": "call_a", "output": "A"},
                {
                    "type": "function_call_output",
                    "call_id": "call_b",
                    "output": [{"type": "input_text", "text": "B"}],
                },
                {"type": "custom_tool_call_output", "call_id": "call_p", "output": "Done!"},
            ]
        ),
    )


def test_an_object_of_arguments_is_encoded_as_json() -> None:
    args = {"path": "a", "lines": [1, 2], "deep": {"x": None}}
    body = chat(
        messages=[
            {
                "role": "assistant",
                "tool_calls": [{"id": "c", "function": {"name": "read", "arguments": args}}],
            },
        ]
    )
    (call,) = translated(body).input
    assert call["type"] == "function_call" and orjson.loads(call["arguments"]) == args


def test_reasoning_under_its_openrouter_name_is_carried_and_content_parts_with_refusals() -> None:
    chat_body = chat(
        messages=[
            USER,
            {
                "role": "assistant",
                "reasoning": "Thinking aloud.",
                "content": [
                    {"type": "text", "text": "Partly: "},
                    {"type": "refusal", "refusal": "not that."},
                ],
            },
            {"role": "assistant", "content": None, "refusal": "I can't help with that."},
        ]
    )
    assert_same_as_responses_face(
        chat_body,
        responses(
            input=[
                {"type": "message", "role": "user", "content": "hi"},
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Thinking aloud."}]},
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [
                        {"type": "output_text", "text": "Partly: "},
                        {"type": "refusal", "refusal": "not that."},
                    ],
                },
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "refusal", "refusal": "I can't help with that."}],
                },
            ]
        ),
    )


def test_reasoning_content_wins_over_reasoning_when_both_are_sent() -> None:
    body = chat(messages=[{"role": "assistant", "content": "x", "reasoning_content": "A", "reasoning": "B"}])
    assert translated(body).input[0] == {
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "A"}],
    }


def test_an_empty_text_beside_calls_is_no_message_but_an_empty_answer_is_one() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    beside_calls = translated(chat(messages=[{"role": "assistant", "content": "", "tool_calls": [call]}]))
    assert [item["type"] for item in beside_calls.input] == ["function_call"]
    alone = translated(chat(messages=[{"role": "assistant", "content": ""}]))
    assert alone.input == [
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": ""}]}
    ]
    nothing = translated(chat(messages=[{"role": "assistant", "content": None}]))
    assert nothing.input == alone.input


def test_legacy_function_calls_and_outputs_pair_with_the_latest_unanswered_call_of_that_name() -> None:
    chat_body = chat(
        messages=[
            USER,
            {
                "role": "assistant",
                "content": None,
                "function_call": {"name": "read", "arguments": '{"path":"a"}'},
            },
            {
                "role": "assistant",
                "content": None,
                "function_call": {"name": "read", "arguments": {"path": "b"}},
            },
            {"role": "function", "name": "read", "content": "B"},
            {"role": "function", "name": "read", "content": "A"},
            {"role": "function", "name": "read", "content": None},
        ]
    )
    first, second = legacy_call_id(1), legacy_call_id(2)
    assert first != second
    assert_same_as_responses_face(
        chat_body,
        responses(
            input=[
                {"type": "message", "role": "user", "content": "hi"},
                {"type": "function_call", "call_id": first, "name": "read", "arguments": '{"path":"a"}'},
                {"type": "function_call", "call_id": second, "name": "read", "arguments": '{"path":"b"}'},
                {"type": "function_call_output", "call_id": second, "output": "B"},
                {"type": "function_call_output", "call_id": first, "output": "A"},
                # answers nothing left: carried under an id of its own, the upstream decides
                {"type": "function_call_output", "call_id": legacy_call_id(5), "output": ""},
            ]
        ),
    )


def test_the_same_history_gives_the_same_legacy_ids_every_turn() -> None:
    body = chat(messages=[{"role": "assistant", "function_call": {"name": "f", "arguments": "{}"}}])
    assert translated(body) == translated(body)


def test_a_tool_output_answering_no_earlier_call_is_still_carried() -> None:
    body = chat(messages=[USER, {"role": "tool", "tool_call_id": "call_gone", "content": "late"}])
    assert translated(body).input[-1] == {
        "type": "function_call_output",
        "call_id": "call_gone",
        "output": "late",
    }


def test_a_participant_name_is_dropped() -> None:
    body = chat(messages=[{"role": "user", "name": "ada", "content": "hi"}])
    assert translated(body) == parse_request(responses())


# -- tools and tool_choice


def test_function_custom_and_legacy_tools_become_canonical_tools_in_order() -> None:
    chat_body = chat(
        tools=[
            READ_TOOL,
            {"type": "function", "function": {"name": "now"}},
            {
                "type": "custom",
                "custom": {
                    "name": "apply_patch",
                    "description": "Edit files.",
                    "format": {"type": "grammar", "grammar": {"definition": PATCH_GRAMMAR, "syntax": "lark"}},
                },
            },
            {"type": "custom", "custom": {"name": "note", "format": {"type": "text"}}},
            {"type": "custom", "custom": {"name": "free"}},
        ],
        functions=[{"name": "legacy", "description": "Old style.", "parameters": {"type": "object"}}],
    )
    assert_same_as_responses_face(
        chat_body,
        responses(
            tools=[
                {
                    "type": "function",
                    "name": "read",
                    "description": "Read a file.",
                    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
                    "strict": True,
                },
                {"type": "function", "name": "now"},
                {
                    "type": "custom",
                    "name": "apply_patch",
                    "description": "Edit files.",
                    "format": {"type": "grammar", "syntax": "lark", "definition": PATCH_GRAMMAR},
                },
                {"type": "custom", "name": "note", "format": {"type": "text"}},
                {"type": "custom", "name": "free"},
                {
                    "type": "function",
                    "name": "legacy",
                    "description": "Old style.",
                    "parameters": {"type": "object"},
                },
            ]
        ),
    )


@pytest.mark.parametrize(
    ("chat_fields", "canonical"),
    [
        ({}, "auto"),
        ({"tool_choice": "none"}, "none"),
        ({"tool_choice": "auto"}, "auto"),
        ({"tool_choice": "required"}, "required"),
        (
            {"tool_choice": {"type": "function", "function": {"name": "read"}}},
            {"type": "function", "name": "read"},
        ),
        (
            {"tool_choice": {"type": "custom", "custom": {"name": "apply_patch"}}},
            {"type": "custom", "name": "apply_patch"},
        ),
        (
            {
                "tool_choice": {
                    "type": "allowed_tools",
                    "allowed_tools": {
                        "mode": "required",
                        "tools": [
                            {"type": "function", "function": {"name": "read"}},
                            {"type": "custom", "custom": {"name": "apply_patch"}},
                        ],
                    },
                }
            },
            {
                "type": "allowed_tools",
                "mode": "required",
                "tools": [{"type": "function", "name": "read"}, {"type": "custom", "name": "apply_patch"}],
            },
        ),
        ({"function_call": "none"}, "none"),
        ({"function_call": "auto"}, "auto"),
        ({"function_call": {"name": "read"}}, {"type": "function", "name": "read"}),
        ({"function_call": "none", "tool_choice": "required"}, "required"),  # the newer field wins
    ],
)
def test_every_tool_choice_form(chat_fields: dict[str, Any], canonical: Any) -> None:
    assert_same_as_responses_face(
        chat(tools=[READ_TOOL], **chat_fields),
        responses(
            tools=[{k: v for k, v in READ_TOOL["function"].items()} | {"type": "function"}],
            tool_choice=canonical,
        ),
    )


# -- the rest of the body


def test_every_sampling_and_request_field_maps_to_its_canonical_field() -> None:
    same: dict[str, Any] = {  # the same name and value on both faces
        "stream": True, "parallel_tool_calls": False, "temperature": 0.3, "top_p": 0.9, "seed": 7,
        "user": "u-1", "metadata": {"ticket": "42"}, "service_tier": "flex", "prompt_cache_key": "conv-1",
        "store": False,
    }  # fmt: skip
    # unknown to the Responses face: kept in `extra` there too
    unknown = {"frequency_penalty": 0.5, "presence_penalty": -0.5, "logit_bias": {"50256": -100}, "top_k": 20}
    chat_body = chat(
        **same,
        **unknown,
        verbosity="low",
        reasoning_effort="high",
        max_completion_tokens=800,
        max_tokens=100,
        stop="END",
        safety_identifier="s-1",
        n=1,
        logprobs=False,
        top_logprobs=0,
        modalities=["text"],
        stream_options={"include_usage": True},
    )
    assert_same_as_responses_face(
        chat_body,
        responses(
            **same,
            **unknown,
            text={"verbosity": "low"},
            reasoning={"effort": "high"},
            max_output_tokens=800,
            stop=["END"],
        ),
    )


def test_max_tokens_and_safety_identifier_stand_in_for_their_newer_twins() -> None:
    request = translated(chat(max_tokens=100, safety_identifier="s-1", stop=["a", "b"]))
    assert (request.max_output_tokens, request.user, request.stop) == (100, "s-1", ["a", "b"])


@pytest.mark.parametrize(
    ("response_format", "canonical"),
    [
        ({"type": "text"}, {"type": "text"}),
        ({"type": "json_object"}, {"type": "json_object"}),
        (
            {
                "type": "json_schema",
                "json_schema": {
                    "name": "answer",
                    "description": "The answer.",
                    "schema": {"type": "object", "properties": {"a": {"type": "integer"}}},
                    "strict": True,
                },
            },
            {
                "type": "json_schema",
                "name": "answer",
                "description": "The answer.",
                "schema": {"type": "object", "properties": {"a": {"type": "integer"}}},
                "strict": True,
            },
        ),
        ({"type": "json_schema", "json_schema": {"name": "loose"}}, {"type": "json_schema", "name": "loose"}),
    ],
)
def test_every_response_format(response_format: dict[str, Any], canonical: dict[str, Any]) -> None:
    assert_same_as_responses_face(
        chat(response_format=response_format, verbosity="high"),
        responses(text={"format": canonical, "verbosity": "high"}),
    )


def test_include_usage_is_the_face_s_business_not_the_canonical_request_s() -> None:
    asked = parse_chat_request(chat(stream=True, stream_options={"include_usage": True}))
    assert asked == ChatAsk(parse_request(responses(stream=True)), include_usage=True)
    assert parse_chat_request(chat(stream=True)).include_usage is False
    assert (
        parse_chat_request(chat(stream=True, stream_options={"include_usage": False})).include_usage is False
    )


def test_the_canonical_request_never_continues_stores_or_instructs() -> None:
    request = translated(chat(messages=[{"role": "system", "content": "rules"}, USER], store=False))
    assert request.previous_response_id is None and request.instructions is None and request.store is not True


def test_nothing_is_in_extra_that_the_face_consumed() -> None:
    request = translated(chat(n=1, logprobs=False, modalities=["text"], stream_options={}, functions=[]))
    assert request.extra == {}


def test_invalid_input_is_refused_before_translation() -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_chat_request(chat(messages=[{"role": "tool", "content": "no id"}]))
    assert caught.value.param == "messages[0].tool_call_id"


# -- no client input reaches the translator in a shape it cannot read


def rich_body() -> dict[str, Any]:
    return chat(
        messages=[
            {"role": "system", "content": [{"type": "text", "text": "rules"}]},
            {
                "role": "user",
                "name": "ada",
                "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "low"}},
                ],
            },
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "ok"}],
                "reasoning_content": "r",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}},
                    {"id": "c2", "type": "custom", "custom": {"name": "apply_patch", "input": "x"}},
                ],
                "function_call": {"name": "old", "arguments": "{}"},
            },
            {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "A"}]},
            {"role": "function", "name": "old", "content": "B"},
        ],
        tools=[
            READ_TOOL,
            {
                "type": "custom",
                "custom": {
                    "name": "apply_patch",
                    "format": {"type": "grammar", "grammar": {"definition": "s", "syntax": "lark"}},
                },
            },
        ],
        functions=[{"name": "old"}],
        tool_choice={
            "type": "allowed_tools",
            "allowed_tools": {"mode": "auto", "tools": [{"type": "function", "function": {"name": "read"}}]},
        },
        function_call={"name": "old"},
        response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": {}, "strict": True}},
        stream_options={"include_usage": True},
        metadata={"k": "v"},
        logit_bias={"1": 1},
        stop=["x"],
        max_tokens=5,
    )


def every_path(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if path:
        yield path
    if isinstance(value, dict):
        for key, child in value.items():
            yield from every_path(child, (*path, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from every_path(child, (*path, index))


WRONG_VALUES = (None, 0, -1, 1.5, True, "s", "", [], {}, [{}], [None], {"type": "text"})


def test_any_wrong_value_anywhere_is_a_400_or_translates_never_another_error() -> None:
    base = rich_body()
    parse_chat_request(copy.deepcopy(base))
    outcomes = {"translated": 0, "refused": 0}
    for path in every_path(base):
        for wrong in WRONG_VALUES:
            body = copy.deepcopy(base)
            target = body
            for step in path[:-1]:
                target = target[step]
            target[path[-1]] = wrong
            try:
                parse_chat_request(body)
            except InvalidRequest as error:
                assert error.param, (path, wrong)
                outcomes["refused"] += 1
            else:
                outcomes["translated"] += 1
    assert outcomes["refused"] > 500 and outcomes["translated"] > 100  # both sides were exercised
