"""Chat Completions request -> the canonical request (`ResponsesRequest`). Pure: no I/O, no clock.

The chat face's way in: a body checked by wire/chat.py becomes the very `ResponsesRequest` that
the Responses face would make of the equivalent Responses body (tests/translate/chat_face/test_request.py
holds the two equal through `parse_request`). It is built directly rather than by writing a
Responses body and parsing it: the body is already checked, a second walk would cost as much
again on a long history, and its errors would name Responses fields the chat client never sent.

Messages become input items in order. System and developer messages stay messages in their
place, never `instructions`: a chat client may put them anywhere, and their place matters.
An assistant turn becomes its reasoning, its message, then its calls (the order in which a
Responses answer lists them); a tool output answers its call by id.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from codexgate.wire.chat import CHAT_SAMPLING_EXTRAS, KNOWN_CHAT_FIELDS, validate_chat_request
from codexgate.wire.checks import stop_sequences
from codexgate.wire.responses import Item, ResponsesRequest

__all__ = ["ChatAsk", "legacy_call_id", "parse_chat_request", "translate_chat_request"]


@dataclass(frozen=True, slots=True)
class ChatAsk:
    """What a chat client asked for: the canonical request, and what only the chat face acts
    on (`stream_options.include_usage`: end the stream with a usage chunk)."""

    request: ResponsesRequest
    include_usage: bool


def parse_chat_request(data: dict[str, Any]) -> ChatAsk:
    """Check a decoded /v1/chat/completions body and translate it. Raises InvalidRequest
    naming the chat parameter."""
    validate_chat_request(data)
    return translate_chat_request(data)


def legacy_call_id(message_index: int) -> str:
    """The call id given to a legacy `function_call` (which has none) of the assistant message
    at `message_index`. Derived from its place, not random: the same history gives the same
    items each turn, so what an upstream cached for the earlier turn still matches."""
    return f"call_legacy_{message_index}"


def translate_chat_request(data: dict[str, Any]) -> ChatAsk:
    """A body that passed `validate_chat_request` -> the canonical request. Never raises for
    such a body (its shapes are not checked again)."""
    stream_options = data.get("stream_options") or {}
    max_tokens = data.get("max_completion_tokens")  # the newer name wins
    if max_tokens is None:
        max_tokens = data.get("max_tokens")
    user = data.get("user")
    if user is None:
        user = data.get("safety_identifier")  # the same meaning, under its newer name
    extra = {name: data[name] for name in CHAT_SAMPLING_EXTRAS if data.get(name) is not None}
    extra.update((name, value) for name, value in data.items() if name not in KNOWN_CHAT_FIELDS)
    effort = data.get("reasoning_effort")
    request = ResponsesRequest(
        model=data["model"],
        input=_input_items(data["messages"]),
        tools=_tools(data.get("tools"), data.get("functions")),
        tool_choice=_tool_choice(data.get("tool_choice"), data.get("function_call")),
        parallel_tool_calls=data.get("parallel_tool_calls"),
        stream=bool(data.get("stream")),
        reasoning={"effort": effort} if effort is not None else None,
        text=_text(data.get("response_format"), data.get("verbosity")),
        max_output_tokens=max_tokens,
        temperature=data.get("temperature"),
        top_p=data.get("top_p"),
        store=data.get("store"),  # false or absent: validation refused true
        metadata=data.get("metadata"),
        prompt_cache_key=data.get("prompt_cache_key"),
        service_tier=data.get("service_tier"),
        user=user,
        stop=stop_sequences(data.get("stop")),
        seed=data.get("seed"),
        extra=extra,
    )
    return ChatAsk(request, bool(stream_options.get("include_usage")))


# -- messages


def _input_items(messages: list[dict[str, Any]]) -> list[Item]:
    items: list[Item] = []
    call_kinds: dict[str, str] = {}  # call id -> the item type of its output
    legacy_calls: dict[str, list[str]] = {}  # function name -> unanswered legacy call ids
    for index, message in enumerate(messages):
        # A message's `name` (a participant's name in a multi-party chat) is dropped: canonical
        # messages have no place for it, and no backend could show it to a model.
        role = message["role"]
        if role in ("user", "system", "developer"):
            items.append({"type": "message", "role": role, "content": _input_content(message["content"])})
        elif role == "assistant":
            _assistant_items(message, index, items, call_kinds, legacy_calls)
        elif role == "tool":
            # An id that answers no earlier call is carried all the same: the upstream decides.
            call_id = message["tool_call_id"]
            items.append(
                {
                    "type": call_kinds.get(call_id, "function_call_output"),
                    "call_id": call_id,
                    "output": _tool_output(message["content"]),
                }
            )
        else:  # function: the legacy tool output, which names its function instead of a call
            pending = legacy_calls.get(message["name"])
            call_id = pending.pop() if pending else legacy_call_id(index)
            items.append(
                {"type": "function_call_output", "call_id": call_id, "output": message.get("content") or ""}
            )
    return items


def _input_content(content: str | list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """User, system and developer content: a string stays a string; parts become input parts."""
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for part in content:
        if part["type"] == "text":
            parts.append({"type": "input_text", "text": part["text"]})
        else:  # image_url: the only other kind validation lets through
            image = part["image_url"]
            parts.append(
                {"type": "input_image", "image_url": image["url"], "detail": image.get("detail") or "auto"}
            )
    return parts


def _tool_output(content: str | list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    return [{"type": "input_text", "text": part["text"]} for part in content]


def _assistant_items(
    message: dict[str, Any],
    index: int,
    items: list[Item],
    call_kinds: dict[str, str],
    legacy_calls: dict[str, list[str]],
) -> None:
    # DeepSeek-style reasoning echoed back by the client; `reasoning` is OpenRouter's name.
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if reasoning:
        items.append({"type": "reasoning", "summary": [{"type": "summary_text", "text": reasoning}]})
    calls = message.get("tool_calls") or ()
    legacy = message.get("function_call")
    parts = _assistant_parts(message.get("content"), message.get("refusal"))
    # A message beside calls only when it says something (clients send "" with their calls).
    if not (calls or legacy) or any(part.get("text") or part.get("refusal") for part in parts):
        items.append(
            {
                "type": "message",
                "role": "assistant",
                "content": parts or [{"type": "output_text", "text": ""}],
            }
        )
    for call in calls:
        call_id = call["id"]
        if call.get("type") == "custom":
            custom = call["custom"]
            items.append(
                {
                    "type": "custom_tool_call",
                    "call_id": call_id,
                    "name": custom["name"],
                    "input": custom["input"],
                }
            )
            call_kinds[call_id] = "custom_tool_call_output"
        else:
            function = call["function"]
            items.append(
                {
                    "type": "function_call",
                    "call_id": call_id,
                    "name": function["name"],
                    "arguments": _arguments(function["arguments"]),
                }
            )
            call_kinds[call_id] = "function_call_output"
    if legacy is not None:
        call_id = legacy_call_id(index)
        items.append(
            {
                "type": "function_call",
                "call_id": call_id,
                "name": legacy["name"],
                "arguments": _arguments(legacy["arguments"]),
            }
        )
        legacy_calls.setdefault(legacy["name"], []).append(call_id)


def _assistant_parts(content: Any, refusal: str | None) -> list[dict[str, Any]]:
    """Assistant content as output parts: text as `output_text`, a refusal (a part, or the
    message's own `refusal`) as the Responses `refusal` part of the same meaning."""
    parts: list[dict[str, Any]] = []
    if isinstance(content, str):
        parts.append({"type": "output_text", "text": content})
    elif content is not None:
        for part in content:
            if part["type"] == "text":
                parts.append({"type": "output_text", "text": part["text"]})
            else:
                parts.append({"type": "refusal", "refusal": part["refusal"]})
    if refusal:
        parts.append({"type": "refusal", "refusal": refusal})
    return parts


def _arguments(arguments: str | dict[str, Any]) -> str:
    """Canonical arguments are a JSON string; a few clients send the object itself."""
    return arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()


# -- tools


def _tools(
    tools: list[dict[str, Any]] | None, functions: list[dict[str, Any]] | None
) -> list[dict[str, Any]]:
    """Chat tools, then legacy `functions`, as canonical tools in the client's order."""
    result: list[dict[str, Any]] = []
    for tool in tools or ():
        if tool["type"] == "function":
            result.append(_function_tool(tool["function"]))
        else:
            result.append(_custom_tool(tool["custom"]))
    result.extend(_function_tool(function) for function in functions or ())
    return result


def _function_tool(function: dict[str, Any]) -> dict[str, Any]:
    tool: dict[str, Any] = {"type": "function", "name": function["name"]}
    for name in ("description", "parameters", "strict"):
        if function.get(name) is not None:
            tool[name] = function[name]
    return tool


def _custom_tool(custom: dict[str, Any]) -> dict[str, Any]:
    tool: dict[str, Any] = {"type": "custom", "name": custom["name"]}
    if custom.get("description") is not None:
        tool["description"] = custom["description"]
    fmt = custom.get("format")
    if fmt is not None:
        if fmt["type"] == "grammar":
            grammar = fmt["grammar"]
            tool["format"] = {
                "type": "grammar",
                "syntax": grammar["syntax"],
                "definition": grammar["definition"],
            }
        else:
            tool["format"] = {"type": "text"}
    return tool


def _tool_choice(choice: Any, legacy: Any) -> Any:
    """`tool_choice` in canonical form; the legacy `function_call` when it is absent."""
    if choice is None:
        if legacy is None:
            return "auto"
        return legacy if isinstance(legacy, str) else {"type": "function", "name": legacy["name"]}
    if isinstance(choice, str):
        return choice
    if choice["type"] == "allowed_tools":
        allowed = choice["allowed_tools"]
        return {
            "type": "allowed_tools",
            "mode": allowed["mode"],
            "tools": [_named_tool(tool) for tool in allowed["tools"]],
        }
    return _named_tool(choice)


def _named_tool(tool: dict[str, Any]) -> dict[str, str]:
    """`{"type":"function","function":{"name"}}` -> `{"type":"function","name"}` (custom alike)."""
    kind = tool["type"]
    return {"type": kind, "name": tool[kind]["name"]}


def _text(response_format: dict[str, Any] | None, verbosity: str | None) -> dict[str, Any] | None:
    text: dict[str, Any] = {}
    if response_format is not None:
        kind = response_format["type"]
        if kind == "json_schema":
            schema = response_format["json_schema"]
            fmt: dict[str, Any] = {"type": "json_schema", "name": schema["name"]}
            for name in ("schema", "strict", "description"):
                if schema.get(name) is not None:
                    fmt[name] = schema[name]
            text["format"] = fmt
        else:
            text["format"] = {"type": kind}
    if verbosity is not None:
        text["verbosity"] = verbosity
    return text or None
