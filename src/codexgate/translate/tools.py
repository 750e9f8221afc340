"""Responses tools -> Chat Completions tools, and the map that turns a chat tool call back into
the call the client expects (`function_call` with its `namespace`, or `custom_tool_call`)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

_VALID_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_INVALID_CHARS = re.compile(r"[^a-zA-Z0-9_-]")

# Hosted tools: the Responses server runs them, and a Chat Completions upstream has none of
# them. They are left out of `tools`, and the model is told in one line of its system prompt
# (`unavailable_notice`) so that it does not promise a search it cannot run; the response
# names them in its metadata (`UNAVAILABLE_METADATA_KEY`). A tool kind codexgate does not know
# is treated the same way: refusing it would fail every request of the Codex release that
# introduced it.
HOSTED_TOOL_KINDS = frozenset(
    (
        "web_search",
        "web_search_preview",
        "file_search",
        "computer_use_preview",
        "code_interpreter",
        "image_generation",
        "mcp",
    )
)
# Kept for callers that still name the old set; the client-executed kinds left it.
UNSUPPORTED_TOOL_KINDS = HOSTED_TOOL_KINDS
UNAVAILABLE_METADATA_KEY = "codexgate_unavailable_tools"
_NOTICE_KINDS = 8  # kinds named in the notice at most (client-chosen strings)
_NOTICE_KIND_CHARS = 40

# Client-executed tools without a function form of their own: advertised as functions under
# these names, their calls sent back as the item kinds the client runs.
TOOL_SEARCH_NAME = "tool_search"
LOCAL_SHELL_NAME = "local_shell"
LOCAL_SHELL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {"type": "array", "items": {"type": "string"}, "description": "argv of the command"},
        "working_directory": {"type": "string"},
        "timeout_ms": {"type": "integer"},
        "env": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "required": ["command"],
}
TOOL_SEARCH_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
    "required": ["query"],
}
# Schema keys Codex adds that are not JSON Schema (strict upstreams such as OpenAI's own chat
# endpoint or vLLM's guided decoding reject unknown keywords): removed before they go upstream.
NON_SCHEMA_KEYS = frozenset(("encrypted",))

CUSTOM_INPUT_PARAM = "input"


@dataclass(frozen=True, slots=True)
class ToolTarget:
    kind: Literal["function", "custom", "tool_search", "local_shell"]
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
    custom_grammars: dict[str, dict[str, Any]] = field(default_factory=dict)  # chat name -> format
    schemas: dict[str, dict[str, Any] | None] = field(default_factory=dict)  # chat name -> parameters
    skipped_kinds: list[str] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)  # hosted or unknown kinds left out

    def resolve(self, chat_name: str) -> ToolTarget:
        return self.targets.get(chat_name) or ToolTarget("function", chat_name)

    def chat_name_for(self, namespace: str | None, name: str) -> str:
        return flat_name(namespace, name)


def _has_non_schema_keys(schema: dict[str, Any]) -> bool:
    """Whether a NON_SCHEMA_KEYS key sits anywhere in `schema` (a walk that allocates little:
    most tools have none, and then the schema is passed on as it is)."""
    stack: list[Any] = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if not NON_SCHEMA_KEYS.isdisjoint(node):
                return True
            stack.extend(v for v in node.values() if isinstance(v, (dict, list)))
        else:
            stack.extend(v for v in node if isinstance(v, (dict, list)))
    return False


def clean_schema(schema: Any) -> Any:
    """`schema` without the keys of NON_SCHEMA_KEYS, at any depth where a schema can sit: the
    same object when it has none, else a copy; iterative, so a deep schema cannot exhaust the
    stack."""
    if not isinstance(schema, dict) or not _has_non_schema_keys(schema):
        return schema
    root: dict[str, Any] = {}
    stack: list[tuple[Any, Any]] = [(schema, root)]
    while stack:
        source, target = stack.pop()
        items = source.items() if isinstance(source, dict) else enumerate(source)
        for key, value in items:
            if isinstance(source, dict) and key in NON_SCHEMA_KEYS and not isinstance(value, (dict, list)):
                continue
            if isinstance(value, (dict, list)):
                copy: Any = {} if isinstance(value, dict) else [None] * len(value)
                stack.append((value, copy))
                value = copy
            target[key] = value
    return root


def _function_tool(name: str, description: str | None, parameters: Any) -> dict[str, Any]:
    function: dict[str, Any] = {"name": name}
    if description:
        function["description"] = description
    function["parameters"] = (
        clean_schema(parameters) if isinstance(parameters, dict) else {"type": "object", "properties": {}}
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
    """Flatten the client's tools into chat `function` tools. Hosted and unknown kinds are left
    out, listed in `ToolMap.unavailable` (for the notice to the model and the response) and in
    `ToolMap.skipped_kinds` (for the caller to log)."""
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

    def add_custom(tool: dict[str, Any], namespace: str | None) -> None:
        chat_name = flat_name(namespace, tool["name"])
        if chat_name in tool_map.targets:
            tool_map.skipped_kinds.append(f"duplicate:{chat_name}")
            return
        add(_custom_tool(tool, chat_name), ToolTarget("custom", tool["name"], namespace))
        fmt = tool.get("format")
        if isinstance(fmt, dict) and fmt.get("type") == "grammar":
            tool_map.custom_grammars[chat_name] = fmt

    def unavailable(kind: str) -> None:
        tool_map.skipped_kinds.append(kind)
        if kind not in tool_map.unavailable:
            tool_map.unavailable.append(kind)

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
            if isinstance(tool.get("name"), str):
                add_custom(tool, None)
        elif kind == "namespace":
            namespace = tool.get("name")
            for sub in tool.get("tools") or []:
                if not isinstance(sub, dict) or not isinstance(sub.get("name"), str):
                    continue
                sub_kind = sub.get("type", "function")
                if sub_kind == "custom":
                    add_custom(sub, namespace)
                elif sub_kind == "function":
                    add(
                        _function_tool(
                            flat_name(namespace, sub["name"]), sub.get("description"), sub.get("parameters")
                        ),
                        ToolTarget("function", sub["name"], namespace),
                    )
                else:
                    unavailable(f"{namespace}.{sub_kind}")
        elif kind == "tool_search" and tool.get("execution", "client") == "client":
            description = tool.get("description") or "Search for more tools by what they do."
            parameters = tool.get("parameters") or TOOL_SEARCH_PARAMETERS
            add(
                _function_tool(TOOL_SEARCH_NAME, description, parameters),
                ToolTarget("tool_search", TOOL_SEARCH_NAME),
            )
        elif kind == "local_shell":
            description = "Run a command on the user's machine; `command` is its argv."
            add(
                _function_tool(LOCAL_SHELL_NAME, description, LOCAL_SHELL_PARAMETERS),
                ToolTarget("local_shell", LOCAL_SHELL_NAME),
            )
        else:
            unavailable(str(kind))
    return chat_tools, tool_map


def unavailable_notice(kinds: list[str]) -> str | None:
    """The one line appended to the system prompt when tools were left out, or None."""
    if not kinds:
        return None
    named = [_clip(k, _NOTICE_KIND_CHARS) for k in kinds[:_NOTICE_KINDS]]
    more = f" and {len(kinds) - _NOTICE_KINDS} more" if len(kinds) > _NOTICE_KINDS else ""
    return (
        f"Note: these tools are not available here and cannot be called: {', '.join(named)}{more}. "
        "Do not claim to have used them."
    )


def unavailable_metadata(kinds: Sequence[str]) -> str:
    """The value of UNAVAILABLE_METADATA_KEY in the response: kinds joined by commas, at most
    512 characters (OpenAI's limit on a metadata value)."""
    text = ",".join(_clip(k, _NOTICE_KIND_CHARS) for k in kinds)
    return _clip(text, 512)


def _clip(text: str, limit: int) -> str:
    text = _INVALID_NOTE_CHARS.sub("?", text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


_INVALID_NOTE_CHARS = re.compile(r"[^\x20-\x7e]")


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
