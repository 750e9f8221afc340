"""The Chat Completions request as a client sends it to codexgate's chat face, and its
validation. No I/O.

Strict where the input is ours to judge: every known field is checked here, where it enters,
and a wrong type is a 400 naming the field (`messages[2].content[0].image_url.url`), so the
translator (translate/chat_face/request.py) can read the body without checking shapes again. Lenient
where it is not: unknown top-level fields and unknown keys on messages, parts and tools are
passed over, never a reason to fail (clients add fields faster than gateways learn them).

What the gateway cannot carry is refused with a 400 naming the field rather than ignored:
several choices (`n`), audio in or out, log-probabilities, predicted outputs, hosted web search,
stored completions, and audio or file content parts. A client that asked for them and got an
answer without them would be misled.

Nesting is held to the limit of the Responses face (`check_depth` of wire/responses.py): every
chat field becomes a canonical field nested no deeper, so the canonical request stays within it.
"""

from __future__ import annotations

from typing import Any, NoReturn

from codexgate.errors import InvalidRequest
from codexgate.wire.checks import (
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
    required_field,
    stop_sequences,
)
from codexgate.wire.responses import check_depth

__all__ = [
    "CHAT_ROLES",
    "CHAT_SAMPLING_EXTRAS",
    "KNOWN_CHAT_FIELDS",
    "validate_chat_request",
]

CHAT_ROLES = frozenset(("system", "developer", "user", "assistant", "tool", "function"))
# Sampling fields with no canonical twin: carried in `ResponsesRequest.extra` under these
# names (a chat upstream takes them as they are; other backends refuse them).
CHAT_SAMPLING_EXTRAS = ("frequency_penalty", "presence_penalty", "logit_bias")

# Known top-level fields whose only check is their JSON type; null is always accepted.
_TYPED_FIELDS: dict[str, type | tuple[type, ...]] = {
    "stream": bool,
    "stream_options": dict,
    "seed": int,
    "user": str,
    "safety_identifier": str,
    "prompt_cache_key": str,
    "service_tier": str,
    "metadata": dict,
    "parallel_tool_calls": bool,
    "reasoning_effort": str,
    "verbosity": str,
    "frequency_penalty": NUMBER,
    "presence_penalty": NUMBER,
    "logit_bias": dict,
    "tools": list,
    "functions": list,
    "response_format": dict,
    "store": bool,
    "n": int,
    "logprobs": bool,
    "top_logprobs": int,
    "modalities": list,
}
# Fields refused whenever they are set (not null): the gateway has no way to honour them.
_REFUSED_FIELDS = {
    "audio": "audio output is not served; ask for text",
    "prediction": "predicted outputs are not served; send the request without 'prediction'",
    "web_search_options": "hosted web search is not served; send the request without it",
}
# Known top-level fields checked by their ranges, their types with them.
_RANGED_FIELDS = ("temperature", "top_p", "max_tokens", "max_completion_tokens")
# Every top-level field the chat face reads; the others travel in `ResponsesRequest.extra`.
_OTHER_FIELDS = frozenset(("model", "messages", "tool_choice", "function_call", "stop", *_RANGED_FIELDS))
KNOWN_CHAT_FIELDS = frozenset(_TYPED_FIELDS) | frozenset(_REFUSED_FIELDS) | _OTHER_FIELDS
_USER_PARTS = ("text", "image_url")  # the parts a user message may have


def _required(obj: dict[str, Any], name: str, expected: type | tuple[type, ...], param: str) -> Any:
    value = obj.get(name)
    if value is None:
        raise InvalidRequest(f"Missing required parameter: '{param}.{name}'.", param=f"{param}.{name}")
    check_type(value, expected, f"{param}.{name}")
    return value


def _object(value: Any, param: str) -> dict[str, Any]:
    check_type(value, dict, param)
    result: dict[str, Any] = value
    return result


def validate_chat_request(data: dict[str, Any]) -> None:
    """Check a decoded /v1/chat/completions body. Raises InvalidRequest naming the parameter:
    a wrong type or value of a known field, a missing required one, or a field asking for
    what the gateway cannot carry."""
    check_depth(data)
    check_model(data)

    for name, expected in _TYPED_FIELDS.items():
        value = data.get(name)
        if value is not None:
            check_type(value, expected, name)
    check_range(data.get("temperature"), TEMPERATURE_RANGE, "temperature")
    check_range(data.get("top_p"), TOP_P_RANGE, "top_p")
    for name in ("max_completion_tokens", "max_tokens"):
        check_token_count(data.get(name), name)
    _check_refusals(data)

    for index, message in enumerate(required_field(data, "messages", list)):
        _check_message(message, f"messages[{index}]")

    stop_sequences(data.get("stop"))
    if data.get("metadata") is not None:
        check_metadata(data["metadata"])
    if data.get("logit_bias") is not None:
        for token, bias in data["logit_bias"].items():
            check_type(bias, NUMBER, f"logit_bias.{token}")
    if data.get("stream_options") is not None:
        check_optional(data["stream_options"], "include_usage", bool, "stream_options")
    for index, tool in enumerate(data.get("tools") or ()):
        _check_tool(tool, f"tools[{index}]")
    for index, function in enumerate(data.get("functions") or ()):
        _check_function(_object(function, f"functions[{index}]"), f"functions[{index}]")
    if data.get("tool_choice") is not None:
        _check_tool_choice(data["tool_choice"])
    if data.get("function_call") is not None:
        _check_function_call_choice(data["function_call"])
    if data.get("response_format") is not None:
        _check_response_format(data["response_format"])


