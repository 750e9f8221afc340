"""A Messages request -> the canonical request (translate/messages_face/request.py): each field
and block becomes what docs/faces.md ("The Messages face") says, the result is a valid
canonical request every backend reads, and the body travels whole beside it."""

from __future__ import annotations

import base64
import copy
from typing import Any

import orjson
import pytest

from codexgate.errors import InvalidRequest
from codexgate.translate.chat_upstream.request import to_chat_request
from codexgate.translate.dialect import ChatDialect
from codexgate.translate.files import file_text
from codexgate.translate.messages_face.request import (
    _RECENT_TOOLS,
    MessagesAsk,
    budget_effort,
    parse_messages_request,
    session_id,
)
from codexgate.translate.messages_face.thinking import reasoning_item, thinking_block
from codexgate.translate.reasoning import decode_reasoning, decode_thinking, encode_reasoning
from codexgate.wire.responses import parse_request
from tests.support.pdfs import text_pdf

SCHEMA_2020 = "https://json-schema.org/draft/2020-12/schema"
USER_ID = '{"device_id":"d1","account_uuid":"","session_id":"4f1c-session"}'
HEADERS = {
    "anthropic-version": "2023-06-01",
    "anthropic-beta": "claude-code-20250219, interleaved-thinking-2025-05-14,context-management-2025-06-27",
    "anthropic-dangerous-direct-browser-access": "true",
    "x-app": "cli",
    "User-Agent": "claude-cli/2.1.328 (external, sdk-cli)",
}


def claude_code_body() -> dict[str, Any]:
    """The shape Claude Code 2.1.328 sends (shared/reference/claude-code-wire.md), shortened."""
    return {
        "model": "qwen3-coder",
        "max_tokens": 32000,
        "stream": True,
        "system": [
            {
                "type": "text",
                "text": "x-anthropic-billing-header: cc_version=2.1.328.abc; cc_entrypoint=sdk-cli;",
            },
            {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Be concise.", "cache_control": {"type": "ephemeral"}},
        ],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "<system-reminder>ctx</system-reminder>"},
                    {"type": "text", "text": "say hi", "cache_control": {"type": "ephemeral"}},
                ],
            },
            {"role": "system", "content": [{"type": "text", "text": "Working directory: /work"}]},
        ],
        "tools": [
            {
                "name": "Bash",
                "description": "Run a shell command.",
                "input_schema": {
                    "$schema": SCHEMA_2020,
                    "type": "object",
                    "properties": {"command": {"type": "string"}, "timeout": {"type": "number"}},
                    "required": ["command"],
                    "additionalProperties": False,
                },
            },
            {"name": "DeferredToolPlaceholder", "description": "", "input_schema": {"$schema": SCHEMA_2020}},
        ],
        "metadata": {"user_id": USER_ID},
        "thinking": {"type": "enabled", "budget_tokens": 31999, "display": "omitted"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "high"},
    }


def ask_of(body: dict[str, Any], headers: dict[str, str] | None = None, **kwargs: Any) -> MessagesAsk:
    return parse_messages_request(body, headers, **kwargs)


def minimal(messages: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 100, "messages": messages, **fields}


def items_of(messages: list[dict[str, Any]], **fields: Any) -> list[dict[str, Any]]:
    return ask_of(minimal(messages, **fields)).request.input


def canonical_body(ask: MessagesAsk) -> dict[str, Any]:
    """The canonical request as a Responses body, to hold it to the Responses face's checks."""
    req = ask.request
    body: dict[str, Any] = {
        "model": req.model,
        "input": req.input,
        "tools": req.tools,
        "tool_choice": req.tool_choice,
    }
    for name in ("instructions", "reasoning", "text", "max_output_tokens", "temperature", "top_p", "user",
                 "parallel_tool_calls", "prompt_cache_key", "stop", "store"):  # fmt: skip
        if getattr(req, name) is not None:
            body[name] = getattr(req, name)
    return body


# -- Claude Code's request


