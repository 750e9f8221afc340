"""The Responses request as codexgate's canonical request, and its validation. No I/O.

Strict where the input is ours to judge (types of known fields, with the parameter named in
the error), lenient where it is not: unknown top-level fields are kept in `extra`, unknown item
types and unknown keys on items pass through untouched.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from codexgate.errors import InvalidRequest

Item = dict[str, Any]

# Item types that must carry these fields, with their JSON types, to be translatable.
_ITEM_REQUIRED: dict[str, tuple[tuple[str, type | tuple[type, ...]], ...]] = {
    "function_call": (("call_id", str), ("name", str), ("arguments", str)),
    "function_call_output": (("call_id", str), ("output", (str, list))),
    "custom_tool_call": (("call_id", str), ("name", str), ("input", str)),
    "custom_tool_call_output": (("call_id", str), ("output", (str, list))),
}
_ROLES = frozenset(("user", "assistant", "system", "developer"))


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
    extra: dict[str, Any] = field(default_factory=dict)


_TYPED_FIELDS: dict[str, tuple[type | tuple[type, ...], bool]] = {
    # name: (accepted JSON types, may be null)
    "instructions": (str, True),
    "tools": (list, True),
    "parallel_tool_calls": (bool, True),
    "stream": (bool, True),
    "reasoning": (dict, True),
    "text": (dict, True),
    "max_output_tokens": (int, True),
    "temperature": ((int, float), True),
    "top_p": ((int, float), True),
    "store": (bool, True),
    "previous_response_id": (str, True),
    "metadata": (dict, True),
    "prompt_cache_key": (str, True),
    "service_tier": (str, True),
    "user": (str, True),
}
_KNOWN = frozenset(_TYPED_FIELDS) | {"model", "input", "tool_choice"}

_JSON_NAMES = {
    str: "a string",
    list: "an array",
    dict: "an object",
    bool: "a boolean",
    int: "an integer",
    float: "a number",
}


def _type_name(expected: type | tuple[type, ...]) -> str:
    kinds = expected if isinstance(expected, tuple) else (expected,)
    return " or ".join(_JSON_NAMES.get(k, k.__name__) for k in kinds)


def _check_type(value: Any, expected: type | tuple[type, ...], param: str) -> None:
    # bool is an int in Python; JSON keeps them apart.
    if isinstance(value, bool) and bool not in (expected if isinstance(expected, tuple) else (expected,)):
        raise InvalidRequest(f"Invalid type for '{param}': expected {_type_name(expected)}.", param=param)
    if not isinstance(value, expected):
        raise InvalidRequest(f"Invalid type for '{param}': expected {_type_name(expected)}.", param=param)


def decode_json_body(body: bytes) -> dict[str, Any]:
    """Raises InvalidRequest when the body is not a JSON object."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"The request body is not valid JSON: {exc}.") from None
    if not isinstance(data, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    return data


def parse_request(data: dict[str, Any]) -> ResponsesRequest:
    """Validate a decoded /v1/responses body. Raises InvalidRequest naming the parameter."""
    model = data.get("model")
    if model is None:
        raise InvalidRequest("Missing required parameter: 'model'.", param="model")
    _check_type(model, str, "model")
    if not model:
        raise InvalidRequest("'model' must not be empty.", param="model")

    raw_input = data.get("input")
    if raw_input is None:
        raise InvalidRequest("Missing required parameter: 'input'.", param="input")
    if isinstance(raw_input, str):
        items: list[Item] = [{"type": "message", "role": "user", "content": raw_input}]
    elif isinstance(raw_input, list):
        items = raw_input
        for index, item in enumerate(items):
            _validate_item(item, f"input[{index}]")
    else:
        raise InvalidRequest("Invalid type for 'input': expected a string or an array.", param="input")

    for name, (expected, nullable) in _TYPED_FIELDS.items():
        value = data.get(name)
        if value is None:
            if name in data and not nullable:
                raise InvalidRequest(f"'{name}' must not be null.", param=name)
            continue
        _check_type(value, expected, name)

    tools = data.get("tools") or []
    for index, tool in enumerate(tools):
        if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
            raise InvalidRequest(
                f"Invalid value for 'tools[{index}]': expected an object with a 'type'.",
                param=f"tools[{index}]",
            )
    tool_choice = data.get("tool_choice", "auto")
    if tool_choice is not None and not isinstance(tool_choice, (str, dict)):
        raise InvalidRequest("Invalid type for 'tool_choice'.", param="tool_choice")
    max_output_tokens = data.get("max_output_tokens")
    if max_output_tokens is not None and max_output_tokens < 1:
        raise InvalidRequest("'max_output_tokens' must be at least 1.", param="max_output_tokens")

    return ResponsesRequest(
        model=model,
        input=items,
        instructions=data.get("instructions") or None,
        tools=tools,
        tool_choice=tool_choice if tool_choice is not None else "auto",
        parallel_tool_calls=data.get("parallel_tool_calls"),
        stream=bool(data.get("stream")),
        reasoning=data.get("reasoning"),
        text=data.get("text"),
        max_output_tokens=max_output_tokens,
        temperature=data.get("temperature"),
        top_p=data.get("top_p"),
        store=data.get("store"),
        previous_response_id=data.get("previous_response_id"),
        metadata=data.get("metadata"),
        prompt_cache_key=data.get("prompt_cache_key"),
        service_tier=data.get("service_tier"),
        user=data.get("user"),
        extra={k: v for k, v in data.items() if k not in _KNOWN},
    )


def _validate_item(item: Any, param: str) -> None:
    if not isinstance(item, dict):
        raise InvalidRequest(f"Invalid type for '{param}': expected an object.", param=param)
    kind = item.get("type")
    if kind is None and "role" in item:
        kind = "message"  # EasyInputMessage: {"role", "content"} without a type
    if kind == "message":
        role = item.get("role")
        if role not in _ROLES:
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
            for index, part in enumerate(content):
                if not isinstance(part, dict):
                    raise InvalidRequest(
                        f"Invalid type for '{param}.content[{index}]': expected an object.",
                        param=f"{param}.content[{index}]",
                    )
        return
    if not isinstance(kind, str):
        raise InvalidRequest(f"Missing required parameter: '{param}.type'.", param=f"{param}.type")
    for name, expected in _ITEM_REQUIRED.get(kind, ()):
        value = item.get(name)
        if value is None:
            raise InvalidRequest(f"Missing required parameter: '{param}.{name}'.", param=f"{param}.{name}")
        _check_type(value, expected, f"{param}.{name}")
