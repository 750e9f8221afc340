"""The Anthropic Messages request (`POST /v1/messages`, `POST /v1/messages/count_tokens`) as a
client sends it to codexgate's Messages face, and its validation. No I/O.

Strict where the input is ours to judge: every field and block the face reads is checked here,
where it enters, and a wrong one is a 400 naming it as Anthropic does
(`messages.2.content.0.source.media_type: Input should be 'image/jpeg', ...`), so the
translator (translate/messages_face/request.py) reads the body without checking shapes again.
Lenient where it is not: unknown top-level fields and unknown keys on messages, blocks and tools
(`cache_control`, `citations`, `defer_loading`, `clear_at`, fields of betas yet to come) are
passed over, never a reason to fail: Claude Code sends seven betas and adds fields every release.

What the gateway cannot carry is refused with a 400 naming it rather than dropped: a document
named by a URL or a file id, an image by a file id (the gateway fetches nothing and has no files
API; an image URL is passed on, as on the other faces), blocks of
server tools in the history (`server_tool_use`, `web_search_tool_result`...: the gateway runs
none), MCP servers for the API to call. Server tools offered in `tools` are not refused: the
translator leaves them out and tells the model so (`is_server_tool`).

Nesting is held to the limit of the other faces (`check_depth` of wire/responses.py): the body
travels on, whole, to an `anthropic` upstream, and in parts to every other.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NoReturn

from codexgate.errors import InvalidRequest
from codexgate.wire.responses import check_depth

__all__ = [
    "BILLING_HEADER_PREFIX",
    "EFFORTS",
    "IMAGE_MEDIA_TYPES",
    "KNOWN_MESSAGES_FIELDS",
    "THINKING_TYPES",
    "is_billing_header",
    "is_server_tool",
    "validate_messages_request",
]

IMAGE_MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
# Claude Code's first system block: its version and entry point, different in every release.
BILLING_HEADER_PREFIX = "x-anthropic-billing-header:"
THINKING_TYPES = ("enabled", "adaptive", "disabled", "between_tools")
EFFORTS = ("low", "medium", "high", "xhigh", "max")
_ROLES = ("user", "assistant", "system")
_TOOL_CHOICES = ("auto", "any", "tool", "none")
# Blocks each role may send; the others of Anthropic's (server tools' blocks, container
# uploads) are refused with why (_SERVER_BLOCKS), unknown ones as unknown.
_USER_BLOCKS = ("text", "image", "document", "search_result", "tool_result")
_ASSISTANT_BLOCKS = ("text", "tool_use", "thinking", "redacted_thinking")
_SYSTEM_BLOCKS = ("text", "tool_addition", "tool_removal")
_TOOL_RESULT_BLOCKS = ("text", "image", "document", "search_result", "tool_reference")
_SERVER_BLOCKS = frozenset(
    (
        "server_tool_use", "web_search_tool_result", "web_fetch_tool_result", "code_execution_tool_result",
        "bash_code_execution_tool_result", "text_editor_code_execution_tool_result",
        "tool_search_tool_result", "mcp_tool_use", "mcp_tool_result", "container_upload",
    )
)  # fmt: skip

# Known top-level fields whose only check is their JSON type (null is accepted for each).
_TYPED_FIELDS: dict[str, type | tuple[type, ...]] = {
    "stream": bool,
    "metadata": dict,
    "stop_sequences": list,
    "tools": list,
    "tool_choice": dict,
    "thinking": dict,
    "output_config": dict,
    "context_management": dict,
    "service_tier": str,
}
# The fields a request equal to one checked before need not have checked again (their type is).
_SKIPPABLE = frozenset(("system", "tools"))
KNOWN_MESSAGES_FIELDS = frozenset(_TYPED_FIELDS) | {
    "model", "messages", "system", "max_tokens", "temperature", "top_p", "top_k", "mcp_servers",
}  # fmt: skip

_NUMBER = (int, float)
_TYPE_WORDS: dict[type | tuple[type, ...], str] = {
    str: "a valid string",
    list: "a valid list",
    dict: "a valid dictionary",
    bool: "a valid boolean",
    int: "a valid integer",
    _NUMBER: "a valid number",
    (str, list): "a valid string or a list",
}


def _refuse(param: str, what: str) -> NoReturn:
    """Anthropic's wording: the parameter's path, then what is wrong with it."""
    raise InvalidRequest(f"{param}: {what}", param=param)


def _check(value: Any, expected: type | tuple[type, ...], param: str) -> None:
    kinds = expected if isinstance(expected, tuple) else (expected,)
    # bool is an int in Python; JSON keeps them apart.
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        _refuse(param, f"Input should be {_TYPE_WORDS.get(expected, 'of another type')}")


def _required(obj: dict[str, Any], name: str, expected: type | tuple[type, ...], param: str) -> Any:
    value = obj.get(name)
    if value is None:
        _refuse(f"{param}.{name}" if param else name, "Field required")
    _check(value, expected, f"{param}.{name}" if param else name)
    return value


def _optional(obj: dict[str, Any], name: str, expected: type | tuple[type, ...], param: str) -> Any:
    value = obj.get(name)
    if value is not None:
        _check(value, expected, f"{param}.{name}" if param else name)
    return value


def _one_of(value: Any, allowed: Iterable[str], param: str) -> str:
    _check(value, str, param)
    allowed = tuple(allowed)
    if value not in allowed:
        words = [f"'{a}'" for a in allowed]
        _refuse(param, f"Input should be {', '.join(words[:-1])} or {words[-1]}")
    return str(value)


def _object(value: Any, param: str) -> dict[str, Any]:
    _check(value, dict, param)
    result: dict[str, Any] = value
    return result


def is_server_tool(tool: dict[str, Any]) -> bool:
    """Whether a `tools` entry is one the API runs (web_search_20250305, web_fetch_*,
    code_execution_*, ...) or an Anthropic-defined one (bash_*, text_editor_*, computer_*):
    every `type` but none and `custom`. No backend of the gateway runs them."""
    return tool.get("type") not in (None, "custom")


def is_billing_header(block: dict[str, Any]) -> bool:
    """Whether a system text block is Claude Code's billing line (BILLING_HEADER_PREFIX)."""
    text = block.get("text")
    return isinstance(text, str) and text.startswith(BILLING_HEADER_PREFIX)