def test_claude_codes_request_becomes_the_canonical_request_every_backend_reads() -> None:
    body = claude_code_body()
    ask = ask_of(body, HEADERS)
    req = ask.request
    assert req.instructions == "You are Claude Code.\n\nBe concise."  # the billing line left out
    assert req.input == [
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "<system-reminder>ctx</system-reminder>"},
            {"type": "input_text", "text": "say hi"},
        ]},
        {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "Working directory: /work"}]},
    ]  # fmt: skip
    assert req.tools[0] == {
        "type": "function",
        "name": "Bash",
        "description": "Run a shell command.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}, "timeout": {"type": "number"}},
            "required": ["command"],
            "additionalProperties": False,
        },
    }
    assert req.tools[1]["parameters"] == {}
    assert (req.tool_choice, req.parallel_tool_calls) == ("auto", None)
    assert req.reasoning == {"effort": "high"}  # a 31,999 budget; no summary: display omitted
    assert (req.max_output_tokens, req.stream, req.store) == (32000, True, False)
    assert req.user == USER_ID
    assert ask.conversation_key == req.prompt_cache_key == "4f1c-session"
    assert (ask.model, ask.thinking, ask.display, ask.shows_thinking) == (
        "qwen3-coder",
        "enabled",
        "omitted",
        False,
    )
    assert ask.context_management == body["context_management"]
    assert ask.version == "2023-06-01"
    assert ask.betas == (
        "claude-code-20250219",
        "interleaved-thinking-2025-05-14",
        "context-management-2025-06-27",
    )
    parse_request(canonical_body(ask))  # a request the Responses face itself would accept


def test_the_body_and_the_anthropic_headers_travel_whole_for_a_messages_upstream() -> None:
    body = claude_code_body()
    native = ask_of(body, HEADERS).request.native
    assert native is not None and native.dialect == "messages"
    assert native.body == claude_code_body()  # the billing line, cache_control, $schema: all kept
    assert native.headers == {
        "anthropic-version": "2023-06-01",
        "anthropic-beta": HEADERS["anthropic-beta"],
        "anthropic-dangerous-direct-browser-access": "true",
    }


def test_a_chat_upstream_is_given_claude_codes_request_with_the_later_system_message_merged() -> None:
    chat = to_chat_request(ask_of(claude_code_body()).request, ChatDialect(), "qwen").body
    roles = [message["role"] for message in chat["messages"]]
    assert roles[0] == "system" and "system" not in roles[1:]  # one leading system message
    assert "Working directory: /work" in orjson.dumps(chat["messages"]).decode()
    assert "x-anthropic-billing-header" not in orjson.dumps(chat).decode()
    assert "$schema" not in orjson.dumps(chat["tools"]).decode()


def test_the_same_tools_each_turn_are_the_same_canonical_tool_objects() -> None:
    first, second = ask_of(claude_code_body()).request, ask_of(claude_code_body()).request
    assert all(a is b for a, b in zip(first.tools, second.tools, strict=True))
    changed = claude_code_body()
    changed["tools"][0]["description"] = "Run it."
    assert ask_of(changed).request.tools[0]["description"] == "Run it."


# -- the conversation


def test_the_session_header_wins_over_the_user_id() -> None:
    ask = ask_of(claude_code_body(), {"X-Claude-Code-Session-Id": "from-header"})
    assert ask.conversation_key == "from-header"


@pytest.mark.parametrize(
    ("user_id", "session"),
    [
        (USER_ID, "4f1c-session"),
        ("user_ab12_account_9f_session_77aa-bb", "77aa-bb"),  # Claude Code before 2.1
        ('{"device_id": "d"}', None),
        ("{not json", None),
        ("someone@example.com", None),
        (None, None),
    ],
)
def test_the_session_is_read_from_the_user_id_when_there_is_no_header(
    user_id: str | None, session: str | None
) -> None:
    assert session_id(user_id, {}) == session


