"""Request fields on the way to a chat upstream (translate/chat_upstream/request.py, translate/chat_upstream/tools.py): each
is carried, translated, or refused naming it; none is dropped in silence."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from codexgate.errors import InvalidRequest
from codexgate.translate.chat_upstream.request import to_chat_request
from codexgate.translate.dialect import ChatDialect
from codexgate.wire.responses import parse_request
from tests.support.codex_requests import CODEX_TOOLS, codex_body

READ = {"type": "function", "name": "read", "parameters": {"type": "object", "properties": {}}}
WRITE = {"type": "function", "name": "write", "parameters": {"type": "object", "properties": {}}}
SPAWN_NS = {"type": "namespace", "name": "agents", "tools": [{"type": "function", "name": "spawn"}]}


def chat(**fields: Any) -> dict[str, Any]:
    """The upstream body; checks that what is sent upstream is that body."""
    request = to_chat_request(parse_request({"model": "m", "input": "hi", **fields}), ChatDialect(), "up")
    assert orjson.loads(request.encode()) == request.body
    body: dict[str, Any] = request.body
    return body


def refused_param(**fields: Any) -> str | None:
    with pytest.raises(InvalidRequest) as info:
        chat(**fields)
    assert info.value.status == 400
    return info.value.param


def names(body: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in body.get("tools", ())]


def test_allowed_tools_advertises_only_the_tools_it_allows_with_its_mode() -> None:
    choice = {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "write"}]}
    body = chat(tools=[READ, WRITE], tool_choice=choice)
    assert names(body) == ["write"] and body["tool_choice"] == "required"
    choice = {
        "type": "allowed_tools",
        "mode": "auto",
        "tools": [{"type": "function", "name": "spawn", "namespace": "agents"}, {"type": "web_search"}],
    }
    body = chat(tools=[READ, SPAWN_NS, {"type": "web_search"}], tool_choice=choice)
    assert names(body) == ["agents__spawn"] and body["tool_choice"] == "auto"


def test_a_tool_list_is_encoded_once_for_every_request_that_sends_it() -> None:
    body = {"model": "m", "input": "hi", "tools": [READ, WRITE]}
    first, second = (to_chat_request(parse_request(body), ChatDialect(), "up") for _ in range(2))
    assert first.tools_json is not None and first.tools_json is second.tools_json
    assert orjson.loads(second.encode())["tools"] == second.body["tools"] == first.body["tools"]
    # A choice that narrows the list sends its own, encoded with the request.
    choice = {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "read"}]}
    body = {"model": "m", "input": "hi", "tools": [READ, WRITE], "tool_choice": choice}
    narrowed = to_chat_request(parse_request(body), ChatDialect(), "up")
    assert narrowed.tools_json is None and names(orjson.loads(narrowed.encode())) == ["read"]


def test_a_named_tool_choice_forces_its_function_under_the_name_the_model_is_shown() -> None:
    body = chat(
        tools=[READ, SPAWN_NS], tool_choice={"type": "function", "name": "spawn", "namespace": "agents"}
    )
    assert body["tool_choice"] == {"type": "function", "function": {"name": "agents__spawn"}}
    body = chat(tools=[{"type": "tool_search", "execution": "client"}], tool_choice={"type": "tool_search"})
    assert body["tool_choice"] == {"type": "function", "function": {"name": "tool_search"}}


@pytest.mark.parametrize(
    "tools,choice,param",
    [
        ([READ], {"type": "function", "name": "delete"}, "tool_choice.name"),
        ([READ, {"type": "web_search"}], {"type": "web_search"}, "tool_choice.type"),
        ([{"type": "file_search"}], {"type": "file_search"}, "tool_choice.type"),
        ([], "required", "tool_choice"),
        ([{"type": "web_search"}], "required", "tool_choice"),
        (
            [READ],
            {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "nope"}]},
            "tool_choice.tools[0].name",
        ),
        (
            [READ, {"type": "web_search"}],
            {"type": "allowed_tools", "mode": "required", "tools": [{"type": "web_search"}]},
            "tool_choice.tools",
        ),
    ],
)
def test_a_tool_choice_a_chat_upstream_cannot_honour_is_refused(
    tools: list[Any], choice: Any, param: str
) -> None:
    assert refused_param(tools=tools, tool_choice=choice) == param


def test_safety_identifier_is_sent_as_the_chat_user_unless_user_is_set() -> None:
    assert chat(safety_identifier="hash-1")["user"] == "hash-1"
    assert chat(safety_identifier="hash-1", user="u")["user"] == "u"


def test_fields_that_change_nothing_on_a_chat_upstream_are_accepted() -> None:
    body = chat(
        truncation="auto",
        top_logprobs=0,
        max_tool_calls=2,
        stream_options={"include_obfuscation": True},
        prompt_cache_retention="24h",
        include=["reasoning.encrypted_content", "web_search_call.results", "message.input_image.image_url"],
        service_tier="flex",
        metadata={"k": "v"},
        text={"verbosity": "low"},
    )
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert body["stream_options"] == {"include_usage": True}  # the gateway's own, for usage
    for name in ("truncation", "max_tool_calls", "prompt_cache_retention", "service_tier", "metadata"):
        assert name not in body


def test_penalties_and_logit_bias_are_carried() -> None:
    body = chat(presence_penalty=0.5, frequency_penalty=0.25, logit_bias={"42": -100})
    assert (body["presence_penalty"], body["frequency_penalty"], body["logit_bias"]) == (
        0.5,
        0.25,
        {"42": -100},
    )


def test_a_codex_request_is_translated_whole() -> None:
    body = to_chat_request(parse_request(codex_body(tools=CODEX_TOOLS)), ChatDialect(), "up").body
    assert body["tool_choice"] == "auto" and body["parallel_tool_calls"] is True
    assert names(body) == [
        "exec_command", "write_stdin", "apply_patch", "multi_agent_v1__spawn_agent",
        "multi_agent_v1__wait_agent", "tool_search",
    ]  # fmt: skip


def test_a_strict_function_stays_strict() -> None:
    strict = {**READ, "strict": True}
    chat_shape = {"type": "function", "function": {"name": "w", "parameters": {}, "strict": True}}
    body = chat(tools=[strict, chat_shape, {**WRITE, "strict": False}])
    assert [tool["function"].get("strict") for tool in body["tools"]] == [True, True, None]