def validate_messages_request(
    data: dict[str, Any], *, count_tokens: bool = False, known: int = 0, same: Iterable[str] = ()
) -> None:
    """Check a decoded /v1/messages body (`count_tokens`: a /v1/messages/count_tokens body,
    which has no `max_tokens`). Raises InvalidRequest naming the parameter: a wrong type or
    value of a known field or block, a missing required one, or what the gateway cannot carry.
    Claude Code sends the whole conversation every turn: `known`, the first messages, and
    `same`, the fields among `system` and `tools`, equal those of a request checked before,
    and are not checked again."""
    messages = data.get("messages")
    if type(messages) is not list:
        known = 0
    skipped = frozenset(same) & _SKIPPABLE
    if known or skipped:
        unchecked = {name: value for name, value in data.items() if name not in skipped}
        if known and type(messages) is list:
            unchecked["messages"] = messages[known:]
        check_depth(unchecked)
    else:
        check_depth(data)
    model = _required(data, "model", str, "")
    if not model:
        _refuse("model", "String should have at least 1 character")
    for name, expected in _TYPED_FIELDS.items():
        _optional(data, name, expected, "")
    _check_sampling(data, count_tokens)
    messages = _required(data, "messages", list, "")
    if not messages:
        _refuse("messages", "List should have at least 1 item")
    for index in range(known, len(messages)):
        _check_message(messages[index], f"messages.{index}")
    system = data.get("system")
    if system is not None and "system" not in skipped:
        _check(system, (str, list), "system")
        if isinstance(system, list):
            for index, block in enumerate(system):
                _check_text_block(_object(block, f"system.{index}"), f"system.{index}", typed=True)
    metadata = data.get("metadata")
    if metadata is not None:
        _optional(metadata, "user_id", str, "metadata")
    for index, sequence in enumerate(data.get("stop_sequences") or ()):
        _check(sequence, str, f"stop_sequences.{index}")
        if not sequence:
            _refuse(f"stop_sequences.{index}", "String should have at least 1 character")
    for index, tool in enumerate(data.get("tools") or () if "tools" not in skipped else ()):
        check_tool(tool, f"tools.{index}")
    if data.get("tool_choice") is not None:
        _check_tool_choice(data["tool_choice"])
    if data.get("thinking") is not None:
        _check_thinking_config(data["thinking"])
    if data.get("output_config") is not None:
        _check_output_config(data["output_config"])
    if data.get("mcp_servers"):
        _refuse(
            "mcp_servers",
            "MCP servers called by the API are not supported by the gateway; run them in the client",
        )


