"""The Responses request as codexgate's canonical request, and its validation. No I/O.

Strict where the input is ours to judge (types of known fields, with the parameter named in
the error), lenient where it is not: unknown top-level fields are kept in `extra`, unknown item
types and unknown keys on items pass through untouched.

Every shape the translators read is checked here, where it enters, so that no client input can
reach code that assumes a shape: a wrong type is a 400 naming the field, never a 500 later.
Nesting is limited to `MAX_DEPTH` levels: orjson reads 1,024 levels but writes only ~255, and
parts of the request (metadata, tool schemas) are echoed or sent upstream, so a deeper body
would fail on the way out, after the upstream was called.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, NoReturn

from codexgate.errors import InvalidRequest
from codexgate.wire.checks import (
    MAX_DEPTH,
    NUMBER,
    TEMPERATURE_RANGE,
    TOP_P_RANGE,
    check_metadata,
    check_model,
    check_optional,
    check_range,
    check_token_count,
    check_type,
    is_tool_choice_mode,
    stop_sequences,
)
from codexgate.wire.recent import CheckedTools

Item = dict[str, Any]

# Item types that must carry these fields, with their JSON types, to be translatable.
_ITEM_REQUIRED: dict[str, tuple[tuple[str, type | tuple[type, ...]], ...]] = {
    "function_call": (("call_id", str), ("name", str), ("arguments", str)),
    "function_call_output": (("call_id", str), ("output", (str, list))),
    "custom_tool_call": (("call_id", str), ("name", str), ("input", str)),
    "custom_tool_call_output": (("call_id", str), ("output", (str, list))),
    "local_shell_call": (("call_id", str),),
    "local_shell_call_output": (("call_id", str), ("output", (str, list))),
    "tool_search_call": (("call_id", str),),
    "tool_search_output": (("call_id", str),),
    "agent_message": (("content", list),),
    "additional_tools": (("tools", list),),
    "item_reference": (("id", str),),  # resolved from the store (server/state.py)
}
_ROLES = frozenset(("user", "assistant", "system", "developer"))


@dataclass(frozen=True, slots=True)
class NativeRequest:
    """The client's own request, kept beside its canonical form for a backend that speaks the
    same dialect and can pass it through (the Messages face's body to an `anthropic`
    upstream): what the canonical request cannot hold (cache_control breakpoints, thinking
    signatures byte for byte, betas) reaches that upstream unchanged. Every other backend
    reads the canonical request only."""

    dialect: str  # "messages": an Anthropic Messages body
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)  # e.g. anthropic-beta, anthropic-version


@dataclass(slots=True)
class ResponsesRequest:
    model: str
    input: list[Item]
    instructions: str | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)
    tool_choice: Any = "auto"
    parallel_tool_calls: bool | None = None
    stream: bool = False
    reasoning: dict[str, Any] | None = None
    text: dict[str, Any] | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    store: bool | None = None
    previous_response_id: str | None = None
    metadata: dict[str, Any] | None = None
    prompt_cache_key: str | None = None
    service_tier: str | None = None
    user: str | None = None
    # Not in the Responses API: what a Chat Completions client may ask for (server/faces/chat.py),
    # accepted from Responses clients too. A backend that cannot honour one refuses it.
    stop: list[str] | None = None
    seed: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # The client's own body when its face keeps it for a backend of its dialect (NativeRequest).
    native: NativeRequest | None = None


_TYPED_FIELDS: dict[str, type | tuple[type, ...]] = {
    # name: accepted JSON types (null is always accepted)
    "instructions": str,
    "tools": list,
    "parallel_tool_calls": bool,
    "stream": bool,
    "reasoning": dict,
    "text": dict,
    "store": bool,
    "previous_response_id": str,
    "metadata": dict,
    "prompt_cache_key": str,
    "service_tier": str,
    "user": str,
    "seed": int,
}
# Checked by their ranges (_check_fields), their types with them.
_RANGED_FIELDS = ("max_output_tokens", "temperature", "top_p")
_KNOWN = frozenset(_TYPED_FIELDS) | {"model", "input", "tool_choice", "stop", *_RANGED_FIELDS}
# Fields kept in `extra` (the canonical model has no slot for them: backends read them there)
# whose JSON type is still checked here, where a wrong one can be named.
_TYPED_EXTRAS: dict[str, type | tuple[type, ...]] = {
    "include": list,
    "truncation": str,
    "top_logprobs": int,
    "max_tool_calls": int,
    "stream_options": dict,
    "safety_identifier": str,
    "prompt_cache_retention": str,
    "presence_penalty": NUMBER,
    "frequency_penalty": NUMBER,
    "logit_bias": dict,
}
# Values of `include` that ask for what no backend of the gateway carries back: refused, since
# the answer would lack it in silence. The others name what a Responses server adds to its
# answer: reasoning's encrypted_content (the gateway always fills it), results of hosted tools,
# input image URLs (the gateway stores items as sent); unknown values are passed over, as
# unknown fields are.
_UNSERVED_INCLUDES = {
    "message.output_text.logprobs": "log probabilities are not carried back by the gateway",
}
_TEXT_FORMATS = frozenset(("text", "json_schema", "json_object"))
_CUSTOM_FORMATS = frozenset(("text", "grammar"))
# Fields whose meaning a gateway without them would silently change: refused when set.
_REFUSED_FIELDS = {
    "background": "background responses are not served; send the request without it",
    "conversation": "stored conversations are not served; send the whole history in 'input'",
    "prompt": "stored prompt templates are not served; send the prompt's text in 'input'",
}


def _nesting_depth(data: Any) -> int:
    """How deep containers nest (a scalar is 0, `{}` is 1). Iterative: no recursion limit.

    One level at a time, with exact type checks: decoded JSON holds only plain dicts and lists,
    and every request passes here (a 60 KB Codex request: ~26 us, against ~59 us for a walk
    that pairs each container with its depth and asks isinstance of every value)."""
    kind = type(data)
    if kind is not dict and kind is not list:
        return 0
    level: list[Any] = [data]
    depth = 0
    while level:
        depth += 1
        below: list[Any] = []
        for value in level:
            for child in value.values() if type(value) is dict else value:
                kind = type(child)
                if kind is dict or kind is list:
                    below.append(child)
        level = below
    return depth


def _too_deep_path(data: Any, limit: int) -> str:
    """The path of the first container nested deeper than `limit` (only called once one is
    known to exist, so the cost of building paths is paid on the error path alone)."""
    stack: list[tuple[Any, int, str]] = [(data, 1, "")]
    while stack:
        value, depth, path = stack.pop()
        if depth > limit:
            return path
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, child in items:
            if isinstance(child, (dict, list)):
                step = f"[{key}]" if isinstance(key, int) else (f".{key}" if path else str(key))
                stack.append((child, depth + 1, path + step))
    return ""


def check_depth(data: Any, limit: int = MAX_DEPTH) -> None:
    """Raises InvalidRequest naming the top-level field that nests deeper than `limit`."""
    if _nesting_depth(data) <= limit:
        return
    path = _too_deep_path(data, limit)
    field_name = _clip(re.split(r"[.\[]", path, maxsplit=1)[0], 80) if path else None
    raise InvalidRequest(
        f"'{field_name or 'body'}' is nested too deep: more than {limit} levels (at '{_clip(path, 200)}').",
        param=field_name,
    )


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def item_kinds(items: list[Item]) -> frozenset[Any]:
    """The `type` of each of `items` (checked items: dicts)."""
    return frozenset(item.get("type") for item in items)


def parse_request(data: dict[str, Any]) -> ResponsesRequest:
    """Validate a decoded /v1/responses body. Raises InvalidRequest naming the parameter."""
    return parse_continued(data, None)[0]


def parse_continued(data: dict[str, Any], earlier: ResponsesRequest | None) -> tuple[ResponsesRequest, int]:
    """`parse_request` for the next request of a conversation, and how many leading input
    items it shares with `earlier` (a request of the same conversation validated before).

    Codex re-sends the whole history every turn, so the leading input items equal to the
    earlier request's, and its tools when they are the same, are not checked again: comparing
    them is C code and some 10x cheaper than walking them (1 MB of history: ~80 us instead of
    ~1 ms). Raises InvalidRequest naming the parameter."""
    model = check_model(data)
    raw_input = data.get("input")
    raw_tools, fresh_tools = _known_tools(data.get("tools"), earlier)
    known_items = _check_new_depth(data, raw_input, raw_tools, fresh_tools, earlier)
    for name, why in _REFUSED_FIELDS.items():
        if data.get(name) not in (None, False):
            raise InvalidRequest(f"'{name}' is not supported: {why}.", param=name)
    items = _input_items(raw_input, known_items)
    tools = raw_tools or []
    tool_choice = _check_fields(data, tools, fresh_tools)
    stop = stop_sequences(data.get("stop"))

    req = ResponsesRequest(
        model=model,
        input=items,
        instructions=data.get("instructions") or None,
        tools=tools,
        tool_choice=tool_choice if tool_choice is not None else "auto",
        parallel_tool_calls=data.get("parallel_tool_calls"),
        stream=bool(data.get("stream")),
        reasoning=data.get("reasoning"),
        text=data.get("text"),
        max_output_tokens=data.get("max_output_tokens"),
        temperature=data.get("temperature"),
        top_p=data.get("top_p"),
        store=data.get("store"),
        previous_response_id=data.get("previous_response_id"),
        metadata=data.get("metadata"),
        prompt_cache_key=data.get("prompt_cache_key"),
        service_tier=data.get("service_tier"),
        user=data.get("user"),
        stop=stop,
        seed=data.get("seed"),
        extra={k: v for k, v in data.items() if k not in _KNOWN},
    )
    return req, known_items


# Tools checked lately (wire/recent.py): a request's tool equal to one is not checked again.
_CHECKED_TOOLS = CheckedTools()


def _known_tools(raw_tools: Any, earlier: ResponsesRequest | None) -> tuple[Any, list[int] | None]:
    """`raw_tools` with each tool checked lately replaced by that tool (the whole list by the
    conversation's earlier request's when they are equal), and the positions of the tools
    still to check (None: all, `raw_tools` not being a list of tools)."""
    if type(raw_tools) is not list or not raw_tools:
        return raw_tools, None
    if earlier is not None and raw_tools == earlier.tools:
        return earlier.tools, []
    tools: list[Any] = []
    fresh: list[int] = []
    find = _CHECKED_TOOLS.find
    for index, tool in enumerate(raw_tools):
        known = find(tool)
        if known is None:
            fresh.append(index)
            tools.append(tool)
        else:
            tools.append(known)
    return tools, fresh


def _check_new_depth(
    data: dict[str, Any],
    raw_input: Any,
    tools: Any,
    fresh_tools: list[int] | None,
    earlier: ResponsesRequest | None,
) -> int:
    """How many leading input items equal `earlier`'s. What is new (of the tools, those at
    `fresh_tools`) is checked for depth: raises InvalidRequest (check_depth) for too deep a part."""
    known_items = 0
    if earlier is not None and isinstance(raw_input, list):
        known_items = _common_prefix(raw_input, earlier.input)
    known_tools = fresh_tools is not None and len(fresh_tools) < len(tools)
    if known_items or known_tools:
        unchecked = dict(data)
        if known_items and isinstance(raw_input, list):
            unchecked["input"] = raw_input[known_items:]
        if known_tools and fresh_tools is not None:
            unchecked["tools"] = [tools[index] for index in fresh_tools]
        check_depth(unchecked)
    else:
        check_depth(data)
    return known_items


def _input_items(raw_input: Any, known_items: int) -> list[Item]:
    """`input` as items (a string is one user message), those after the `known_items` first
    validated."""
    if raw_input is None:
        raise InvalidRequest("Missing required parameter: 'input'.", param="input")
    if isinstance(raw_input, str):
        return [{"type": "message", "role": "user", "content": raw_input}]
    if not isinstance(raw_input, list):
        raise InvalidRequest("Invalid type for 'input': expected a string or an array.", param="input")
    for index in range(known_items, len(raw_input)):
        item = raw_input[index]
        if not _common_item(item):  # then the full checks, which name what is wrong
            _validate_item(item, f"input[{index}]")
    return raw_input


def _check_fields(data: dict[str, Any], tools: list[Any], fresh_tools: list[int] | None) -> Any:
    """The other fields: their JSON types, then the tools (those at `fresh_tools`, None: all;
    the others were checked lately) and the objects the translators read. Returns
    `tool_choice`."""
    for name, expected in _TYPED_FIELDS.items():
        value = data.get(name)
        if value is not None:
            check_type(value, expected, name)
    check_token_count(data.get("max_output_tokens"), "max_output_tokens")
    check_range(data.get("temperature"), TEMPERATURE_RANGE, "temperature")
    check_range(data.get("top_p"), TOP_P_RANGE, "top_p")
    for name, kind in _TYPED_EXTRAS.items():
        if data.get(name) is not None:
            check_type(data[name], kind, name)
    _validate_extras(data)
    for index in range(len(tools)) if fresh_tools is None else fresh_tools:
        tool = tools[index]
        if not _common_tool(tool):  # then the full checks, which name what is wrong
            _validate_tool(tool, f"tools[{index}]")
    for index in fresh_tools or ():
        _CHECKED_TOOLS.add(tools[index])
    tool_choice = data.get("tool_choice", "auto")
    if tool_choice is not None:
        _validate_tool_choice(tool_choice)
    if data.get("reasoning") is not None:
        for name in ("effort", "summary"):
            check_optional(data["reasoning"], name, str, "reasoning")
    if data.get("text") is not None:
        _validate_text(data["text"])
    if data.get("metadata") is not None:
        check_metadata(data["metadata"])
    return tool_choice


def _common_prefix(items: list[Any], earlier: list[Item]) -> int:
    """How many leading items equal the earlier request's (usually all of them: one
    comparison of the lists; otherwise item by item to the first difference)."""
    n = min(len(items), len(earlier))
    if items[:n] == earlier[:n]:
        return n
    for index in range(n):
        if items[index] != earlier[index]:
            return index
    return n


_STR_FIELDS = {  # item types whose required fields are all strings, with those fields
    kind: tuple(name for name, _ in fields)
    for kind, fields in _ITEM_REQUIRED.items()
    if kind in ("function_call", "custom_tool_call")
}
_OUTPUT_TYPES = ("function_call_output", "custom_tool_call_output")


def _common_item(item: Any) -> bool:
    """Whether `item` is one of the shapes Codex sends most, in a form `_validate_item` passes:
    checked here with exact types and no parameter names (the common item costs a few
    lookups). False says nothing: `_validate_item` decides, and names what is wrong."""
    if type(item) is not dict:
        return False
    kind = item.get("type")
    if type(kind) is not str:
        return False
    if kind == "message":
        role, content = item.get("role"), item.get("content")
        return (
            type(role) is str
            and role in _ROLES
            and (type(content) is str or (type(content) is list and _common_parts(content)))
        )
    if kind in _OUTPUT_TYPES:
        return type(item.get("call_id")) is str and type(item.get("output")) is str
    fields = _STR_FIELDS.get(kind)
    if fields is not None:
        namespace = item.get("namespace")
        strings = all(type(item.get(name)) is str for name in fields)
        return strings and (namespace is None or type(namespace) is str)
    if kind == "reasoning":
        blob, summary, content = item.get("encrypted_content"), item.get("summary"), item.get("content")
        return (
            (blob is None or type(blob) is str)
            and (summary is None or (type(summary) is list and _common_parts(summary)))
            and (content is None or (type(content) is list and _common_parts(content)))
        )
    return False


def _common_parts(parts: list[Any]) -> bool:
    """Whether every part is a text part `_validate_parts` passes (see `_common_item`)."""
    for part in parts:
        if type(part) is not dict:
            return False
        kind, text, blob = part.get("type"), part.get("text"), part.get("encrypted_content")
        if not (
            (type(kind) is str and kind != "input_file" and kind != "input_image")
            and (text is None or type(text) is str)
            and (blob is None or type(blob) is str)
        ):
            return False
    return True


def _validate_item(item: Any, param: str) -> None:
    if not isinstance(item, dict):
        raise InvalidRequest(f"Invalid type for '{param}': expected an object.", param=param)
    kind = item.get("type")
    if kind is None and "role" in item:
        kind = "message"  # EasyInputMessage: {"role", "content"} without a type
    if kind == "message":
        role = item.get("role")
        if not isinstance(role, str) or role not in _ROLES:
            raise InvalidRequest(
                f"Invalid value for '{param}.role': expected one of user, assistant, system, developer.",
                param=f"{param}.role",
            )
        content = item.get("content")
        if not isinstance(content, (str, list)):
            raise InvalidRequest(
                f"Invalid type for '{param}.content': expected a string or an array.",
                param=f"{param}.content",
            )
        if isinstance(content, list):
            _validate_parts(content, f"{param}.content")
        return
    if not isinstance(kind, str):
        raise InvalidRequest(f"Missing required parameter: '{param}.type'.", param=f"{param}.type")
    for name, expected in _ITEM_REQUIRED.get(kind, ()):
        value = item.get(name)
        if value is None:
            raise InvalidRequest(f"Missing required parameter: '{param}.{name}'.", param=f"{param}.{name}")
        check_type(value, expected, f"{param}.{name}")
        if isinstance(value, list):
            _validate_parts(value, f"{param}.{name}")
    if kind in ("function_call", "custom_tool_call"):
        check_optional(item, "namespace", str, param)
    elif kind == "additional_tools":
        for index, tool in enumerate(item["tools"]):
            _validate_tool(tool, f"{param}.tools[{index}]")
    elif kind == "agent_message":
        check_optional(item, "author", str, param)
        check_optional(item, "recipient", str, param)
    elif kind == "local_shell_call":
        check_optional(item, "action", dict, param)
    elif kind == "tool_search_call":
        check_optional(item, "arguments", (dict, str), param)
    elif kind == "tool_search_output":
        check_optional(item, "tools", list, param)
    elif kind == "reasoning":
        check_optional(item, "encrypted_content", str, param)
        for name in ("summary", "content"):
            value = item.get(name)
            if value is not None:
                check_type(value, list, f"{param}.{name}")
                _validate_parts(value, f"{param}.{name}")


def _common_tool(tool: Any) -> bool:
    """Whether `tool` is a function or custom tool as Codex sends them, in a form
    `_validate_tool` passes (see `_common_item`)."""
    if type(tool) is not dict:
        return False
    kind, name, description = tool.get("type"), tool.get("name"), tool.get("description")
    if type(name) is not str or not name or not (description is None or type(description) is str):
        return False
    if kind == "function":
        parameters, strict = tool.get("parameters"), tool.get("strict")
        return (
            tool.get("function") is None
            and (parameters is None or type(parameters) is dict)
            and (strict is None or type(strict) is bool)
        )
    if kind == "custom":
        fmt = tool.get("format")
        if fmt is None:
            return True
        if type(fmt) is not dict or fmt.get("type") not in ("text", "grammar"):
            return False
        return fmt["type"] == "text" or (
            type(fmt.get("syntax")) is str and type(fmt.get("definition")) is str
        )
    return False


def _validate_tool(tool: Any, param: str) -> None:
    """A tool of a kind the gateway reads must have what it is read by (a function's name...);
    hosted kinds and kinds the gateway does not know are left to the backend (a chat upstream
    leaves them out and says so, a Responses upstream may take them as they are)."""
    if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
        raise InvalidRequest(f"Invalid value for '{param}': expected an object with a 'type'.", param=param)
    kind = tool["type"]
    if kind == "function":
        function = tool.get("function")  # the Chat Completions shape, sent by some clients
        if function is not None:
            check_type(function, dict, f"{param}.function")
            _validate_function_tool(function, f"{param}.function", named=False)
        _validate_function_tool(tool, param, named=function is None or function.get("name") is None)
    elif kind == "custom":
        _validate_custom_tool(tool, param)
    elif kind == "namespace":
        _required_name(tool, param)
        check_optional(tool, "description", str, param)
        subtools = tool.get("tools")
        if subtools is not None:
            check_type(subtools, list, f"{param}.tools")
            for index, sub in enumerate(subtools):
                sub_param = f"{param}.tools[{index}]"
                check_type(sub, dict, sub_param)
                sub_kind = check_optional(sub, "type", str, sub_param) or "function"
                if sub_kind == "custom":
                    _validate_custom_tool(sub, sub_param)
                elif sub_kind == "function":
                    _validate_function_tool(sub, sub_param)
    elif kind == "tool_search":
        for name in ("execution", "description"):
            check_optional(tool, name, str, param)
        check_optional(tool, "parameters", dict, param)


def _missing(param: str) -> NoReturn:
    raise InvalidRequest(f"Missing required parameter: '{param}'.", param=param)


def _required_name(tool: dict[str, Any], param: str) -> str:
    name = tool.get("name")
    if name is None:
        _missing(f"{param}.name")
    check_type(name, str, f"{param}.name")
    if not name:
        raise InvalidRequest(f"'{param}.name' must not be empty.", param=f"{param}.name")
    return str(name)


def _validate_custom_tool(tool: dict[str, Any], param: str) -> None:
    _required_name(tool, param)
    check_optional(tool, "description", str, param)
    fmt = tool.get("format")
    if fmt is None:
        return
    fmt_param = f"{param}.format"
    check_type(fmt, dict, fmt_param)
    kind = _required_value(fmt, "type", _CUSTOM_FORMATS, fmt_param)
    if kind == "grammar":
        for name in ("syntax", "definition"):
            value = fmt.get(name)
            if value is None:
                _missing(f"{fmt_param}.{name}")
            check_type(value, str, f"{fmt_param}.{name}")


def _validate_function_tool(tool: dict[str, Any], param: str, *, named: bool = True) -> None:
    """`named`: the name must be here (not in the Chat-shaped `function` beside it)."""
    if named:
        _required_name(tool, param)
    else:
        check_optional(tool, "name", str, param)
    check_optional(tool, "description", str, param)
    check_optional(tool, "parameters", dict, param)
    check_optional(tool, "strict", bool, param)


def _required_value(obj: dict[str, Any], name: str, allowed: frozenset[str], param: str) -> str:
    value = obj.get(name)
    if value is None:
        _missing(f"{param}.{name}")
    check_type(value, str, f"{param}.{name}")
    if value not in allowed:
        raise InvalidRequest(
            f"Invalid value for '{param}.{name}': expected one of {', '.join(sorted(allowed))}.",
            param=f"{param}.{name}",
        )
    return str(value)


def _validate_tool_choice(choice: Any) -> None:
    if is_tool_choice_mode(choice):
        return
    check_type(choice, dict, "tool_choice")
    kind = choice.get("type")
    if kind is None:
        _missing("tool_choice.type")
    check_type(kind, str, "tool_choice.type")
    for name in ("name", "namespace", "mode"):
        check_optional(choice, name, str, "tool_choice")
    if kind in ("function", "custom") and choice.get("name") is None:
        _missing("tool_choice.name")
    if kind == "allowed_tools":
        mode = choice.get("mode")
        if mode is not None and mode not in ("auto", "required"):
            raise InvalidRequest(
                "Invalid value for 'tool_choice.mode': expected auto or required.", param="tool_choice.mode"
            )
        tools = choice.get("tools")
        if tools is None:
            _missing("tool_choice.tools")
        check_type(tools, list, "tool_choice.tools")
        for index, tool in enumerate(tools):
            tool_param = f"tool_choice.tools[{index}]"
            if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
                raise InvalidRequest(
                    f"Invalid value for '{tool_param}': expected an object with a 'type'.", param=tool_param
                )
            for name in ("name", "namespace"):
                check_optional(tool, name, str, tool_param)


def _validate_extras(data: dict[str, Any]) -> None:
    """Values of the typed extras (their JSON types are checked)."""
    include = data.get("include")
    for index, value in enumerate(include or ()):
        check_type(value, str, f"include[{index}]")
        why = _UNSERVED_INCLUDES.get(value)
        if why is not None:
            param = f"include[{index}]"
            raise InvalidRequest(f"'{param}' ({value}) is not supported: {why}.", param=param)
    truncation = data.get("truncation")
    if truncation is not None and truncation not in ("auto", "disabled"):
        raise InvalidRequest("Invalid value for 'truncation': expected auto or disabled.", param="truncation")
    top_logprobs = data.get("top_logprobs")
    if top_logprobs is not None and not 0 <= top_logprobs <= 20:
        raise InvalidRequest("'top_logprobs' must be between 0 and 20.", param="top_logprobs")
    if top_logprobs:
        raise InvalidRequest(
            "'top_logprobs' is not supported: log probabilities are not carried back by the gateway; "
            "send 0 or leave it out.",
            param="top_logprobs",
        )
    max_tool_calls = data.get("max_tool_calls")
    if max_tool_calls is not None and max_tool_calls < 1:
        raise InvalidRequest("'max_tool_calls' must be at least 1.", param="max_tool_calls")
    if data.get("stream_options") is not None:
        check_optional(data["stream_options"], "include_obfuscation", bool, "stream_options")


def _validate_text(text: dict[str, Any]) -> None:
    check_optional(text, "verbosity", str, "text")
    fmt = text.get("format")
    if fmt is None:
        return
    check_type(fmt, dict, "text.format")
    _required_value(fmt, "type", _TEXT_FORMATS, "text.format")
    for name in ("name", "description"):
        check_optional(fmt, name, str, "text.format")
    check_optional(fmt, "schema", dict, "text.format")
    check_optional(fmt, "strict", bool, "text.format")


def _validate_parts(parts: list[Any], param: str) -> None:
    for index, part in enumerate(parts):
        part_param = f"{param}[{index}]"
        if not isinstance(part, dict):
            raise InvalidRequest(f"Invalid type for '{part_param}': expected an object.", param=part_param)
        kind = check_optional(part, "type", str, part_param)
        check_optional(part, "text", str, part_param)
        check_optional(part, "encrypted_content", str, part_param)
        if kind == "input_file":
            for name in ("filename", "file_data", "file_url", "file_id"):
                check_optional(part, name, str, part_param)
        elif kind == "input_image":
            check_optional(part, "image_url", (str, dict), part_param)
            for name in ("detail", "file_id"):
                check_optional(part, name, str, part_param)
