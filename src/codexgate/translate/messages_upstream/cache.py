"""Prompt-cache breakpoints on a Messages body (`prompt_cache = "auto"`). Pure.

Anthropic caches a prompt's prefix (tools, then system, then messages) only up to a block
marked `cache_control`, at most four of them, and only a prefix of 1,024 tokens or more (2,048
for the Haiku models); a later request reads the longest cached prefix that ends at one of its
own breakpoints, or at a block boundary up to about 20 blocks before one. A Codex session
re-sends its whole history each turn, growing by an answer and its tool outputs, so:

1. the last tool: the tools alone, the part that never changes within a session;
2. the last system block: tools and system;
3. the last block of the message before the conversation's last assistant message: where the
   previous request ended, which that request wrote (4.), so this one reads it whole however
   many blocks the last answer and its outputs added;
4. the last block of the request: written now, read by the next turn (3. there).

Thinking blocks take no breakpoint (Anthropic refuses one there): the block before them does.
A request whose client set `cache_control` anywhere is left as it is: the client placed its
own. The body's shared parts are not changed: a marked block, and the lists that hold it, are
copies.
"""

from __future__ import annotations

from typing import Any

__all__ = ["EPHEMERAL", "MAX_BREAKPOINTS", "has_cache_control", "place_breakpoints"]

EPHEMERAL: dict[str, Any] = {"type": "ephemeral"}
MAX_BREAKPOINTS = 4
_NOT_MARKABLE = frozenset(("thinking", "redacted_thinking"))


def has_cache_control(body: dict[str, Any]) -> bool:
    """Whether any block of the body (a tool, a system block, a message's block, a block
    inside a tool result) carries `cache_control`."""
    system = body.get("system")
    if isinstance(system, list) and any(_marked(b) for b in system):
        return True
    if any(_marked(t) for t in body.get("tools") or ()):
        return True
    for message in body.get("messages") or ():
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else ():
            if _marked(block):
                return True
            inner = block.get("content") if isinstance(block, dict) else None
            if isinstance(inner, list) and any(_marked(b) for b in inner):
                return True
    return False


def _marked(block: Any) -> bool:
    return isinstance(block, dict) and "cache_control" in block


def place_breakpoints(body: dict[str, Any]) -> int:
    """Mark the body's breakpoints (above) in place; how many were placed."""
    placed = 0
    tools = body.get("tools")
    if isinstance(tools, list) and tools and isinstance(tools[-1], dict):
        body["tools"] = [*tools[:-1], {**tools[-1], "cache_control": EPHEMERAL}]
        placed += 1
    system = body.get("system")
    if isinstance(system, str) and system:
        system = [{"type": "text", "text": system}]
    if isinstance(system, list) and system and isinstance(system[-1], dict):
        body["system"] = [*system[:-1], {**system[-1], "cache_control": EPHEMERAL}]
        placed += 1
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return placed
    marked = list(messages)
    points = [len(marked) - 1]
    last_assistant = next(
        (i for i in range(len(marked) - 1, -1, -1) if _role(marked[i]) == "assistant"), None
    )
    if last_assistant is not None and last_assistant >= 1:
        points.insert(0, last_assistant - 1)
    for position in points:
        if placed >= MAX_BREAKPOINTS:
            break
        message = _with_breakpoint(marked[position])
        if message is not None:
            marked[position] = message
            placed += 1
    body["messages"] = marked
    return placed


def _role(message: Any) -> Any:
    return message.get("role") if isinstance(message, dict) else None


def _with_breakpoint(message: Any) -> dict[str, Any] | None:
    """A copy of `message` with its last markable block marked; None when it has none."""
    if not isinstance(message, dict):
        return None
    content = message.get("content")
    if isinstance(content, str):
        if not content:
            return None
        content = [{"type": "text", "text": content}]
    if not isinstance(content, list):
        return None
    for index in range(len(content) - 1, -1, -1):
        block = content[index]
        if isinstance(block, dict) and block.get("type") not in _NOT_MARKABLE:
            if block.get("type") == "text" and not block.get("text"):
                continue  # Anthropic refuses cache_control on an empty text block
            blocks = list(content)
            blocks[index] = {**block, "cache_control": EPHEMERAL}
            return {**message, "content": blocks}
    return None