def _check_sampling(data: dict[str, Any], count_tokens: bool) -> None:
    max_tokens = data.get("max_tokens")
    if max_tokens is None and not count_tokens:
        _refuse("max_tokens", "Field required")
    if max_tokens is not None:
        _check(max_tokens, int, "max_tokens")
        if max_tokens < 1:
            _refuse("max_tokens", "Input should be greater than or equal to 1")
    for name in ("temperature", "top_p"):
        value = data.get(name)
        if value is not None:
            _check(value, _NUMBER, name)
            if not 0 <= value <= 1:
                _refuse(name, "Input should be between 0 and 1")
    top_k = data.get("top_k")
    if top_k is not None:
        _check(top_k, int, "top_k")
        if top_k < 0:
            _refuse("top_k", "Input should be greater than or equal to 0")


# -- messages


def _check_message(message: Any, param: str) -> None:
    if type(message) is not dict or not _common_message(message):
        _check_message_fully(message, param)


def _check_message_fully(message: Any, param: str) -> None:
    message = _object(message, param)
    role = message.get("role")
    if role is None:
        _refuse(f"{param}.role", "Field required")
    _one_of(role, _ROLES, f"{param}.role")
    content = message.get("content")
    if content is None:
        _refuse(f"{param}.content", "Field required")
    _check(content, (str, list), f"{param}.content")
    if isinstance(content, str):
        return
    allowed = _USER_BLOCKS if role == "user" else _ASSISTANT_BLOCKS if role == "assistant" else _SYSTEM_BLOCKS
    for index, block in enumerate(content):
        block_param = f"{param}.content.{index}"
        block = _object(block, block_param)
        kind = _block_type(block, allowed, block_param, role)
        _BLOCK_CHECKS[kind](block, block_param)


def _common_message(message: dict[str, Any]) -> bool:
    """Whether a message is made only of what nearly every message of a coding agent's is (text,
    a tool call, a tool's text result), each field as the full checks want it: then those
    checks, which name what is wrong, need not run. False says nothing."""
    role, content = message.get("role"), message.get("content")
    if type(content) is str:
        return role in _ROLES
    if type(content) is not list or (role != "user" and role != "assistant"):
        return False
    for block in content:
        if type(block) is not dict:
            return False
        kind = block.get("type")
        if kind == "text":
            if type(block.get("text")) is not str:
                return False
        elif kind == "tool_use" and role == "assistant":
            name = block.get("name")
            if type(block.get("id")) is not str or type(name) is not str or not name:
                return False
            if type(block.get("input")) is not dict:
                return False
        elif kind == "tool_result" and role == "user":
            result, failed = block.get("content"), block.get("is_error")
            if type(block.get("tool_use_id")) is not str or (result is not None and type(result) is not str):
                return False
            if failed is not None and type(failed) is not bool:
                return False
        else:
            return False
    return True