def test_a_sub_agent_is_a_conversation_of_its_own_within_the_session() -> None:
    session = "747e2453-3c3a-4eb9-bb90-eea930aa086a"
    main = {"x-claude-code-session-id": session}
    sub = {**main, "x-claude-code-agent-id": "a530c6b25ac91d3b2"}
    assert session_id(USER_ID, main) == session
    assert session_id(USER_ID, sub) == f"{session}/agent/a530c6b25ac91d3b2"
    assert session_id(USER_ID, {"x-claude-code-agent-id": "a5"}) == "4f1c-session/agent/a5"
    assert session_id(None, {"x-claude-code-agent-id": "a5"}) is None  # no session: no key
    ask = ask_of(minimal([{"role": "user", "content": "hi"}]), headers=sub)
    assert ask.conversation_key == ask.request.prompt_cache_key == session_id(USER_ID, sub)


def test_without_a_session_there_is_no_conversation_key() -> None:
    ask = ask_of(minimal([{"role": "user", "content": "hi"}]))
    assert ask.conversation_key is None and ask.request.prompt_cache_key is None and ask.request.user is None


# -- system


def test_a_string_system_is_the_instructions() -> None:
    assert (
        ask_of(minimal([{"role": "user", "content": "hi"}], system="Be brief.")).request.instructions
        == "Be brief."
    )
    assert ask_of(minimal([{"role": "user", "content": "hi"}], system="")).request.instructions is None


def test_a_system_message_stays_in_its_place_and_one_cleared_by_a_later_user_message_goes() -> None:
    items = items_of([
        {"role": "user", "content": "a"},
        {"role": "system", "content": "shown", "clear_at": "never"},
        {"role": "system", "content": "until the next user message", "clear_at": "next_user_message"},
        {"role": "user", "content": "b"},
        {"role": "system", "content": "still shown", "clear_at": "next_user_message"},
    ])  # fmt: skip
    assert [(item["role"], item["content"]) for item in items] == [
        ("user", "a"), ("system", "shown"), ("user", "b"), ("system", "still shown"),
    ]  # fmt: skip


def test_tool_changes_in_system_messages_change_the_tools_in_order() -> None:
    late = {"name": "Late", "input_schema": {"type": "object"}}
    body = minimal(
        [
            {"role": "user", "content": "a"},
            {"role": "system", "content": [
                {"type": "tool_addition", "tool": {"type": "tool_definition", "definition": late}},
                {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "Write"}},
            ]},
            {"role": "system", "content": [
                {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "Read"}},
                {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "Read"}},
                {"type": "text", "text": "Read is back."},
            ]},
        ],
        tools=[{"name": name, "input_schema": {"type": "object"}} for name in ("Read", "Write")],
    )  # fmt: skip
    req = ask_of(body).request
    assert [tool["name"] for tool in req.tools] == ["Late", "Read"]  # Read offered again, last
    assert req.input[1:] == [
        {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "Read is back."}]}
    ]


def test_a_deferred_tool_is_offered_only_once_a_tool_reference_loads_it() -> None:
    """Claude Code's tool search: `defer_loading` tools (and its placeholder, never loaded) stay
    out of what the model sees until a ToolSearch result names one."""
    schema = {"type": "object", "properties": {}}
    tools = [
        {"name": "ToolSearch", "input_schema": schema},
        {"name": "WebFetch", "input_schema": schema, "defer_loading": True},
        {"name": "DeferredToolPlaceholder", "input_schema": schema, "defer_loading": True},
    ]
    search = {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "ToolSearch", "input": {"query": "select:WebFetch"}},
    ]}  # fmt: skip
    found = {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "tool_reference", "tool_name": "WebFetch"}]},
    ]}  # fmt: skip
    before = ask_of(minimal([{"role": "user", "content": "fetch it"}], tools=tools)).request
    after = ask_of(minimal([{"role": "user", "content": "fetch it"}, search, found], tools=tools)).request
    forced = ask_of(minimal([{"role": "user", "content": "x"}], tools=tools,
                            tool_choice={"type": "tool", "name": "WebFetch"})).request  # fmt: skip
    assert [tool["name"] for tool in before.tools] == ["ToolSearch"]
    assert [tool["name"] for tool in after.tools] == ["ToolSearch", "WebFetch"]
    assert [tool["name"] for tool in forced.tools] == ["ToolSearch", "WebFetch"]
    assert forced.tool_choice == {"type": "function", "name": "WebFetch"}


