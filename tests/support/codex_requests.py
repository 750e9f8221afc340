"""Request bodies shaped as Codex 0.169 sends them (reference/codex-contract.md §1.3-1.5): its
tools, and a history holding every item kind it may send back, for the Responses backend's
tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

JSON = dict[str, Any]

APPLY_PATCH_GRAMMAR = (Path(__file__).parent.parent / "fixtures" / "apply_patch.lark").read_text()

EXEC_COMMAND: JSON = {
    "type": "function",
    "name": "exec_command",
    "description": "Runs a command in a PTY, returning output or a session ID for ongoing interaction.",
    "strict": False,
    "parameters": {
        "type": "object",
        "properties": {
            "cmd": {"type": "string", "description": "Shell command to execute."},
            "workdir": {"type": "string"},
            "yield_time_ms": {"type": "number"},
            "sandbox_permissions": {"type": "string", "enum": ["use_default", "require_escalated"]},
        },
        "required": ["cmd"],
        "additionalProperties": False,
    },
}
WRITE_STDIN: JSON = {
    "type": "function",
    "name": "write_stdin",
    "description": "Writes characters to an existing unified exec session.",
    "strict": False,
    "parameters": {
        "type": "object",
        "properties": {"session_id": {"type": "number"}, "chars": {"type": "string"}},
        "required": ["session_id"],
        "additionalProperties": False,
    },
}
APPLY_PATCH: JSON = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Use the `apply_patch` tool to edit files. This is a FREEFORM tool.",
    "format": {"type": "grammar", "syntax": "lark", "definition": APPLY_PATCH_GRAMMAR},
}
MULTI_AGENT: JSON = {
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "Spawn and steer sub-agents.",
    "tools": [
        {
            "type": "function",
            "name": "spawn_agent",
            "description": "Spawn a sub-agent.",
            "strict": False,
            "parameters": {
                "type": "object",
                "properties": {
                    "message": {"type": "string", "encrypted": True},
                    "agent_type": {"type": "string"},
                },
                "required": ["message"],
                "additionalProperties": False,
            },
        },
        {
            "type": "function",
            "name": "wait_agent",
            "description": "Wait for sub-agents.",
            "strict": False,
            "parameters": {
                "type": "object",
                "properties": {"ids": {"type": "array", "items": {"type": "string"}}},
            },
        },
    ],
}
TOOL_SEARCH: JSON = {
    "type": "tool_search",
    "execution": "client",
    "description": "Search the available tools by what they do.",
    "parameters": {
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "number"}},
        "required": ["query"],
    },
}
WEB_SEARCH: JSON = {
    "type": "web_search",
    "external_web_access": False,
    "search_content_types": ["text", "image"],
}

CODEX_TOOLS: list[JSON] = [EXEC_COMMAND, WRITE_STDIN, APPLY_PATCH, MULTI_AGENT, TOOL_SEARCH, WEB_SEARCH]

PASSTHROUGH = {"turn_id": "019a8c1e-turn", "create_time": 1764075745, "content_item_kinds": ["input_text"]}


def text_message(role: str, text: str, *, id: str | None = None, **extra: Any) -> JSON:
    kind = "output_text" if role == "assistant" else "input_text"
    item: JSON = {"type": "message", "role": role, "content": [{"type": kind, "text": text}], **extra}
    if id is not None:
        item["id"] = id
    return item


def codex_history(
    reasoning_blob: str = "gAAAAABforeign-openai-blob-0123456789abcdefghijklmnop",
) -> list[JSON]:
    """A first turn's input plus a history holding every item kind Codex sends back."""
    return [
        text_message("developer", "You are Codex, a coding agent.", id="msg_dev0"),
        text_message(
            "developer", "<permissions instructions>sandbox: workspace-write</permissions instructions>"
        ),
        text_message(
            "user",
            "<environment_context><cwd>/home/dev/project</cwd></environment_context>",
            internal_chat_message_metadata_passthrough=PASSTHROUGH,
        ),
        text_message("user", "Fix the failing test.", id="msg_u1"),
        {
            "type": "reasoning",
            "id": "rs_foreign1",
            "summary": [{"type": "summary_text", "text": "Looking at the tests."}],
            "content": None,
            "encrypted_content": reasoning_blob,
        },
        {
            "type": "function_call",
            "id": "fc_gw1",
            "status": "completed",
            "name": "exec_command",
            "arguments": '{"cmd":"uv run pytest -q"}',
            "call_id": "call_exec1",
        },
        {
            "type": "function_call_output",
            "id": "fco_1",
            "call_id": "call_exec1",
            "output": "1 failed, 41 passed",
        },
        {
            "type": "function_call",
            "id": "fc_gw2",
            "name": "spawn_agent",
            "namespace": "multi_agent_v1",
            "arguments": '{"message":"review app.py"}',
            "call_id": "call_spawn1",
        },
        {
            "type": "function_call_output",
            "call_id": "call_spawn1",
            "output": [{"type": "input_text", "text": "agent 7 spawned"}],
        },
        {
            "type": "custom_tool_call",
            "id": "ctc_gw1",
            "status": "completed",
            "call_id": "call_patch1",
            "name": "apply_patch",
            "input": "*** Begin Patch\n*** Update File: app.py\n@@\n-a\n+b\n*** End Patch",
        },
        {
            "type": "custom_tool_call_output",
            "call_id": "call_patch1",
            "name": "apply_patch",
            "output": "Success.",
        },
        {
            "type": "tool_search_call",
            "call_id": "call_search1",
            "status": "completed",
            "execution": "client",
            "arguments": {"query": "calendar", "limit": 3},
        },
        {
            "type": "tool_search_output",
            "call_id": "call_search1",
            "status": "completed",
            "execution": "client",
            "tools": [{"type": "function", "name": "list_events", "description": "List calendar events."}],
        },
        {
            "type": "web_search_call",
            "id": "ws_up1",
            "status": "completed",
            "action": {"type": "search", "query": "pytest fixtures scope"},
        },
        {
            "type": "agent_message",
            "author": "agent_7",
            "recipient": "root",
            "content": [{"type": "input_text", "text": "Review done: looks fine."}],
        },
        text_message("assistant", "The test passes now.", id="msg_gw9", phase="final_answer"),
        text_message("user", "Thanks. Now run the linter."),
    ]


def codex_body(input: list[JSON] | None = None, **fields: Any) -> JSON:
    """A Codex 0.169 turn request (tools of a catalog model, reasoning effort, its metadata)."""
    body: JSON = {
        "model": "gpt-5.5",
        "input": codex_history() if input is None else input,
        "tools": CODEX_TOOLS,
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": False,
        "stream": True,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "019a8c1e-thread",
        "text": {"verbosity": "low"},
        "client_metadata": {
            "x-codex-installation-id": "inst-1",
            "x-codex-window-id": "019a8c1e-thread:0",
            "session_id": "019a8c1e-thread",
        },
    }
    body.update(fields)
    return body
