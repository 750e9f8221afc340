"""The canonical request as an Anthropic Messages body (translate/messages_upstream/request.py,
messages.py): the conversation (turns merged, calls answered, system hoisted), tools and
tool_choice, thinking per effort and when it must stay off, signed thinking given back at its
place, parts (images, PDFs, text files), sampling, max_tokens, the pass-through of a Messages
body. Each body is also checked against Anthropic's rules (tests/support/fake_messages_upstream.py)."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest

from codexgate.errors import InvalidRequest
from codexgate.translate.catalogue import CUSTOM_INPUT_PARAM, unavailable_notice
from codexgate.translate.chat_upstream.messages import LATE_DEVELOPER_PREFIX, MISSING_OUTPUT
from codexgate.translate.messages_upstream.messages import CONVERSATION_START
from codexgate.translate.messages_upstream.request import (
    EFFORT_BUDGETS,
    JSON_OBJECT_NOTE,
    MessagesOptions,
    MessagesRequest,
    default_max_tokens,
    to_messages_request,
)
from codexgate.translate.reasoning import encode_reasoning, encode_thinking
from codexgate.wire.responses import NativeRequest, parse_request
from tests.support.codex_requests import (
    APPLY_PATCH,
    CODEX_TOOLS,
    EXEC_COMMAND,
    MULTI_AGENT,
    codex_body,
    text_message,
)
from tests.support.fake_messages_upstream import sign, validate
from tests.support.pdfs import text_pdf

JSON = dict[str, Any]
MODEL = "claude-sonnet-4-5"
NO_CACHE = MessagesOptions(prompt_cache=False)


def translate(body: JSON, options: MessagesOptions = NO_CACHE, model: str = MODEL) -> MessagesRequest:
    translated = to_messages_request(parse_request(body), model, options)
    validate(translated.body)  # what Anthropic would refuse fails here
    return translated


def request(input: list[JSON], **fields: Any) -> JSON:
    return {"model": "m", "input": input, **fields}


def user(text: str) -> JSON:
    return text_message("user", text)


def thinking_item(text: str) -> JSON:
    block = {"type": "thinking", "thinking": text, "signature": sign(text)}
    return {
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": text}],
        "encrypted_content": encode_thinking(block),
    }


def call(call_id: str, name: str = "exec_command", arguments: str = '{"cmd":"ls"}', **extra: Any) -> JSON:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments, **extra}


def output(call_id: str, text: Any = "done") -> JSON:
    return {"type": "function_call_output", "call_id": call_id, "output": text}


def roles(body: JSON) -> list[str]:
    return [m["role"] for m in body["messages"]]


def kinds(message: JSON) -> list[str]:
    return [b["type"] for b in message["content"]]


# -- the conversation


def test_a_codex_request_is_a_valid_messages_body_with_system_tools_and_alternating_turns() -> None:
    body = translate(codex_body()).body
    assert body["model"] == MODEL and body["stream"] is True
    assert [b["text"] for b in body["system"]] == [
        "You are Codex, a coding agent.",
        "<permissions instructions>sandbox: workspace-write</permissions instructions>",
        unavailable_notice(["web_search"]),
    ]
    assert roles(body) == ["user", "assistant"] * 6 + ["user"]
    names = [t["name"] for t in body["tools"]]
    assert names == ["exec_command", "write_stdin", "apply_patch", "multi_agent_v1__spawn_agent",
                     "multi_agent_v1__wait_agent", "tool_search"]  # fmt: skip
    assert body["tool_choice"] == {"type": "auto"}
    assert body["max_tokens"] == 64000  # claude-sonnet-4's most, as Codex names none


def test_consecutive_items_of_one_side_join_one_message_and_results_open_the_next_user_turn() -> None:
    items = [
        user("Fix it."),
        thinking_item("Look first."),
        text_message("assistant", "Looking."),
        call("call_a"),
        call("call_b", arguments='{"cmd":"pwd"}'),
        output("call_b", "/src"),
        output("call_a", "a.py"),
        user("And then?"),
    ]
    body = translate(request(items, tools=[EXEC_COMMAND])).body
    assert roles(body) == ["user", "assistant", "user"]
    assert kinds(body["messages"][1]) == ["thinking", "text", "tool_use", "tool_use"]
    results = body["messages"][2]["content"]
    assert [(b["type"], b.get("tool_use_id")) for b in results] == [
        ("tool_result", "call_b"), ("tool_result", "call_a"), ("text", None),
    ]  # fmt: skip
    assert results[0]["content"] == "/src"


def test_a_call_with_no_output_is_answered_and_an_output_with_no_call_is_user_text() -> None:
    items = [user("go"), call("call_lost"), user("never mind"), output("call_ghost", "stray")]
    body = translate(request(items, tools=[EXEC_COMMAND])).body
    assert roles(body) == ["user", "assistant", "user"]
    after = body["messages"][2]["content"]
    assert after[0] == {"type": "tool_result", "tool_use_id": "call_lost", "content": MISSING_OUTPUT}
    assert [b["text"] for b in after[1:]] == ["never mind", "Tool output for call call_ghost:\nstray"]


def test_an_interrupted_turn_ending_with_a_call_gets_its_missing_result() -> None:
    body = translate(request([user("go"), call("call_1")], tools=[EXEC_COMMAND])).body
    assert body["messages"][-1] == {
        "role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": MISSING_OUTPUT}],
    }  # fmt: skip


def test_a_conversation_that_starts_with_the_assistant_gets_a_user_turn_first() -> None:
    body = translate(request([text_message("assistant", "Hello."), user("Hi.")])).body
    assert body["messages"][0] == {"role": "user", "content": [{"type": "text", "text": CONVERSATION_START}]}


def test_leading_developer_messages_are_system_and_later_ones_user_text() -> None:
    items = [
        text_message("developer", "Be brief."),
        text_message("system", "No emojis."),
        user("Hi."),
        text_message("assistant", "Hello."),
        text_message("developer", "Now be formal."),
    ]
    body = translate(request(items, instructions="You are a helper.")).body
    assert [b["text"] for b in body["system"]] == ["You are a helper.", "Be brief.", "No emojis."]
    assert body["messages"][-1]["content"] == [
        {"type": "text", "text": LATE_DEVELOPER_PREFIX + "Now be formal."}
    ]


def test_empty_text_is_left_out() -> None:
    items = [user("Hi."), text_message("assistant", ""), user("Again.")]
    assert roles(translate(request(items)).body) == ["user"]


# -- reasoning


def test_signed_thinking_goes_back_as_the_exact_block_and_other_reasoning_is_left_out() -> None:
    redacted = {"type": "redacted_thinking", "data": "opaque-data"}
    items = [
        user("go"),
        {
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": "chat"}],
            "encrypted_content": encode_reasoning("chat"),
        },
        {
            "type": "reasoning",
            "summary": [],
            "encrypted_content": "gAAAAABforeign-openai-blob-0123456789abcdefghij",
        },
        thinking_item("Think."),
        {"type": "reasoning", "summary": [], "encrypted_content": encode_thinking(redacted)},
        call("call_1"),
        output("call_1"),
    ]
    translated = to_messages_request(parse_request(request(items, tools=[EXEC_COMMAND])), MODEL, NO_CACHE)
    assistant = translated.body["messages"][1]["content"]
    assert assistant[0] == {"type": "thinking", "thinking": "Think.", "signature": sign("Think.")}
    assert assistant[1] == redacted
    assert translated.dropped_items == ["reasoning", "reasoning"]


@pytest.mark.parametrize("effort", sorted(EFFORT_BUDGETS))
def test_each_effort_asks_for_its_thinking_budget(effort: str) -> None:
    body = translate(request([user("Hi.")], reasoning={"effort": effort})).body
    assert body["thinking"] == {"type": "enabled", "budget_tokens": EFFORT_BUDGETS[effort]}
    assert body["thinking"]["budget_tokens"] < body["max_tokens"]


def test_no_effort_or_none_asks_for_no_thinking_and_adaptive_says_the_effort() -> None:
    assert "thinking" not in translate(request([user("Hi.")])).body
    assert "thinking" not in translate(request([user("Hi.")], reasoning={"effort": "none"})).body
    adaptive = MessagesOptions(prompt_cache=False, thinking="adaptive")
    body = translate(request([user("Hi.")], reasoning={"effort": "high"}), adaptive).body
    assert body["thinking"] == {"type": "adaptive"} and body["output_config"] == {"effort": "high"}
    off = MessagesOptions(prompt_cache=False, thinking="off")
    assert "thinking" not in translate(request([user("Hi.")], reasoning={"effort": "high"}), off).body


def test_the_budget_stays_below_a_small_max_tokens_or_thinking_goes() -> None:
    body = translate(request([user("Hi.")], reasoning={"effort": "high"}, max_output_tokens=5000)).body
    assert body["thinking"]["budget_tokens"] == 5000 - 1024 and body["max_tokens"] == 5000
    small = translate(request([user("Hi.")], reasoning={"effort": "high"}, max_output_tokens=1500))
    assert "thinking" not in small.body and small.notes == ["thinking_off.max_tokens"]


def test_a_tool_loop_from_another_upstream_goes_without_thinking() -> None:
    # The assistant turn came from a chat member: nothing signed to give back, and Anthropic
    # refuses a tool loop whose first assistant message has no thinking when thinking is on.
    items = [user("go"), call("call_1"), output("call_1")]
    translated = translate(request(items, tools=[EXEC_COMMAND], reasoning={"effort": "medium"}))
    assert "thinking" not in translated.body and translated.notes == ["thinking_off.unsigned_turn"]
    # Once the user speaks again the loop is over: thinking comes back.
    later = translate(request([*items, text_message("assistant", "Done."), user("Next.")],
                              tools=[EXEC_COMMAND], reasoning={"effort": "medium"}))  # fmt: skip
    assert later.body["thinking"]["type"] == "enabled"


def test_a_signed_tool_loop_keeps_thinking_through_its_later_calls() -> None:
    items = [
        user("go"),
        thinking_item("Plan."),
        call("call_1"),
        output("call_1"),
        call("call_2"),
        output("call_2"),
    ]
    body = translate(request(items, tools=[EXEC_COMMAND], reasoning={"effort": "low"})).body
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 4096}


@pytest.mark.parametrize(
    "fields,note",
    [
        ({"tool_choice": "required"}, "thinking_off.forced_tool"),
        ({"tool_choice": {"type": "function", "name": "exec_command"}}, "thinking_off.forced_tool"),
        ({"temperature": 0.3}, "thinking_off.sampling"),
        ({"top_p": 0.5}, "thinking_off.sampling"),
    ],
)
def test_what_anthropic_refuses_beside_thinking_turns_thinking_off(fields: JSON, note: str) -> None:
    translated = translate(
        request([user("Hi.")], tools=[EXEC_COMMAND], reasoning={"effort": "medium"}, **fields)
    )
    assert "thinking" not in translated.body and translated.notes == [note]


# -- tools


def test_custom_and_namespace_tools_are_flat_functions_with_the_grammar_described() -> None:
    body = translate(request([user("Hi.")], tools=[APPLY_PATCH, MULTI_AGENT])).body
    patch, spawn, wait = body["tools"]
    assert patch["name"] == "apply_patch"
    assert patch["input_schema"]["properties"] == {
        CUSTOM_INPUT_PARAM: {"type": "string", "description": "The raw tool input."}
    }
    assert "grammar" in patch["description"] and "begin_patch" in patch["description"]
    assert (spawn["name"], wait["name"]) == ("multi_agent_v1__spawn_agent", "multi_agent_v1__wait_agent")
    assert "encrypted" not in orjson.dumps(spawn["input_schema"]).decode()


def test_custom_and_namespaced_calls_in_the_history_use_the_flat_names_and_the_input_string() -> None:
    items = [
        user("go"),
        {"type": "custom_tool_call", "call_id": "call_p", "name": "apply_patch", "input": "*** Begin Patch"},
        {"type": "custom_tool_call_output", "call_id": "call_p", "output": "ok"},
        call("call_s", name="spawn_agent", namespace="multi_agent_v1", arguments='{"message":"x"}'),
        output("call_s"),
    ]
    messages = translate(request(items, tools=CODEX_TOOLS)).body["messages"]
    assert messages[1]["content"][0] == {
        "type": "tool_use",
        "id": "call_p",
        "name": "apply_patch",
        "input": {"input": "*** Begin Patch"},
    }
    assert messages[3]["content"][0]["name"] == "multi_agent_v1__spawn_agent"


@pytest.mark.parametrize(
    "choice,expected",
    [
        ("auto", {"type": "auto"}),
        ("required", {"type": "any"}),
        ("none", {"type": "none"}),
        ({"type": "function", "name": "exec_command"}, {"type": "tool", "name": "exec_command"}),
        ({"type": "custom", "name": "apply_patch"}, {"type": "tool", "name": "apply_patch"}),
    ],
)
def test_tool_choice(choice: Any, expected: JSON) -> None:
    body = translate(request([user("Hi.")], tools=[EXEC_COMMAND, APPLY_PATCH], tool_choice=choice)).body
    assert body["tool_choice"] == expected


def test_no_parallel_calls_and_a_choice_of_a_missing_tool() -> None:
    body = translate(request([user("Hi.")], tools=[EXEC_COMMAND], parallel_tool_calls=False)).body
    assert body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    with pytest.raises(InvalidRequest) as caught:
        translate(
            request([user("Hi.")], tools=[EXEC_COMMAND], tool_choice={"type": "function", "name": "nope"})
        )
    assert caught.value.param == "tool_choice.name"


def test_a_history_of_calls_with_no_tools_now_declares_them_and_allows_none() -> None:
    body = translate(request([user("go"), call("call_1"), output("call_1"), user("thanks")])).body
    assert body["tools"] == [{"name": "exec_command", "input_schema": {"type": "object", "properties": {}}}]
    assert body["tool_choice"] == {"type": "none"}


def test_call_ids_anthropic_would_refuse_are_made_valid_on_both_sides() -> None:
    items = [user("go"), call("call:1/x"), output("call:1/x")]
    messages = translate(request(items, tools=[EXEC_COMMAND])).body["messages"]
    assert messages[1]["content"][0]["id"] == messages[2]["content"][0]["tool_use_id"] == "call_1_x"


# -- parts


def test_images_files_and_tool_output_parts() -> None:
    png = base64.b64encode(b"\x89PNG fake").decode()
    pdf = base64.b64encode(text_pdf([["Quarterly report"]])).decode()
    content = [
        {"type": "input_text", "text": "Look:"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{png}"},
        {"type": "input_image", "image_url": "https://example.com/cat.jpg"},
        {"type": "input_file", "filename": "report.pdf", "file_data": f"data:application/pdf;base64,{pdf}"},
        {"type": "input_file", "filename": "notes.md", "file_data": base64.b64encode(b"# Notes").decode()},
    ]
    items = [
        {"type": "message", "role": "user", "content": content},
        call("call_1"),
        output(
            "call_1",
            [
                {"type": "input_text", "text": "shot:"},
                {"type": "input_image", "image_url": f"data:image/png;base64,{png}"},
            ],
        ),
    ]
    messages = translate(request(items, tools=[EXEC_COMMAND])).body["messages"]
    blocks = messages[0]["content"]
    assert blocks[1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": png},
    }
    assert blocks[2] == {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}}
    assert blocks[3]["type"] == "document" and blocks[3]["title"] == "report.pdf"
    assert base64.b64decode(blocks[3]["source"]["data"]) == text_pdf([["Quarterly report"]])
    assert blocks[4]["type"] == "text" and "# Notes" in blocks[4]["text"]
    assert kinds({"content": messages[2]["content"][0]["content"]}) == ["text", "image"]


def test_an_image_anthropic_cannot_take_is_refused_naming_it() -> None:
    bad = [
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_image", "image_url": "data:image/tiff;base64,AAAA"}],
        }
    ]
    with pytest.raises(InvalidRequest) as caught:
        translate(request(bad))
    assert caught.value.param == "input[0].content[0].image_url"


# -- the other fields


def test_sampling_stop_user_and_the_output_format() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "required": ["a"],
        "additionalProperties": False,
    }
    body = translate(request(
        [user("Hi.")], temperature=0.2, top_p=0.9, top_k=40, stop=["END", "\n\n"], user="u-1",
        max_output_tokens=700, text={"format": {"type": "json_schema", "name": "x", "schema": schema}},
    )).body  # fmt: skip
    assert (body["temperature"], body["top_p"], body["top_k"], body["max_tokens"]) == (0.2, 0.9, 40, 700)
    assert body["stop_sequences"] == ["END"] and body["metadata"] == {"user_id": "u-1"}
    assert body["output_config"] == {"format": {"type": "json_schema", "schema": schema}}
    translated = translate(request([user("Hi.")], stop=["\n\n"]))
    assert "stop_sequences" not in translated.body and translated.gateway_stops == ["\n\n"]
    json_object = translate(request([user("Hi.")], text={"format": {"type": "json_object"}})).body
    assert json_object["system"][-1]["text"] == JSON_OBJECT_NOTE


@pytest.mark.parametrize(
    "fields,param",
    [
        ({"temperature": 1.5}, "temperature"),
        ({"seed": 7}, "seed"),
        ({"frequency_penalty": 0.5}, "frequency_penalty"),
    ],
)
def test_what_anthropic_has_no_place_for_is_refused_naming_the_field(fields: JSON, param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        translate(request([user("Hi.")], **fields))
    assert caught.value.param == param


def test_max_tokens_defaults_per_model_and_is_held_to_the_window() -> None:
    assert default_max_tokens("claude-opus-4-1-20250805") == 32000
    assert default_max_tokens("claude-3-5-haiku-latest") == 8192
    assert default_max_tokens("qwen3-coder") == 8192
    long = "word " * 20_000  # ~100 KB: some 33k tokens reckoned high
    windowed = MessagesOptions(prompt_cache=False, context_window=40_000)
    body = translate(request([user(long)]), windowed, model="qwen3-coder").body
    assert (
        1024 <= body["max_tokens"] < 8192
        and body["max_tokens"] + len(orjson.dumps(body["messages"])) // 3 <= 40_000
    )


# -- pass-through


def test_a_messages_body_passes_through_with_its_blocks_and_betas() -> None:
    client = {
        "model": "claude-code-main",
        "max_tokens": 32000,
        "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": "Hi"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Hm.", "signature": sign("Hm.")},
                    {"type": "text", "text": "Hello"},
                ],
            },
            {
                "role": "user",
                "content": [{"type": "text", "text": "More", "cache_control": {"type": "ephemeral"}}],
            },
        ],
        "thinking": {"type": "enabled", "budget_tokens": 31999},
        "stream": False,
    }
    canonical = parse_request(request([user("Hi")]))
    canonical.native = NativeRequest(
        "messages", client, {"anthropic-beta": "interleaved-thinking-2025-05-14, context-1m"}
    )
    windowed = MessagesOptions(context_window=20_000)
    translated = to_messages_request(canonical, MODEL, windowed)
    body = translated.body
    assert body["model"] == MODEL and body["stream"] is True and body["max_tokens"] < 20_000
    assert body["thinking"]["budget_tokens"] < body["max_tokens"]
    assert body["messages"] == client["messages"] and body["system"] == client["system"]  # as sent
    assert translated.betas == ["interleaved-thinking-2025-05-14", "context-1m"]
    validate(body)


def test_a_passed_through_body_leaves_out_thinking_the_gateway_signed() -> None:
    """A Claude Code session that moved here from a chat member of its pool: that member's
    reasoning came to the client signed `cgs1:` (the gateway's), which Anthropic would refuse;
    inside a tool loop without signed thinking left, the request asks for none."""
    theirs = {"type": "thinking", "thinking": "", "signature": "cgs1:cgr2:looked at the file"}
    client = {
        "model": "claude-code-main",
        "max_tokens": 32000,
        "messages": [
            {"role": "user", "content": "Fix it"},
            {
                "role": "assistant",
                "content": [
                    theirs,
                    {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}},
                ],
            },  # fmt: skip
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.py"}]},
        ],
        "tools": [{"name": "Bash", "input_schema": {"type": "object", "properties": {"command": {}}}}],
        "thinking": {"type": "adaptive", "display": "omitted"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    }
    canonical = parse_request(request([user("Fix it")]))
    canonical.native = NativeRequest("messages", client)
    translated = to_messages_request(canonical, MODEL)
    body = translated.body
    assert [b["type"] for b in body["messages"][1]["content"]] == ["tool_use"]
    assert "thinking" not in body and body["context_management"] == {"edits": []}
    assert translated.notes == ["thinking_off.unsigned_turn"]
    assert client["messages"][1]["content"][0] is theirs  # the client's body is not changed
    validate(body)
    own = {"type": "thinking", "thinking": "Hm.", "signature": sign("Hm.")}
    client["messages"][1]["content"] = [own, theirs, client["messages"][1]["content"][1]]
    kept = to_messages_request(canonical, MODEL).body
    assert kept["messages"][1]["content"][0] == own and "thinking" in kept


def test_a_passed_through_body_without_cache_control_gets_the_breakpoints() -> None:
    client = {
        "model": "x",
        "max_tokens": 100,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": "Hi"}],
    }
    canonical = parse_request(request([user("Hi")]))
    canonical.native = NativeRequest("messages", client)
    body = to_messages_request(canonical, MODEL).body
    assert body["system"] == [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
    assert body["messages"][0]["content"] == [
        {"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral"}}
    ]
    assert client["system"] == "Be brief."  # the client's body itself is not changed