# -- user content


def test_user_blocks_become_input_parts_in_order() -> None:
    pdf = base64.b64encode(text_pdf([["Quarterly figures"]])).decode()
    [message] = items_of([{"role": "user", "content": [
        {"type": "text", "text": "look"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": pdf},
         "title": "q3.pdf"},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": pdf}},
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "line 1\n"},
         "title": "notes.txt", "context": "from the user's desk"},
        {"type": "document", "source": {"type": "content", "content": [
            {"type": "text", "text": "part one"}, {"type": "text", "text": "part two"},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/b.png"}},
        ]}},
        {"type": "document", "source": {"type": "content", "content": "plain"}, "title": "t"},
        {"type": "search_result", "source": "https://docs", "title": "Docs", "content": [
            {"type": "text", "text": "found it"},
        ]},
    ]}])  # fmt: skip
    assert message["role"] == "user"
    assert message["content"] == [
        {"type": "input_text", "text": "look"},
        {"type": "input_image", "image_url": "data:image/png;base64,iVBOR", "detail": "auto"},
        {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "auto"},
        {"type": "input_file", "filename": "q3.pdf", "file_data": f"data:application/pdf;base64,{pdf}"},
        {"type": "input_file", "filename": "document.pdf", "file_data": f"data:application/pdf;base64,{pdf}"},
        {"type": "input_text", "text": "Context of notes.txt: from the user's desk"},
        {"type": "input_text", "text": "--- file: notes.txt ---\nline 1\n--- end of notes.txt ---"},
        {
            "type": "input_text",
            "text": "--- file: document ---\npart one\n\npart two\n--- end of document ---",
        },
        {"type": "input_image", "image_url": "https://example.com/b.png", "detail": "auto"},
        {"type": "input_text", "text": "--- file: t ---\nplain\n--- end of t ---"},
        {"type": "input_text", "text": "Search result: Docs\nSource: https://docs\n\nfound it"},
    ]
    # The PDF is read by the reader every input_file goes through.
    assert "Quarterly figures" in file_text(message["content"][3], "input[0].content[3]")


def test_a_user_message_of_tool_results_and_text_is_the_outputs_then_the_rest() -> None:
    items = items_of([{"role": "user", "content": [
        {"type": "text", "text": "before"},
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt\nb.txt"},
        {"type": "tool_result", "tool_use_id": "toolu_2", "content": [
            {"type": "text", "text": "here"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"}},
            {"type": "tool_reference", "tool_name": "Write"},
        ]},
        {"type": "tool_result", "tool_use_id": "toolu_3"},
        {"type": "text", "text": "after"},
    ]}])  # fmt: skip
    assert items == [
        {"type": "function_call_output", "call_id": "toolu_1", "output": "a.txt\nb.txt"},
        {"type": "function_call_output", "call_id": "toolu_2", "output": [
            {"type": "input_text", "text": "here"},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBOR", "detail": "auto"},
            {"type": "input_text", "text": "Tool loaded: Write"},
        ]},
        {"type": "function_call_output", "call_id": "toolu_3", "output": ""},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "before"}, {"type": "input_text", "text": "after"},
        ]},
    ]  # fmt: skip


def test_a_user_message_of_tool_results_alone_is_their_outputs_alone() -> None:
    items = items_of(
        [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]}]
    )
    assert items == [{"type": "function_call_output", "call_id": "t", "output": "ok"}]


def test_a_failed_tool_result_says_so_to_the_model() -> None:
    items = items_of([{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": "Exit code 1", "is_error": True},
        {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": "denied"}], "is_error": True},
        {"type": "tool_result", "tool_use_id": "t3", "is_error": True},
    ]}])  # fmt: skip
    assert [item["output"] for item in items] == [
        "Error: Exit code 1",
        [{"type": "input_text", "text": "Error:"}, {"type": "input_text", "text": "denied"}],
        "Error: ",
    ]


