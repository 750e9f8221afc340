"""Responses tools -> Chat Completions tools, and the map that turns a chat tool call back into
the call the client expects (`function_call` with its `namespace`, or `custom_tool_call`)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Literal

_VALID_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_INVALID_CHARS = re.compile(r"[^a-zA-Z0-9_-]")

# Hosted or client-side tools a Chat Completions model cannot run: left out of the request.
UNSUPPORTED_TOOL_KINDS = frozenset(
    (
        "web_search",
        "web_search_preview",
        "tool_search",
        "local_shell",
        "file_search",
        "computer_use_preview",
        "code_interpreter",
        "image_generation",
        "mcp",
    )
)

CUSTOM_INPUT_PARAM = "input"


@dataclass(frozen=True, slots=True)
class ToolTarget:
    kind: Literal["function", "custom"]
    name: str
    namespace: str | None = None


def _sanitize(name: str) -> str:
    """A name chat APIs accept (`^[a-zA-Z0-9_-]{1,64}$`), stable for a given input."""
    if _VALID_NAME.match(name):
        return name
    clean = _INVALID_CHARS.sub("_", name) or "tool"
    if len(clean) > 64:
        digest = hashlib.sha1(name.encode()).hexdigest()[:8]
        clean = f"{clean[:55]}_{digest}"
    return clean


def flat_name(namespace: str | None, name: str) -> str:
    """The chat-side name of a (namespace, name) tool; deterministic so that calls in the
    history map to the same name as the advertised tool."""
    return _sanitize(f"{namespace}__{name}" if namespace else name)


@dataclass(slots=True)
class ToolMap:
    """Chat tool name -> what the client advertised under that name."""

    targets: dict[str, ToolTarget] = field(default_factory=dict)
    custom_grammars: dict[str, dict[str, Any]] = field(default_factory=dict)
    schemas: dict[str, dict[str, Any] | None] = field(default_factory=dict)  # chat name -> parameters
    skipped_kinds: list[str] = field(default_factory=list)

    def resolve(self, chat_name: str) -> ToolTarget:
        return self.targets.get(chat_name) or ToolTarget("function", chat_name)

    def chat_name_for(self, namespace: str | None, name: str) -> str:
        return flat_name(namespace, name)


def _function_tool(name: str, description: str | None, parameters: Any) -> dict[str, Any]:
    function: dict[str, Any] = {"name": name}
    if description:
        function["description"] = description
    function["parameters"] = (
        parameters if isinstance(parameters, dict) else {"type": "object", "properties": {}}
    )
    return {"type": "function", "function": function}


def _custom_tool(tool: dict[str, Any], name: str) -> dict[str, Any]:
    description = tool.get("description") or ""
    fmt = tool.get("format") or {}
    if fmt.get("type") == "grammar" and fmt.get("definition"):
        # The model only sees a string parameter, so it must see the grammar to write valid input.
        description += (
            f"\n\nPass the raw input as the '{CUSTOM_INPUT_PARAM}' string. It must match this "
            f"{fmt.get('syntax', '')} grammar:\n{fmt['definition']}"
        )
    parameters = {
        "type": "object",
        "properties": {CUSTOM_INPUT_PARAM: {"type": "string", "description": "The raw tool input."}},
        "required": [CUSTOM_INPUT_PARAM],
    }
    return _function_tool(name, description.strip(), parameters)


def translate_tools(tools: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], ToolMap]:
    """Flatten the client's tools into chat `function` tools; unknown and hosted kinds are
    left out and listed in `ToolMap.skipped_kinds` for the caller to log."""
    chat_tools: list[dict[str, Any]] = []
    tool_map = ToolMap()

    def add(chat_tool: dict[str, Any], target: ToolTarget) -> None:
        name = chat_tool["function"]["name"]
        if name in tool_map.targets:  # a clash after sanitising: keep the first
            tool_map.skipped_kinds.append(f"duplicate:{name}")
            return
        tool_map.targets[name] = target
        tool_map.schemas[name] = chat_tool["function"].get("parameters")
        chat_tools.append(chat_tool)

    for tool in tools:
        kind = tool.get("type")
        if kind == "function":
            name = tool.get("name") or (tool.get("function") or {}).get("name")
            if not isinstance(name, str):
                continue
            add(
                _function_tool(flat_name(None, name), tool.get("description"), tool.get("parameters")),
                ToolTarget("function", name),
            )
        elif kind == "custom":
            name = tool.get("name")
            if not isinstance(name, str):
                continue
            add(_custom_tool(tool, flat_name(None, name)), ToolTarget("custom", name))
            fmt = tool.get("format")
            if isinstance(fmt, dict) and fmt.get("type") == "grammar":
                tool_map.custom_grammars[name] = fmt
        elif kind == "namespace":
            namespace = tool.get("name")
            for sub in tool.get("tools") or []:
                if not isinstance(sub, dict) or not isinstance(sub.get("name"), str):
                    continue
                if sub.get("type", "function") != "function":
                    tool_map.skipped_kinds.append(f"namespace:{sub.get('type')}")
                    continue
                add(
                    _function_tool(
                        flat_name(namespace, sub["name"]), sub.get("description"), sub.get("parameters")
                    ),
                    ToolTarget("function", sub["name"], namespace),
                )
        else:
            tool_map.skipped_kinds.append(str(kind))
    return chat_tools, tool_map


def translate_tool_choice(choice: Any, tool_map: ToolMap) -> Any:
    """`auto`/`none`/`required` pass; a named tool becomes the chat form of its flat name."""
    if isinstance(choice, str):
        return choice if choice in ("auto", "none", "required") else "auto"
    if isinstance(choice, dict):
        kind = choice.get("type")
        if kind in ("function", "custom") and isinstance(choice.get("name"), str):
            name = flat_name(choice.get("namespace"), choice["name"])
            return {"type": "function", "function": {"name": name}}
        if kind == "allowed_tools":
            return "required" if choice.get("mode") == "required" else "auto"
    return "auto"
