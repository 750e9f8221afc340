"""Anthropic's context editing (`context_management.edits`), done by the gateway on the
canonical input for every backend that does not do it itself. Pure.

An `anthropic` upstream is sent the client's body as it is and edits it there; every other
backend (a chat server, a Responses server, the Codex agent) would otherwise read the whole
history the client asked to have trimmed. Claude Code asks for both strategies (2.1.332: a
`clear_thinking_20251015` that keeps every thinking block, and, when its tool-result clearing
is on, a `clear_tool_uses_20250919`), and reads `applied_edits` back to keep its own count of
the context. The client keeps its full history, so the edits are applied anew on each request,
the same way each time:

- `clear_tool_uses_20250919`: once the prompt passes `trigger` (input tokens, default 100,000;
  or a count of tool uses), the results of every tool use but the `keep` latest (default 3)
  become a placeholder the model reads, oldest first, those of `exclude_tools` never; with
  `clear_tool_inputs` (true, or a list of tool names) the calls' arguments too. With
  `clear_at_least`, nothing is cleared unless that many input tokens would be.
- `clear_thinking_20251015`: the thinking of every assistant turn but the `keep` latest
  (`{"type": "thinking_turns", "value": N}`, default 1; `"all"` keeps every one) is left
  out. A turn is what the assistant did between two of the user's own messages.

Tokens are the gateway's estimate, as for usage an upstream does not report (bytes / 4). Any
other strategy (`compact_20260112`, server-side compaction) is refused with the 400 Anthropic
gives a model that lacks it, on which Claude Code stops asking for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from codexgate.errors import InvalidRequest
from codexgate.translate.messages_face.count_tokens import BYTES_PER_TOKEN
from codexgate.wire.responses import Item

__all__ = [
    "CLEAR_THINKING",
    "CLEAR_TOOL_USES",
    "CLEARED_RESULT",
    "ContextEdit",
    "apply_edits",
    "read_edits",
]

CLEAR_TOOL_USES = "clear_tool_uses_20250919"
CLEAR_THINKING = "clear_thinking_20251015"
CLEARED_RESULT = "[This tool result was cleared to save context.]"
_DEFAULT_TRIGGER_TOKENS = 100_000
_DEFAULT_KEEP_TOOL_USES = 3
_DEFAULT_KEEP_THINKING_TURNS = 1
_TOOL_OUTPUTS = frozenset(("function_call_output", "custom_tool_call_output"))
_TOOL_CALLS = frozenset(("function_call", "custom_tool_call"))


@dataclass(frozen=True, slots=True)
class ContextEdit:
    """One strategy as asked (a clear_thinking that keeps "all" is none). `trigger` is (kind,
    value), kind "input_tokens" or "tool_uses"; `keep` counts tool uses for clear_tool_uses,
    turns for clear_thinking; `clear_inputs` True for every tool, else the tools' names."""

    type: str
    trigger: tuple[str, int] = ("input_tokens", _DEFAULT_TRIGGER_TOKENS)
    keep: int = _DEFAULT_KEEP_TOOL_USES
    clear_at_least: int = 0
    exclude_tools: frozenset[str] = frozenset()
    clear_inputs: bool | frozenset[str] = False


def read_edits(management: Mapping[str, Any] | None, model: str) -> list[ContextEdit]:
    """The edits `context_management` asks for, checked; [] when it asks none or only ones
    that change nothing (keep every thinking block). Raises InvalidRequest naming the field."""
    if not management:
        return []
    edits = management.get("edits")
    if edits is None:
        return []
    if not isinstance(edits, list):
        raise _refused("context_management.edits", "Input should be a valid list")
    read: list[ContextEdit] = []
    for index, edit in enumerate(edits):
        param = f"context_management.edits.{index}"
        if not isinstance(edit, dict):
            raise _refused(param, "Input should be an object")
        kind = edit.get("type")
        if kind == CLEAR_TOOL_USES:
            read.append(_tool_uses_edit(edit, param))
        elif kind == CLEAR_THINKING:
            keep = edit.get("keep", {"type": "thinking_turns", "value": _DEFAULT_KEEP_THINKING_TURNS})
            if keep != "all":
                read.append(
                    ContextEdit(CLEAR_THINKING, keep=_amount(keep, ("thinking_turns",), f"{param}.keep")[1])
                )
        else:
            raise InvalidRequest(
                f"{model} does not support the {kind!s} context management strategy.",
                param=f"{param}.type",
            )
    return read


def _tool_uses_edit(edit: dict[str, Any], param: str) -> ContextEdit:
    trigger = ("input_tokens", _DEFAULT_TRIGGER_TOKENS)
    if edit.get("trigger") is not None:
        trigger = _amount(edit["trigger"], ("input_tokens", "tool_uses"), f"{param}.trigger")
    keep = _DEFAULT_KEEP_TOOL_USES
    if edit.get("keep") is not None:
        keep = _amount(edit["keep"], ("tool_uses",), f"{param}.keep")[1]
    at_least = 0
    if edit.get("clear_at_least") is not None:
        at_least = _amount(edit["clear_at_least"], ("input_tokens",), f"{param}.clear_at_least")[1]
    excluded = _names(edit.get("exclude_tools") or [], f"{param}.exclude_tools")
    inputs = edit.get("clear_tool_inputs", False)
    clear_inputs: bool | frozenset[str] = (
        inputs if isinstance(inputs, bool) else _names(inputs, f"{param}.clear_tool_inputs")
    )
    return ContextEdit(CLEAR_TOOL_USES, trigger, keep, at_least, excluded, clear_inputs)