# -- assistant content and thinking


def test_assistant_blocks_become_items_in_their_order() -> None:
    items = items_of([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Plan.", "signature": "cgs1:cgr2:Plan."},
            {"type": "text", "text": "I will "},
            {"type": "text", "text": "list."},
            {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls", "n": [1, 2]}},
            {"type": "tool_use", "id": "toolu_2", "name": "Read", "input": {}},
        ]},
        {"role": "assistant", "content": "Plain."},
    ])  # fmt: skip
    assert items[1:] == [
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Plan."}], "encrypted_content": "cgr2:Plan."},
        {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "I will "}, {"type": "output_text", "text": "list."},
        ]},
        {"type": "function_call", "call_id": "toolu_1", "name": "Bash", "arguments": '{"command":"ls","n":[1,2]}'},
        {"type": "function_call", "call_id": "toolu_2", "name": "Read", "arguments": "{}"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Plain."}]},
    ]  # fmt: skip


def test_a_thinking_block_signed_by_the_gateway_returns_its_blob() -> None:
    item = reasoning_item(
        {"type": "thinking", "thinking": "", "signature": "cgs1:" + encode_reasoning("hidden")}
    )
    assert item == {"type": "reasoning", "summary": [], "encrypted_content": "cgr2:hidden"}
    assert decode_reasoning(item["encrypted_content"]) == "hidden"  # display omitted: still returns
    assert reasoning_item({"type": "thinking", "thinking": "t", "signature": "cgs1:"}) == {
        "type": "reasoning", "summary": [{"type": "summary_text", "text": "t"}],
    }  # fmt: skip


def test_anthropics_own_thinking_blocks_are_kept_whole() -> None:
    signed = {"type": "thinking", "thinking": "Hmm.", "signature": "EqQBCkYIBxgCKkDj"}
    redacted = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}
    for block in (signed, redacted):
        item = reasoning_item(block)
        assert decode_thinking(item["encrypted_content"]) == block
        assert thinking_block(item) == block  # and go out again exactly
    assert reasoning_item(signed)["summary"] == [{"type": "summary_text", "text": "Hmm."}]
    assert reasoning_item(redacted)["summary"] == []


def test_a_reasoning_item_goes_out_and_comes_back_as_itself() -> None:
    item = {
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "Why."}],
        "encrypted_content": "cgr2:Why.",
    }
    assert thinking_block(item) == {"type": "thinking", "thinking": "Why.", "signature": "cgs1:cgr2:Why."}
    assert reasoning_item(thinking_block(item) or {}) == item
    hidden = thinking_block(item, shown=False)
    assert hidden == {"type": "thinking", "thinking": "", "signature": "cgs1:cgr2:Why."}
    assert decode_reasoning(reasoning_item(hidden)["encrypted_content"]) == "Why."
    assert thinking_block({"type": "reasoning", "summary": []}) is None  # nothing to carry


# -- tools and tool choice


def test_server_tools_are_left_out_and_named_to_the_model() -> None:
    body = minimal(
        [{"role": "user", "content": "search"}],
        system="Be brief.",
        tools=[
            {"name": "Bash", "input_schema": {"type": "object"}},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
            {"type": "code_execution_20250825", "name": "code_execution"},
        ],
    )
    ask = ask_of(body)
    assert [tool["name"] for tool in ask.request.tools] == ["Bash"]
    assert ask.server_tools == ("web_search_20250305", "code_execution_20250825")
    instructions = ask.request.instructions or ""
    assert instructions.startswith("Be brief.\n\nNote: these tools are not available here")
    assert "web_search, code_execution" in instructions


