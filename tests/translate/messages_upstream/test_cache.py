"""The cache breakpoints the gateway places (translate/messages_upstream/cache.py): where they
go, what they leave alone, and that each turn of a growing Codex conversation reads the one
before from the cache under Anthropic's rules (tests/support/fake_messages_upstream.py)."""

from __future__ import annotations

from typing import Any

from codexgate.translate.messages_upstream.cache import EPHEMERAL, has_cache_control, place_breakpoints
from codexgate.translate.messages_upstream.request import MessagesOptions, to_messages_request
from codexgate.wire.responses import parse_request
from tests.support.codex_requests import CODEX_TOOLS, text_message
from tests.support.fake_messages_upstream import CacheBook, validate

JSON = dict[str, Any]


def marked(body: JSON) -> list[str]:
    """Where the breakpoints are: `tools[i]`, `system[i]`, `messages[i][j]`."""
    found = [f"tools[{i}]" for i, t in enumerate(body.get("tools") or ()) if "cache_control" in t]
    found += [f"system[{i}]" for i, b in enumerate(body.get("system") or ()) if "cache_control" in b]
    for i, message in enumerate(body["messages"]):
        content = message["content"]
        found += [
            f"messages[{i}][{j}]"
            for j, b in enumerate(content if isinstance(content, list) else ())
            if "cache_control" in b
        ]
    return found


def codex_turn(turns: int) -> JSON:
    """A Codex request after `turns` tool calls: a long system prompt, then calls and outputs."""
    items: list[JSON] = [
        text_message("developer", "You are Codex. " + "Follow the rules. " * 400),
        text_message("user", "Fix the build."),
    ]
    for n in range(turns):
        items.append(
            {
                "type": "function_call",
                "call_id": f"call_{n}",
                "name": "exec_command",
                "arguments": f'{{"cmd":"step {n}"}}',
            }
        )
        items.append({"type": "function_call_output", "call_id": f"call_{n}", "output": f"output {n} " * 200})
    return {"model": "m", "input": items, "tools": CODEX_TOOLS}


def test_the_tools_the_system_the_previous_end_and_the_end_are_marked() -> None:
    body = to_messages_request(parse_request(codex_turn(3)), "claude-sonnet-4-5").body
    last = len(body["messages"]) - 1
    assert marked(body) == [
        f"tools[{len(body['tools']) - 1}]",
        "system[1]",
        f"messages[{last - 2}][0]",
        f"messages[{last}][0]",
    ]
    validate(body)


def test_the_first_turn_marks_its_end_only_and_thinking_blocks_are_skipped() -> None:
    body = {"messages": [{"role": "user", "content": "Hi"}]}
    assert place_breakpoints(body) == 1
    assert body["messages"][0]["content"] == [{"type": "text", "text": "Hi", "cache_control": EPHEMERAL}]
    thinking = {"type": "thinking", "thinking": "t", "signature": "s"}
    body = {
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": [{"type": "text", "text": "a"}, thinking]},
        ]
    }
    place_breakpoints(body)
    assert body["messages"][1]["content"] == [
        {"type": "text", "text": "a", "cache_control": EPHEMERAL},
        thinking,
    ]


def test_a_client_s_own_cache_control_anywhere_leaves_the_body_alone() -> None:
    inside = {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "t",
                "content": [{"type": "text", "text": "x", "cache_control": EPHEMERAL}],
            }
        ],
    }
    assert has_cache_control({"messages": [inside]})
    assert has_cache_control(
        {"system": [{"type": "text", "text": "s", "cache_control": EPHEMERAL}], "messages": []}
    )
    assert not has_cache_control({"system": "s", "messages": [{"role": "user", "content": "x"}]})


def test_shared_blocks_are_copied_not_changed() -> None:
    tools = [{"name": "a", "input_schema": {"type": "object"}}]
    block = {"type": "text", "text": "Hi"}
    body = {"tools": tools, "messages": [{"role": "user", "content": [block]}]}
    place_breakpoints(body)
    assert "cache_control" not in tools[0] and "cache_control" not in block


def test_prompt_cache_off_places_none() -> None:
    body = to_messages_request(
        parse_request(codex_turn(2)), "claude-sonnet-4-5", MessagesOptions(prompt_cache=False)
    ).body
    assert marked(body) == []


def test_each_turn_of_a_growing_conversation_reads_the_one_before_from_the_cache() -> None:
    # Each request reads exactly all of the one before (its whole prompt), and writes the rest.
    book = CacheBook()
    totals, reads = [], []
    for turns in range(6):
        body = to_messages_request(parse_request(codex_turn(turns)), "claude-sonnet-4-5").body
        usage = book.account(body)
        totals.append(
            usage["input_tokens"] + usage["cache_read_input_tokens"] + usage["cache_creation_input_tokens"]
        )
        reads.append(usage["cache_read_input_tokens"])
        assert usage["input_tokens"] == 0  # nothing after the last breakpoint: all of it written
    assert reads == [0, *totals[:-1]]


def test_without_breakpoints_nothing_is_read() -> None:
    book = CacheBook()
    off = MessagesOptions(prompt_cache=False)
    for turns in range(3):
        usage = book.account(to_messages_request(parse_request(codex_turn(turns)), "m", off).body)
    assert usage["cache_read_input_tokens"] == 0 and usage["cache_creation_input_tokens"] == 0
