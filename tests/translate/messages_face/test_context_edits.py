"""Anthropic's context editing as the gateway applies it to the canonical input
(translate/messages_face/context_edits.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from codexgate.errors import InvalidRequest
from codexgate.translate.messages_face.context_edits import (
    CLEAR_THINKING,
    CLEAR_TOOL_USES,
    CLEARED_RESULT,
    apply_edits,
    read_edits,
)

JSON = dict[str, Any]
OUTPUT = "line of output\n" * 40  # ~150 tokens


def user(text: str) -> JSON:
    return {"type": "message", "role": "user", "content": text}


def thought(text: str) -> JSON:
    return {
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": text}],
        "encrypted_content": "x" * 80,
    }


def call(n: int, name: str = "Bash") -> list[JSON]:
    return [
        {
            "type": "function_call",
            "call_id": f"toolu_{n}",
            "name": name,
            "arguments": f'{{"command": "ls {n}"}}',
        },
        {"type": "function_call_output", "call_id": f"toolu_{n}", "output": f"{n}: {OUTPUT}"},
    ]


def session(names: list[str]) -> list[JSON]:
    """A user's message, then a tool loop of one call per name, each after a thought."""
    items = [user("fix the build")]
    for n, name in enumerate(names):
        items += [thought(f"step {n}"), *call(n, name)]
    return items


def outputs(items: list[JSON]) -> list[str]:
    return [i["output"] for i in items if i["type"] == "function_call_output"]


def edits(*asked: JSON) -> Any:
    return read_edits({"edits": list(asked)}, "qwen3-coder")


def test_no_edits_and_keeping_every_thinking_block_ask_for_nothing() -> None:
    assert read_edits(None, "m") == [] and read_edits({}, "m") == []
    assert edits({"type": CLEAR_THINKING, "keep": "all"}) == []  # Claude Code 2.1.332's


def test_a_strategy_the_gateway_lacks_is_refused_as_anthropic_refuses_a_model_without_it() -> None:
    with pytest.raises(InvalidRequest) as caught:
        edits({"type": "compact_20260112"})
    # The words Claude Code recognises, after which it stops asking for the strategy.
    assert caught.value.message.startswith("qwen3-coder does not support the compact_20260112 context")
    assert caught.value.param == "context_management.edits.0.type"


@pytest.mark.parametrize(
    ("edit", "param"),
    [
        ({"type": CLEAR_TOOL_USES, "keep": {"type": "input_tokens", "value": 3}}, "edits.0.keep"),
        ({"type": CLEAR_TOOL_USES, "trigger": {"type": "tool_uses", "value": -1}}, "edits.0.trigger.value"),
        ({"type": CLEAR_TOOL_USES, "exclude_tools": "Bash"}, "edits.0.exclude_tools"),
        ({"type": CLEAR_THINKING, "keep": 2}, "edits.0.keep"),
    ],
)
def test_a_malformed_edit_is_refused_naming_its_field(edit: JSON, param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        edits(edit)
    assert caught.value.param == "context_management." + param


def test_claude_codes_tool_result_clearing_keeps_the_latest_and_the_excluded() -> None:
    """The shape Claude Code 2.1.332 builds: triggered by a count of tool uses."""
    items = session(["Bash", "Read", "Bash", "Bash", "Bash", "Bash"])
    before = copy.deepcopy(items)
    asked = edits({
        "type": CLEAR_TOOL_USES, "trigger": {"type": "tool_uses", "value": 4}, "keep": {"type": "tool_uses", "value": 2},
        "clear_at_least": {"type": "input_tokens", "value": 100}, "exclude_tools": ["Read"],
        "clear_tool_inputs": ["Bash"],
    })  # fmt: skip
    edited, applied = apply_edits(items, asked, prompt_tokens=5_000)
    assert items == before  # the input as sent is left as it was
    kept = outputs(edited)
    assert kept[0] == kept[2] == kept[3] == CLEARED_RESULT  # the oldest Bash results
    assert kept[1].startswith("1: ") and kept[4].startswith("4: ") and kept[5].startswith("5: ")
    arguments = [i["arguments"] for i in edited if i["type"] == "function_call"]
    assert arguments[0] == arguments[2] == "{}" and arguments[1] == '{"command": "ls 1"}'
    [report] = applied
    assert report["type"] == CLEAR_TOOL_USES and report["cleared_tool_uses"] == 3
    assert 3 * 140 < report["cleared_input_tokens"] < 3 * 170


def test_below_the_trigger_or_short_of_clear_at_least_nothing_is_cleared() -> None:
    items = session(["Bash"] * 5)
    by_tokens = edits({"type": CLEAR_TOOL_USES})  # 100,000 input tokens by default
    assert apply_edits(items, by_tokens, prompt_tokens=99_000) == (items, [])
    edited, [report] = apply_edits(items, by_tokens, prompt_tokens=120_000)
    assert outputs(edited)[:2] == [CLEARED_RESULT] * 2 and report["cleared_tool_uses"] == 2  # keeps 3
    greedy = edits({"type": CLEAR_TOOL_USES, "clear_at_least": {"type": "input_tokens", "value": 10_000}})
    assert apply_edits(items, greedy, prompt_tokens=120_000) == (items, [])


def test_thinking_is_cleared_but_for_the_latest_turns() -> None:
    items = [
        user("one"), thought("t1"), {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "a"}]},
        user("two"), thought("t2"), *call(0), thought("t2 again"),
        user("three"), thought("t3"), *call(1),
    ]  # fmt: skip
    edited, [report] = apply_edits(
        items, edits({"type": CLEAR_THINKING, "keep": {"type": "thinking_turns", "value": 1}}), 0
    )
    kept = [i["summary"][0]["text"] for i in edited if i["type"] == "reasoning"]
    assert kept == ["t3"] and report["cleared_thinking_turns"] == 2 and report["cleared_input_tokens"] > 0
    assert len(edited) == len(items) - 3
    two, _ = apply_edits(
        items, edits({"type": CLEAR_THINKING, "keep": {"type": "thinking_turns", "value": 2}}), 0
    )
    assert [i["summary"][0]["text"] for i in two if i["type"] == "reasoning"] == ["t2", "t2 again", "t3"]
    assert apply_edits(
        items, edits({"type": CLEAR_THINKING, "keep": {"type": "thinking_turns", "value": 3}}), 0
    ) == (
        items,
        [],
    )