@pytest.mark.parametrize(
    ("choice", "canonical", "parallel"),
    [
        ({"type": "auto"}, "auto", None),
        ({"type": "any"}, "required", None),
        ({"type": "none"}, "none", None),
        ({"type": "tool", "name": "Bash"}, {"type": "function", "name": "Bash"}, None),
        ({"type": "auto", "disable_parallel_tool_use": True}, "auto", False),
        ({"type": "any", "disable_parallel_tool_use": False}, "required", None),
    ],
)
def test_tool_choice_becomes_the_canonical_choice(
    choice: dict[str, Any], canonical: Any, parallel: bool | None
) -> None:
    body = minimal(
        [{"role": "user", "content": "x"}], tools=[{"name": "Bash", "input_schema": {}}], tool_choice=choice
    )
    req = ask_of(body).request
    assert (req.tool_choice, req.parallel_tool_calls) == (canonical, parallel)


@pytest.mark.parametrize(
    ("choice", "param", "words"),
    [
        (
            {"type": "tool", "name": "web_search"},
            "tool_choice.name",
            "a tool the API runs (web_search_20250305)",
        ),
        ({"type": "tool", "name": "Nope"}, "tool_choice.name", "no tool named 'Nope'"),
    ],
)
def test_a_tool_choice_forcing_a_tool_the_gateway_cannot_offer_is_refused(
    choice: dict[str, Any], param: str, words: str
) -> None:
    tools = [{"name": "Bash", "input_schema": {}}, {"type": "web_search_20250305", "name": "web_search"}]
    with pytest.raises(InvalidRequest) as caught:
        ask_of(minimal([{"role": "user", "content": "x"}], tools=tools, tool_choice=choice))
    assert caught.value.param == param and words in caught.value.message


def test_any_tool_with_only_server_tools_is_refused() -> None:
    tools = [{"type": "web_fetch_20250910", "name": "web_fetch"}]
    with pytest.raises(InvalidRequest) as caught:
        ask_of(minimal([{"role": "user", "content": "x"}], tools=tools, tool_choice={"type": "any"}))
    assert caught.value.param == "tool_choice.type"


# -- reasoning and the sampling fields


@pytest.mark.parametrize(
    ("budget", "effort"),
    [(1024, "low"), (4000, "low"), (4096, "medium"), (10000, "medium"), (16384, "high"), (31999, "high")],
)
def test_a_thinking_budget_is_an_effort(budget: int, effort: str) -> None:
    assert budget_effort(budget) == effort


@pytest.mark.parametrize(
    ("thinking", "output_config", "reasoning"),
    [
        ({"type": "enabled", "budget_tokens": 2048}, None, {"effort": "low", "summary": "auto"}),
        ({"type": "enabled", "budget_tokens": 31999, "display": "summarized"}, {"effort": "low"},
         {"effort": "high", "summary": "auto"}),
        ({"type": "adaptive"}, None, {"effort": "medium", "summary": "auto"}),
        ({"type": "adaptive", "display": "updates"}, {"effort": "low"}, {"effort": "low", "summary": "auto"}),
        ({"type": "adaptive", "display": "omitted"}, {"effort": "max"}, {"effort": "xhigh"}),
        ({"type": "between_tools"}, {"effort": "xhigh"}, {"effort": "xhigh", "summary": "auto"}),
        ({"type": "disabled"}, {"effort": "high"}, None),
        (None, {"effort": "high"}, {"effort": "high"}),
        (None, None, None),
    ],
)  # fmt: skip
def test_thinking_and_effort_become_the_canonical_reasoning(
    thinking: dict[str, Any] | None, output_config: dict[str, Any] | None, reasoning: dict[str, Any] | None
) -> None:
    fields = {
        name: value for name, value in (("thinking", thinking), ("output_config", output_config)) if value
    }
    assert ask_of(minimal([{"role": "user", "content": "x"}], **fields)).request.reasoning == reasoning


def test_the_sampling_fields_are_carried() -> None:
    body = minimal(
        [{"role": "user", "content": "x"}],
        stop_sequences=["\n\nHuman:", "END"],
        temperature=0.2,
        top_p=0.95,
        top_k=40,
        stream=False,
    )
    req = ask_of(body).request
    assert (req.stop, req.temperature, req.top_p, req.extra, req.stream) == (
        ["\n\nHuman:", "END"], 0.2, 0.95, {"top_k": 40}, False,
    )  # fmt: skip
    assert ask_of(minimal([{"role": "user", "content": "x"}], stop_sequences=[])).request.stop is None