def _block_type(block: dict[str, Any], allowed: tuple[str, ...], param: str, role: str) -> str:
    kind = block.get("type")
    if kind is None:
        _refuse(f"{param}.type", "Field required")
    _check(kind, str, f"{param}.type")
    if kind in allowed:
        return str(kind)
    if kind in _SERVER_BLOCKS:
        _refuse(
            f"{param}.type",
            f"'{kind}' blocks belong to tools the API runs, and the gateway runs none; "
            "send the conversation without them",
        )
    expected = ", ".join(f"'{a}'" for a in allowed)
    _refuse(f"{param}.type", f"'{kind[:80]}' blocks are not accepted in {role} content (expected {expected})")


def _check_text_block(block: dict[str, Any], param: str, *, typed: bool = False) -> None:
    """`typed`: the block's type is not checked by the caller (a system block)."""
    if typed:
        kind = _required(block, "type", str, param)
        if kind != "text":
            _refuse(f"{param}.type", "Input should be 'text'")
    _required(block, "text", str, param)


def _check_image(block: dict[str, Any], param: str) -> None:
    source = _object(_required(block, "source", dict, param), f"{param}.source")
    source_param = f"{param}.source"
    kind = _one_of(
        _required(source, "type", str, source_param), ("base64", "url", "file"), f"{source_param}.type"
    )
    if kind == "base64":
        media_type = _required(source, "media_type", str, source_param)
        _one_of(media_type, IMAGE_MEDIA_TYPES, f"{source_param}.media_type")
        _required(source, "data", str, source_param)
    elif kind == "url":
        _required(source, "url", str, source_param)
    else:
        _refuse(
            f"{source_param}.type",
            "images named by a file_id are not supported: the gateway has no files API; "
            "send the image as base64 or a URL",
        )


def _check_document(block: dict[str, Any], param: str) -> None:
    source = _object(_required(block, "source", dict, param), f"{param}.source")
    source_param = f"{param}.source"
    kinds = ("base64", "text", "content", "url", "file")
    kind = _one_of(_required(source, "type", str, source_param), kinds, f"{source_param}.type")
    if kind == "base64":
        _one_of(
            _required(source, "media_type", str, source_param),
            ("application/pdf",),
            f"{source_param}.media_type",
        )
        _required(source, "data", str, source_param)
    elif kind == "text":
        _one_of(
            _required(source, "media_type", str, source_param), ("text/plain",), f"{source_param}.media_type"
        )
        _required(source, "data", str, source_param)
    elif kind == "content":
        content = _required(source, "content", (str, list), source_param)
        if isinstance(content, list):
            for index, part in enumerate(content):
                part_param = f"{source_param}.content.{index}"
                part = _object(part, part_param)
                part_kind = _block_type(part, ("text", "image"), part_param, "document")
                _BLOCK_CHECKS[part_kind](part, part_param)
    elif kind == "url":
        _refuse(
            f"{source_param}.type",
            "documents named by a URL are not supported: the gateway fetches nothing; "
            "send the document as base64 or text",
        )
    else:
        _refuse(
            f"{source_param}.type",
            "documents named by a file_id are not supported: the gateway has no files API; "
            "send the document as base64 or text",
        )
    _optional(block, "title", str, param)
    _optional(block, "context", str, param)


def _check_search_result(block: dict[str, Any], param: str) -> None:
    _required(block, "source", str, param)
    _required(block, "title", str, param)
    for index, part in enumerate(_required(block, "content", list, param)):
        _check_text_block(_object(part, f"{param}.content.{index}"), f"{param}.content.{index}", typed=True)


def _check_tool_result(block: dict[str, Any], param: str) -> None:
    _required(block, "tool_use_id", str, param)
    _optional(block, "is_error", bool, param)
    content = _optional(block, "content", (str, list), param)
    for index, part in enumerate(content if isinstance(content, list) else ()):
        part_param = f"{param}.content.{index}"
        part = _object(part, part_param)
        kind = _block_type(part, _TOOL_RESULT_BLOCKS, part_param, "tool_result")
        _BLOCK_CHECKS[kind](part, part_param)