def _check_refusals(data: dict[str, Any]) -> None:
    for name, why in _REFUSED_FIELDS.items():
        if data.get(name) is not None:
            raise InvalidRequest(f"'{name}' is not supported: {why}.", param=name)
    n = data.get("n")
    if n is not None and n != 1:
        raise InvalidRequest(f"'n' must be 1: the gateway answers with one choice (got {n}).", param="n")
    modalities = data.get("modalities")
    if modalities is not None:
        for index, modality in enumerate(modalities):
            check_type(modality, str, f"modalities[{index}]")
        if "audio" in modalities:
            raise InvalidRequest(
                "'modalities' may not contain 'audio': audio output is not served; ask for text.",
                param="modalities",
            )
    if data.get("logprobs"):
        raise InvalidRequest(
            "'logprobs' is not supported: no upstream of the gateway carries log-probabilities yet.",
            param="logprobs",
        )
    top_logprobs = data.get("top_logprobs")
    if top_logprobs is not None and top_logprobs < 0:
        raise InvalidRequest("'top_logprobs' must be at least 0.", param="top_logprobs")
    if top_logprobs:
        raise InvalidRequest(
            "'top_logprobs' is not supported: no upstream of the gateway carries log-probabilities yet.",
            param="top_logprobs",
        )
    if data.get("store"):
        raise InvalidRequest(
            "'store' must be false: chat completions are not stored by the gateway.", param="store"
        )


# -- messages


def _check_message(message: Any, param: str) -> None:
    message = _object(message, param)
    role = message.get("role")
    if not isinstance(role, str) or role not in CHAT_ROLES:
        raise InvalidRequest(
            f"Invalid value for '{param}.role': expected one of {', '.join(sorted(CHAT_ROLES))}.",
            param=f"{param}.role",
        )
    check_optional(message, "name", str, param)
    content_param = f"{param}.content"
    content = message.get("content")
    if role == "user":
        if content is None:
            raise InvalidRequest(f"Missing required parameter: '{content_param}'.", param=content_param)
        _check_content(content, content_param, _USER_PARTS)
    elif role in ("system", "developer"):
        if content is None:
            raise InvalidRequest(f"Missing required parameter: '{content_param}'.", param=content_param)
        _check_content(content, content_param, ("text",))
    elif role == "assistant":
        _check_assistant(message, param)
    elif role == "tool":
        _required(message, "tool_call_id", str, param)
        if content is None:
            raise InvalidRequest(f"Missing required parameter: '{content_param}'.", param=content_param)
        _check_content(content, content_param, ("text",))
    else:  # function: the legacy form of a tool output
        _required(message, "name", str, param)
        check_optional(message, "content", str, param)


def _check_content(content: Any, param: str, kinds: tuple[str, ...]) -> None:
    """A string, or an array of parts of the `kinds` given: text, refusal for assistants,
    image_url for users (_USER_PARTS)."""
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise InvalidRequest(f"Invalid type for '{param}': expected a string or an array.", param=param)
    for index, part in enumerate(content):
        part_param = f"{param}[{index}]"
        part = _object(part, part_param)
        kind = _required(part, "type", str, part_param)
        if kind not in kinds:
            _refuse_part(kind, kinds, part_param)
        if kind == "image_url":
            image = _required(part, "image_url", dict, part_param)
            _required(image, "url", str, f"{part_param}.image_url")
            check_optional(image, "detail", str, f"{part_param}.image_url")
        else:  # {"type":"text","text":...}, {"type":"refusal","refusal":...}
            _required(part, kind, str, part_param)


def _refuse_part(kind: str, kinds: tuple[str, ...], param: str) -> NoReturn:
    """Raises InvalidRequest for a part of a kind not among `kinds`, saying why where the
    gateway knows the kind (a user's audio or file)."""
    expected = " or ".join(kinds)
    if kinds is _USER_PARTS:
        if kind == "input_audio":
            raise InvalidRequest(
                f"'{param}' is an audio part: the gateway cannot carry audio input; "
                "send a transcript as text.",
                param=param,
            )
        if kind == "file":
            raise InvalidRequest(
                f"'{param}' is a file part: the gateway cannot carry files; send their text.", param=param
            )
        expected = "text, image_url, input_audio or file"
    raise InvalidRequest(f"Invalid value for '{param}.type': expected {expected}.", param=f"{param}.type")


