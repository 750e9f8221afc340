"""Responses Lite, multi-agent v2 and the item kinds without a chat twin (translate/chat_upstream/items.py):
each is carried in a form the upstream reads, or refused with a 400 naming it."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from codexgate.errors import InvalidRequest
from codexgate.translate.catalogue import UNAVAILABLE_METADATA_KEY, catalogue_of
from codexgate.translate.chat_upstream.request import to_chat_request, tools_of
from codexgate.translate.chat_upstream.stream import ChatStreamTranslator
from codexgate.translate.dialect import ChatDialect
from codexgate.translate.envelope import Envelope
from codexgate.wire.responses import parse_request
from tests.support.turns import chat_translator

EXEC_GRAMMAR = {
    "type": "grammar",
    "syntax": "lark",
    "definition": "start: pragma_source | plain_source\npragma_source: PRAGMA_LINE NEWLINE SOURCE\n"
    "plain_source: SOURCE\nPRAGMA_LINE: /[ \\t]*\\/\\/ @exec:[^\\r\\n]*/\nNEWLINE: /\\r?\\n/\nSOURCE: /[\\s\\S]+/\n",
}
ADDITIONAL_TOOLS: dict[str, Any] = {
    "type": "additional_tools",
    "id": "at_1",
    "role": "developer",
    "tools": [
        {
            "type": "namespace",
            "name": "functions",
            "description": "",
            "tools": [
                {"type": "custom", "name": "exec", "description": "Run JavaScript.", "format": EXEC_GRAMMAR},
                {"type": "function", "name": "wait", "parameters": {"type": "object", "properties": {}}},
            ],
        },
        {
            "type": "namespace",
            "name": "collaboration",
            "tools": [
                {
                    "type": "function",
                    "name": "spawn_agent",
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "message": {"type": "string", "description": "Task.", "encrypted": True},
                            "task_name": {"type": "string"},
                        },
                        "required": ["task_name", "message"],
                    },
                }
            ],
        },
    ],
}


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def lite_body(*items: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "input": [ADDITIONAL_TOOLS, *items],
        "parallel_tool_calls": False,
        "reasoning": {"effort": "low", "context": "all_turns"},
        "text": {"verbosity": "low"},
        **extra,
    }


def translate(body: dict[str, Any]) -> Any:
    return to_chat_request(parse_request(body), ChatDialect(), "up")


def tool_names(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools", ())]


# -- Responses Lite ----------------------------------------------------------------------------


def test_tools_of_additional_tools_items_are_advertised_and_the_item_is_no_message() -> None:
    request = translate(lite_body(user("hi")))
    assert tool_names(request.body) == ["functions__exec", "functions__wait", "collaboration__spawn_agent"]
    assert request.body["messages"] == [{"role": "user", "content": "hi"}]
    assert request.body["parallel_tool_calls"] is False
    # The custom tool inside a namespace: one string parameter, the grammar in its description.
    exec_tool = request.body["tools"][0]["function"]
    assert exec_tool["parameters"]["required"] == ["input"]
    assert "pragma_source" in exec_tool["description"]
    assert request.catalogue.resolve("functions__exec").grammar == EXEC_GRAMMAR


def test_every_additional_tools_item_counts_and_top_level_tools_come_first() -> None:
    second = {"type": "additional_tools", "tools": [{"type": "function", "name": "late"}]}
    body = lite_body(user("hi"), second, tools=[{"type": "function", "name": "first"}])
    assert tool_names(translate(body).body) == [
        "first",
        "functions__exec",
        "functions__wait",
        "collaboration__spawn_agent",
        "late",
    ]


def test_encrypted_schema_key_is_removed_before_the_upstream_sees_it() -> None:
    tools = translate(lite_body(user("hi"))).body["tools"]
    spawn = next(t for t in tools if t["function"]["name"] == "collaboration__spawn_agent")
    assert spawn["function"]["parameters"]["properties"]["message"] == {
        "type": "string",
        "description": "Task.",
    }
    # the client's own tool is left untouched
    assert (
        ADDITIONAL_TOOLS["tools"][1]["tools"][0]["parameters"]["properties"]["message"]["encrypted"] is True
    )


@pytest.mark.parametrize(
    ("item", "param"),
    [
        ({"type": "additional_tools"}, "input[0].tools"),
        ({"type": "additional_tools", "tools": {}}, "input[0].tools"),
        ({"type": "additional_tools", "tools": [{"name": "x"}]}, "input[0].tools[0]"),
        (
            {
                "type": "additional_tools",
                "tools": [
                    {
                        "type": "namespace",
                        "name": "n",
                        "tools": [{"type": "custom", "name": "exec", "format": "lark"}],
                    }
                ],
            },
            "input[0].tools[0].tools[0].format",
        ),
        (
            {"type": "additional_tools", "tools": [{"type": "function", "name": "f", "parameters": []}]},
            "input[0].tools[0].parameters",
        ),
        (
            {"type": "custom_tool_call", "call_id": "c", "name": "exec", "input": "x", "namespace": 1},
            "input[0].namespace",
        ),
        ({"type": "agent_message", "content": "text"}, "input[0].content"),
        (
            {"type": "agent_message", "content": [{"type": "encrypted_content", "encrypted_content": 5}]},
            "input[0].content[0].encrypted_content",
        ),
    ],
)
def test_bad_shapes_are_400s_naming_the_field(item: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_request({"model": "m", "input": [item]})
    assert info.value.param == param


def translator(body: dict[str, Any]) -> ChatStreamTranslator:
    return chat_translator(body=body, response_id="resp_1")


def feed_and_finish(t: ChatStreamTranslator, raw: bytes) -> list[dict[str, Any]]:
    t.feed(orjson.loads(raw))
    t.finish()
    return t.turn.take()


def chunk(name: str, arguments: str) -> bytes:
    delta = {
        "tool_calls": [
            {
                "index": 0,
                "id": "call_1",
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
        ]
    }
    return orjson.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": "tool_calls"}]})


def done_items(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["item"] for e in events if e["type"] == "response.output_item.done"]


def test_a_call_of_the_namespaced_custom_tool_comes_back_as_custom_tool_call_with_its_namespace() -> None:
    t = translator(lite_body(user("hi")))
    code = 'const r = await tools.exec_command({cmd: "echo LITE > lite.txt"}); text(r);'
    events = feed_and_finish(t, chunk("functions__exec", orjson.dumps({"input": code}).decode()))
    added = [e["item"] for e in events if e["type"] == "response.output_item.added"]
    assert added[0]["type"] == "custom_tool_call" and added[0]["namespace"] == "functions"
    [item] = done_items(events)
    assert item["type"] == "custom_tool_call"
    assert (item["name"], item["namespace"], item["input"]) == ("exec", "functions", code)


def test_the_call_and_its_array_output_in_history_keep_the_flat_name() -> None:
    call = {
        "type": "custom_tool_call",
        "call_id": "c1",
        "name": "exec",
        "namespace": "functions",
        "input": "1+1",
    }
    output = {
        "type": "custom_tool_call_output",
        "call_id": "c1",
        "output": [{"type": "input_text", "text": "Script completed\nOutput:\nLITE"}],
    }
    messages = translate(lite_body(user("go"), call, output)).body["messages"]
    assert messages[1]["tool_calls"][0]["function"] == {
        "name": "functions__exec",
        "arguments": '{"input":"1+1"}',
    }
    assert messages[2] == {"role": "tool", "tool_call_id": "c1", "content": "Script completed\nOutput:\nLITE"}


def test_lite_fields_and_header_values_never_fail() -> None:
    req = parse_request(lite_body(user("hi"), include=["reasoning.encrypted_content"], store=False))
    assert req.reasoning == {"effort": "low", "context": "all_turns"}
    body = to_chat_request(req, ChatDialect(send_reasoning_effort=True), "up").body
    assert body["reasoning_effort"] == "low"


# -- multi-agent v2 ------------------------------------------------------------------------------


def test_an_agent_message_with_our_plain_text_in_encrypted_content_is_read() -> None:
    # What Codex 0.169 sends a spawned agent: a header part and the parent's `message` argument
    # copied into encrypted_content.
    message = {
        "type": "agent_message",
        "author": "/root",
        "recipient": "/root/worker",
        "content": [
            {
                "type": "input_text",
                "text": "Message Type: NEW_TASK\nTask name: /root/worker\nSender: /root\nPayload:\n",
            },
            {"type": "encrypted_content", "encrypted_content": "Say the word PONG."},
        ],
    }
    messages = translate(lite_body(user("<env/>"), message)).body["messages"]
    assert messages[-1] == {
        "role": "user",
        "content": "[Message from /root to /root/worker]\nMessage Type: NEW_TASK\nTask name: /root/worker\n"
        "Sender: /root\nPayload:\nSay the word PONG.",
    }


def test_an_agent_message_with_text_parts_is_read() -> None:
    message = {
        "type": "agent_message",
        "author": "/root/worker",
        "recipient": "/root",
        "content": [{"type": "input_text", "text": "Message Type: FINAL_ANSWER\nPayload:\nPONG"}],
    }
    messages = translate(lite_body(user("go"), message)).body["messages"]
    assert (
        messages[-1]["content"]
        == "[Message from /root/worker to /root]\nMessage Type: FINAL_ANSWER\nPayload:\nPONG"
    )


def test_an_agent_message_encrypted_by_openai_is_refused_naming_it() -> None:
    blob = "gAAAAABo" + "x1Y2z3" * 30
    message = {
        "type": "agent_message",
        "author": "/root",
        "recipient": "/root/w",
        "content": [{"type": "encrypted_content", "encrypted_content": blob}],
    }
    with pytest.raises(InvalidRequest) as info:
        translate(lite_body(user("go"), message))
    assert info.value.param == "input[2].content[0].encrypted_content"


# -- nothing vanishes in silence ---------------------------------------------------------------


def test_hosted_tools_are_named_in_the_response_metadata() -> None:
    req = parse_request(
        {
            "model": "m",
            "input": "x",
            "metadata": {"k": "v"},
            "tools": [{"type": "web_search"}, {"type": "image_generation"}],
        }
    )
    unavailable = catalogue_of(tools_of(req)).unavailable
    resource = Envelope.for_request(req, "resp_1", 0, unavailable_tools=unavailable).resource("completed", [])
    assert resource["metadata"] == {"k": "v", UNAVAILABLE_METADATA_KEY: "web_search,image_generation"}
    plain = Envelope.for_request(parse_request({"model": "m", "input": "x"}), "r", 0).resource(
        "completed", []
    )
    assert plain["metadata"] == {}


def test_tool_search_and_local_shell_history_are_calls_and_outputs() -> None:
    items = [
        user("find"),
        {
            "type": "tool_search_call",
            "call_id": "s1",
            "status": "completed",
            "execution": "client",
            "arguments": {"query": "calendar", "limit": 2},
        },
        {
            "type": "tool_search_output",
            "call_id": "s1",
            "status": "completed",
            "execution": "client",
            "tools": [{"type": "function", "name": "cal_add", "description": "Add an event."}],
        },
        {
            "type": "local_shell_call",
            "call_id": "l1",
            "status": "completed",
            "action": {"type": "exec", "command": ["ls"], "working_directory": "/w"},
        },
        {"type": "local_shell_call_output", "call_id": "l1", "output": "a.txt"},
    ]
    messages = translate({"model": "m", "input": items}).body["messages"]
    assert messages[1]["tool_calls"][0]["function"] == {
        "name": "tool_search",
        "arguments": '{"query":"calendar","limit":2}',
    }
    assert messages[2] == {
        "role": "tool",
        "tool_call_id": "s1",
        "content": "Tools found:\n- cal_add: Add an event.",
    }
    assert messages[3]["tool_calls"][0]["function"] == {
        "name": "local_shell",
        "arguments": '{"command":["ls"],"working_directory":"/w"}',
    }
    assert messages[4]["content"] == "a.txt"


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        (
            "tool_search",
            '{"query":"cal","limit":3}',
            {"type": "tool_search_call", "execution": "client", "arguments": {"query": "cal", "limit": 3}},
        ),
        (
            "local_shell",
            '{"command":["ls","-l"]}',
            {"type": "local_shell_call", "action": {"type": "exec", "command": ["ls", "-l"]}},
        ),
    ],
)
def test_calls_of_client_executed_tools_come_back_as_their_own_item_kind(
    name: str, arguments: str, expected: dict[str, Any]
) -> None:
    t = translator(
        {
            "model": "m",
            "input": "x",
            "tools": [{"type": "tool_search", "execution": "client"}, {"type": "local_shell"}],
        }
    )
    [item] = done_items(feed_and_finish(t, chunk(name, arguments)))
    assert {k: item[k] for k in expected} == expected
    assert item["call_id"] == "call_1" and item["status"] == "completed"


def test_hosted_call_notes_join_the_assistant_turn_they_belong_to() -> None:
    items = [
        user("draw"),
        {
            "type": "image_generation_call",
            "id": "ig",
            "status": "completed",
            "revised_prompt": "a cat",
            "result": "AAA",
        },
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Here it is."}]},
    ]
    messages = translate({"model": "m", "input": items}).body["messages"]
    assert messages[1] == {
        "role": "assistant",
        "content": "[image_generation ran on the server (completed): a cat]\nHere it is.",
    }


@pytest.mark.parametrize(
    ("item", "param"),
    [
        ({"type": "compaction", "encrypted_content": "gAAAAB" + "q" * 80}, "input[1]"),
        ({"type": "compaction_trigger"}, "input[1].type"),
        ({"type": "brand_new_item", "id": "x"}, "input[1].type"),
        ({"type": "item_reference", "id": "msg_1"}, "input[1].type"),
    ],
)
def test_unreadable_items_are_refused_naming_them(item: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        translate({"model": "m", "input": [user("x"), item]})
    assert info.value.param == param


def test_an_unknown_item_with_text_is_carried_as_a_note() -> None:
    item = {"type": "brand_new_item", "content": [{"type": "input_text", "text": "remember this"}]}
    messages = translate({"model": "m", "input": [user("x"), item]}).body["messages"]
    assert messages[-1] == {"role": "user", "content": "[Input item of type 'brand_new_item']\nremember this"}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("background", True),
        ("conversation", "conv_1"),
        ("prompt", {"id": "pmpt_1"}),
    ],
)
def test_fields_a_gateway_cannot_honour_are_refused_naming_them(name: str, value: Any) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_request({"model": "m", "input": "x", name: value})
    assert info.value.param == name
    assert parse_request({"model": "m", "input": "x", "background": False}).extra == {"background": False}