def _check_tool_reference(block: dict[str, Any], param: str) -> None:
    _required(block, "tool_name", str, param)


def _check_tool_use(block: dict[str, Any], param: str) -> None:
    _required(block, "id", str, param)
    name = _required(block, "name", str, param)
    if not name:
        _refuse(f"{param}.name", "String should have at least 1 character")
    _required(block, "input", dict, param)


def _check_thinking_block(block: dict[str, Any], param: str) -> None:
    _required(block, "thinking", str, param)
    if block.get("signature") is None:  # "" is kept: some clients send what they were given
        _refuse(f"{param}.signature", "Field required")
    _check(block["signature"], str, f"{param}.signature")


def _check_redacted_thinking(block: dict[str, Any], param: str) -> None:
    _required(block, "data", str, param)


def _check_tool_change(block: dict[str, Any], param: str) -> None:
    """A system message's `tool_addition` or `tool_removal` (the mid-conversation tool
    changes beta): a reference to a tool by name, or for an addition a tool defined inline."""
    tool = _object(_required(block, "tool", dict, param), f"{param}.tool")
    tool_param = f"{param}.tool"
    kind = _required(tool, "type", str, tool_param)
    if kind == "tool_reference":
        _required(tool, "name", str, tool_param)
    elif kind == "tool_definition" and block.get("type") == "tool_addition":
        check_tool(_required(tool, "definition", dict, tool_param), f"{tool_param}.definition")
    # MCP references name tools of servers the API calls: left to the translator, which skips them.


_BLOCK_CHECKS = {
    "text": _check_text_block,
    "image": _check_image,
    "document": _check_document,
    "search_result": _check_search_result,
    "tool_result": _check_tool_result,
    "tool_reference": _check_tool_reference,
    "tool_use": _check_tool_use,
    "thinking": _check_thinking_block,
    "redacted_thinking": _check_redacted_thinking,
    "tool_addition": _check_tool_change,
    "tool_removal": _check_tool_change,
}


# -- tools and the other objects


def check_tool(tool: Any, param: str) -> None:
    """A `tools` entry: a client tool (`name`, `input_schema`), or a server tool, of which only
    the type is read. Raises InvalidRequest naming the field."""
    tool = _object(tool, param)
    kind = _optional(tool, "type", str, param)
    _optional(tool, "name", str, param)
    if kind not in (None, "custom"):
        return
    name = _required(tool, "name", str, param)
    if not name:
        _refuse(f"{param}.name", "String should have at least 1 character")
    _optional(tool, "description", str, param)
    _required(tool, "input_schema", dict, param)
    _optional(tool, "strict", bool, param)


def _check_tool_choice(choice: dict[str, Any]) -> None:
    kind = choice.get("type")
    if kind is None:
        _refuse("tool_choice.type", "Field required")
    if _one_of(kind, _TOOL_CHOICES, "tool_choice.type") == "tool":
        name = _required(choice, "name", str, "tool_choice")
        if not name:
            _refuse("tool_choice.name", "String should have at least 1 character")
    _optional(choice, "disable_parallel_tool_use", bool, "tool_choice")


def _check_thinking_config(thinking: dict[str, Any]) -> None:
    kind = thinking.get("type")
    if kind is None:
        _refuse("thinking.type", "Field required")
    if _one_of(kind, THINKING_TYPES, "thinking.type") == "enabled":
        budget = _required(thinking, "budget_tokens", int, "thinking")
        if budget < 1:
            _refuse("thinking.budget_tokens", "Input should be greater than or equal to 1")
    _optional(thinking, "display", str, "thinking")


def _check_output_config(config: dict[str, Any]) -> None:
    effort = config.get("effort")
    if effort is not None:
        _one_of(effort, EFFORTS, "output_config.effort")
    fmt = _optional(config, "format", dict, "output_config")
    if fmt is not None:
        _one_of(
            _required(fmt, "type", str, "output_config.format"), ("json_schema",), "output_config.format.type"
        )
        _required(fmt, "schema", dict, "output_config.format")