def _check_assistant(message: dict[str, Any], param: str) -> None:
    content = message.get("content")
    if content is not None:
        _check_content(content, f"{param}.content", ("text", "refusal"))
    for name in ("refusal", "reasoning_content", "reasoning"):
        check_optional(message, name, str, param)
    if message.get("audio") is not None:
        raise InvalidRequest(
            f"'{param}.audio' is not supported: the gateway cannot carry audio; "
            "send the transcript as content.",
            param=f"{param}.audio",
        )
    tool_calls = check_optional(message, "tool_calls", list, param)
    for index, call in enumerate(tool_calls or ()):
        _check_tool_call(call, f"{param}.tool_calls[{index}]")
    legacy = check_optional(message, "function_call", dict, param)
    if legacy is not None:
        _check_call_function(legacy, f"{param}.function_call")


def _check_tool_call(call: Any, param: str) -> None:
    call = _object(call, param)
    _required(call, "id", str, param)
    kind = check_optional(call, "type", str, param) or "function"  # some clients leave it out
    if kind == "function":
        _check_call_function(_required(call, "function", dict, param), f"{param}.function")
    elif kind == "custom":
        custom = _required(call, "custom", dict, param)
        _required(custom, "name", str, f"{param}.custom")
        _required(custom, "input", str, f"{param}.custom")
    else:
        raise InvalidRequest(
            f"Invalid value for '{param}.type': expected function or custom.", param=f"{param}.type"
        )


def _check_call_function(function: dict[str, Any], param: str) -> None:
    _required(function, "name", str, param)
    _required(function, "arguments", (str, dict), param)  # a few clients send the object itself


# -- tools


def _check_tool(tool: Any, param: str) -> None:
    tool = _object(tool, param)
    kind = _required(tool, "type", str, param)
    if kind == "function":
        _check_function(_required(tool, "function", dict, param), f"{param}.function")
    elif kind == "custom":
        _check_custom_tool(_required(tool, "custom", dict, param), f"{param}.custom")
    else:
        raise InvalidRequest(
            f"Tools of type '{kind}' are not supported: the gateway carries function and custom tools.",
            param=f"{param}.type",
        )


def _check_function(function: dict[str, Any], param: str) -> None:
    _required(function, "name", str, param)
    check_optional(function, "description", str, param)
    check_optional(function, "parameters", dict, param)
    check_optional(function, "strict", bool, param)


def _check_custom_tool(custom: dict[str, Any], param: str) -> None:
    _required(custom, "name", str, param)
    check_optional(custom, "description", str, param)
    fmt = check_optional(custom, "format", dict, param)
    if fmt is None:
        return
    fmt_param = f"{param}.format"
    kind = _required(fmt, "type", str, fmt_param)
    if kind == "grammar":
        grammar = _required(fmt, "grammar", dict, fmt_param)
        _required(grammar, "definition", str, f"{fmt_param}.grammar")
        _required(grammar, "syntax", str, f"{fmt_param}.grammar")
    elif kind != "text":
        raise InvalidRequest(
            f"Invalid value for '{fmt_param}.type': expected text or grammar.", param=f"{fmt_param}.type"
        )


def _check_tool_choice(choice: Any) -> None:
    if is_tool_choice_mode(choice):
        return
    choice = _object(choice, "tool_choice")
    kind = _required(choice, "type", str, "tool_choice")
    if kind == "allowed_tools":
        allowed = _required(choice, "allowed_tools", dict, "tool_choice")
        mode = _required(allowed, "mode", str, "tool_choice.allowed_tools")
        if mode not in ("auto", "required"):
            raise InvalidRequest(
                "Invalid value for 'tool_choice.allowed_tools.mode': expected auto or required.",
                param="tool_choice.allowed_tools.mode",
            )
        tools = _required(allowed, "tools", list, "tool_choice.allowed_tools")
        for index, tool in enumerate(tools):
            _check_named_tool(tool, f"tool_choice.allowed_tools.tools[{index}]")
    else:
        _check_named_tool(choice, "tool_choice")


def _check_named_tool(tool: Any, param: str) -> None:
    """`{"type":"function","function":{"name"}}` or `{"type":"custom","custom":{"name"}}`."""
    tool = _object(tool, param)
    kind = _required(tool, "type", str, param)
    if kind not in ("function", "custom"):
        raise InvalidRequest(
            f"Invalid value for '{param}.type': expected function, custom or allowed_tools.",
            param=f"{param}.type",
        )
    named = _required(tool, kind, dict, param)
    _required(named, "name", str, f"{param}.{kind}")


def _check_function_call_choice(choice: Any) -> None:
    if isinstance(choice, str):
        if choice not in ("none", "auto"):
            raise InvalidRequest(
                "Invalid value for 'function_call': expected none, auto or an object.", param="function_call"
            )
        return
    _required(_object(choice, "function_call"), "name", str, "function_call")


def _check_response_format(fmt: dict[str, Any]) -> None:
    kind = _required(fmt, "type", str, "response_format")
    if kind == "json_schema":
        schema = _required(fmt, "json_schema", dict, "response_format")
        param = "response_format.json_schema"
        _required(schema, "name", str, param)
        check_optional(schema, "description", str, param)
        check_optional(schema, "schema", dict, param)
        check_optional(schema, "strict", bool, param)
    elif kind not in ("text", "json_object"):
        raise InvalidRequest(
            "Invalid value for 'response_format.type': expected text, json_object or json_schema.",
            param="response_format.type",
        )
