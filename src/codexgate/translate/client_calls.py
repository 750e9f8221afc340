"""Calls of client-executed tools that are not functions on the Responses side: the chat
upstream calls them as functions (`tool_search`, `local_shell`, see tools.py), and the client
gets back the item kind it runs (codex-contract.md §3). Pure."""

from __future__ import annotations

from typing import Any

import orjson


def _arguments_object(arguments: str) -> dict[str, Any]:
    try:
        value = orjson.loads(arguments or "{}")
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def client_call_item(
    kind: str, item_id: str, call_id: str | None, arguments: str, status: str
) -> dict[str, Any]:
    """`tool_search_call{execution:"client", arguments{query,limit}}` or
    `local_shell_call{action{type:"exec", command[], ...}}` from the function's JSON arguments."""
    args = _arguments_object(arguments)
    if kind == "tool_search":
        return {
            "type": "tool_search_call",
            "id": item_id,
            "call_id": call_id,
            "status": status,
            "execution": "client",
            "arguments": args,
        }
    command = args.get("command")
    if isinstance(command, str):  # a model that wrote one string instead of argv
        command = ["bash", "-lc", command]
    action: dict[str, Any] = {"type": "exec", "command": command if isinstance(command, list) else []}
    for key in ("working_directory", "timeout_ms", "env"):
        if key in args:
            action[key] = args[key]
    return {"type": "local_shell_call", "id": item_id, "call_id": call_id, "status": status, "action": action}