def test_structured_output_is_the_canonical_json_schema_format() -> None:
    schema = {"type": "object", "properties": {"title": {"type": "string"}}}
    body = minimal(
        [{"role": "user", "content": "x"}],
        output_config={"format": {"type": "json_schema", "schema": schema}},
    )
    assert ask_of(body).request.text == {
        "format": {"type": "json_schema", "name": "output", "schema": schema}
    }


def test_a_count_tokens_body_translates_without_max_tokens() -> None:
    ask = ask_of({"model": "m", "messages": [{"role": "user", "content": "foo"}]}, count_tokens=True)
    assert ask.request.max_output_tokens is None and ask.request.input[0]["content"] == "foo"


def test_translation_leaves_the_clients_body_unchanged() -> None:
    body = claude_code_body()
    body["messages"].append({"role": "assistant", "content": [
        {"type": "thinking", "thinking": "x", "signature": "sig"},
        {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}},
    ]})  # fmt: skip
    before = copy.deepcopy(body)
    ask_of(body)
    assert body == before


# -- the next request of a conversation


def next_turn(body: dict[str, Any], n: int) -> dict[str, Any]:
    """The conversation one turn further: a tool call, its result, and the user's next words."""
    following = copy.deepcopy(body)
    following["messages"] += [
        {"role": "assistant", "content": [{"type": "text", "text": f"Step {n}."},
                                          {"type": "tool_use", "id": f"t{n}", "name": "Bash", "input": {"command": "ls"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{n}", "content": "a\nb"},
                                     {"type": "text", "text": f"now step {n + 1}"}]},
    ]  # fmt: skip
    return following


def test_the_messages_known_from_the_last_request_keep_its_items_and_the_result_is_the_same() -> None:
    first = claude_code_body()
    earlier = ask_of(first)
    body = next_turn(first, 1)
    known = len(first["messages"])
    ask = ask_of(body, known=known, earlier=earlier)
    assert ask == ask_of(copy.deepcopy(body))
    assert ask.ends == ask_of(copy.deepcopy(body)).ends
    shared = earlier.ends[known - 1]
    assert all(a is b for a, b in zip(ask.request.input[:shared], earlier.request.input, strict=False))
    assert ask.request.input[shared] is not None and len(ask.request.input) > shared
    assert ask.request.input is not earlier.request.input  # the request's own list


def test_each_message_ends_where_its_items_do() -> None:
    ask = ask_of(next_turn(claude_code_body(), 1))
    # the user's two blocks, the system message, the assistant's text and call, the result and text
    assert ask.ends == (1, 2, 4, 6)
    assert ask.ends[-1] == len(ask.request.input)


def test_a_system_message_cleared_at_the_next_user_message_is_read_again_when_one_follows() -> None:
    first = minimal([
        {"role": "user", "content": "a"},
        {"role": "system", "content": "until the next user message", "clear_at": "next_user_message"},
    ])  # fmt: skip
    earlier = ask_of(first)
    assert [item["content"] for item in earlier.request.input] == ["a", "until the next user message"]
    assert earlier.ends == (1,)  # the items of the messages from the cleared one on are not kept
    body = minimal(
        [*first["messages"], {"role": "assistant", "content": "ok"}, {"role": "user", "content": "b"}]
    )
    ask = ask_of(body, known=2, earlier=earlier)
    assert ask == ask_of(copy.deepcopy(body))
    assert "until the next user message" not in [
        item["content"]
        for item in ask.request.input
        if item["type"] == "message" and isinstance(item["content"], str)
    ]


def test_a_tool_equal_to_the_one_translated_last_is_kept_as_the_latest_object() -> None:
    # The next request of a session read by its bytes holds that very object: no comparison.
    first, again = claude_code_body(), claude_code_body()
    canonical = ask_of(first).request.tools[0]
    assert ask_of(again).request.tools[0] is canonical
    assert _RECENT_TOOLS._by_name["Bash"][0] is again["tools"][0]