def _amount(value: Any, kinds: tuple[str, ...], param: str) -> tuple[str, int]:
    """A `{"type": KIND, "value": N}` object: (KIND, N)."""
    if not isinstance(value, dict) or value.get("type") not in kinds:
        raise _refused(param, f"Input should be an object with a type of {' or '.join(kinds)} and a value")
    number = value.get("value")
    if type(number) is not int or number < 0:
        raise _refused(f"{param}.value", "Input should be a non-negative integer")
    return value["type"], number


def _names(value: Any, param: str) -> frozenset[str]:
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise _refused(param, "Input should be a list of tool names")
    return frozenset(value)


def _refused(param: str, why: str) -> InvalidRequest:
    return InvalidRequest(f"{param}: {why}", param=param)


# -- applying them


def apply_edits(
    items: list[Item], edits: list[ContextEdit], prompt_tokens: int
) -> tuple[list[Item], list[dict[str, Any]]]:
    """`items` with `edits` applied in order, and the `applied_edits` Anthropic reports (one per
    strategy that cleared something). `items` is not changed; the list returned shares the
    items left as they were. `prompt_tokens`: the request's estimate, for the triggers."""
    applied: list[dict[str, Any]] = []
    for edit in edits:
        if edit.type == CLEAR_TOOL_USES:
            items, report = _clear_tool_uses(items, edit, prompt_tokens)
        else:
            items, report = _clear_thinking(items, edit)
        if report is not None:
            applied.append(report)
            prompt_tokens -= report["cleared_input_tokens"]
    return items, applied


def _clear_tool_uses(
    items: list[Item], edit: ContextEdit, prompt_tokens: int
) -> tuple[list[Item], dict[str, Any] | None]:
    names = {item["call_id"]: item.get("name") for item in items if item.get("type") in _TOOL_CALLS}
    kind, threshold = edit.trigger
    if (len(names) if kind == "tool_uses" else prompt_tokens) <= threshold:
        return items, None
    clearable = [call for call, name in names.items() if name not in edit.exclude_tools]
    cleared = frozenset(clearable[: max(0, len(clearable) - edit.keep)])
    if not cleared:
        return items, None
    out: list[Item] = []
    freed = 0
    for item in items:
        kind_of = item.get("type")
        if item.get("call_id") not in cleared:
            pass
        elif kind_of in _TOOL_OUTPUTS:
            freed += _tokens(item.get("output")) - _tokens(CLEARED_RESULT)
            item = {**item, "output": CLEARED_RESULT}
        elif kind_of in _TOOL_CALLS and _clears_input(edit, item):
            field, empty = ("arguments", "{}") if kind_of == "function_call" else ("input", "")
            freed += _tokens(item.get(field)) - _tokens(empty)
            item = {**item, field: empty}
        out.append(item)
    if freed <= 0 or freed < edit.clear_at_least:
        return items, None
    return out, {"type": CLEAR_TOOL_USES, "cleared_tool_uses": len(cleared), "cleared_input_tokens": freed}


def _clears_input(edit: ContextEdit, call: Item) -> bool:
    inputs = edit.clear_inputs
    return inputs if isinstance(inputs, bool) else call.get("name") in inputs


def _clear_thinking(items: list[Item], edit: ContextEdit) -> tuple[list[Item], dict[str, Any] | None]:
    # Each item's turn: a turn starts after each of the user's own messages (tool results,
    # which come back as the user's too, belong to the turn that called the tools).
    turns: list[int] = []
    turn = 0
    for item in items:
        turn += _is_user_message(item)
        turns.append(turn)
    acted = sorted({t for item, t in zip(items, turns, strict=True) if not _is_user_message(item)})
    kept = frozenset(acted[-edit.keep :]) if edit.keep else frozenset()
    out: list[Item] = []
    freed = 0
    cleared: set[int] = set()
    for item, t in zip(items, turns, strict=True):
        if item.get("type") == "reasoning" and t not in kept:
            freed += _tokens(item)
            cleared.add(t)
            continue
        out.append(item)
    if not cleared:
        return items, None
    return out, {
        "type": CLEAR_THINKING,
        "cleared_thinking_turns": len(cleared),
        "cleared_input_tokens": freed,
    }


def _is_user_message(item: Item) -> bool:
    return item.get("type") == "message" and item.get("role") == "user"


def _tokens(value: Any) -> int:
    if isinstance(value, str):
        return len(value.encode()) // BYTES_PER_TOKEN
    return len(orjson.dumps(value)) // BYTES_PER_TOKEN
