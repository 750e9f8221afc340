"""Responses request -> Chat Completions request. Pure: no I/O, no clock."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from codexgate.translate.cuts import cut_ids, is_cut
from codexgate.translate.dialect import ChatDialect
from codexgate.translate.items import (
    ADDITIONAL_TOOLS,
    HOSTED_CALL_KINDS,
    agent_message_text,
    hosted_call_note,
    local_shell_arguments,
    readable_text,
    refuse_unreadable,
    tool_search_arguments,
    tool_search_output_text,
    unknown_item_note,
)
from codexgate.translate.reasoning import decode_reasoning
from codexgate.translate.sampling import family_sampling, for_server
from codexgate.translate.tools import (
    CUSTOM_INPUT_PARAM,
    LOCAL_SHELL_NAME,
    TOOL_SEARCH_NAME,
    ToolMap,
    flat_name,
    translate_tool_choice,
    translate_tools,
    unavailable_notice,
)
from codexgate.wire.responses import Item, ResponsesRequest

Message = dict[str, Any]

# Later developer messages, in "merge" mode, are sent as user messages marked as such.
LATE_DEVELOPER_PREFIX = "[Developer instructions]\n"
MISSING_OUTPUT = "No output was recorded for this tool call."


@dataclass(slots=True)
class ChatRequest:
    body: dict[str, Any]
    tool_map: ToolMap
    dropped_items: list[str] = field(default_factory=list)


def _text_of_parts(parts: list[Any]) -> tuple[str, list[dict[str, Any]]]:
    """Text of a content array, and its image parts in chat form."""
    texts: list[str] = []
    images: list[dict[str, Any]] = []
    for part in parts:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind in ("input_text", "output_text", "text", "summary_text", "reasoning_text"):
            text = part.get("text")
            if isinstance(text, str):
                texts.append(text)
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            texts.append(part["refusal"])
        elif kind == "input_image":
            url = part.get("image_url")
            if isinstance(url, dict):
                url = url.get("url")
            if isinstance(url, str) and url:
                image: dict[str, Any] = {"url": url}
                if part.get("detail") in ("low", "high", "auto"):
                    image["detail"] = part["detail"]
                images.append({"type": "image_url", "image_url": image})
        elif kind == "input_file":
            texts.append(f"[file {part.get('filename') or part.get('file_id') or ''} omitted]")
    return "\n".join(texts), images


def _plain_text(content: Any) -> str:
    """A message's text: content is a string or an array of parts (validated on input)."""
    if isinstance(content, str):
        return content
    return _text_of_parts(content if isinstance(content, list) else [])[0]


def _user_content(content: Any) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    text, images = _text_of_parts(content)
    if not images:
        return text
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    return parts + images


def _output_text(output: Any) -> tuple[str, list[dict[str, Any]]]:
    if isinstance(output, str):
        return output, []
    return _text_of_parts(output)


class _Builder:
    """Walks the items once, grouping calls into assistant messages and keeping each output
    right after its call, as chat APIs require."""

    def __init__(self, dialect: ChatDialect, tool_map: ToolMap) -> None:
        self.dialect = dialect
        self.tool_map = tool_map
        self.messages: list[Message] = []
        self.system_parts: list[str] = []
        self.seen_conversation = False
        self.pending_reasoning: list[str] = []
        self.open_assistant: Message | None = None  # may still receive tool calls
        self.open_pos = 0  # its index in messages
        self.pending_images: list[dict[str, Any]] = []  # from tool outputs; sent after them
        self.pending_notes: list[str] = []  # hosted tool calls, for the next assistant turn
        self.dropped: list[str] = []

    # -- messages
    def system_text(self, text: str) -> None:
        mode = self.dialect.developer_role
        if mode == "merge" and not self.seen_conversation:
            self.system_parts.append(text)
        elif mode == "merge":
            self.push({"role": "user", "content": LATE_DEVELOPER_PREFIX + text})
        else:
            self.push({"role": "system", "content": text})

    def push(self, message: Message) -> None:
        if message["role"] != "assistant":
            self.flush_notes()
        self.close_tool_turn()
        self.open_assistant = None
        self.seen_conversation = True
        self.messages.append(message)

    def message(self, item: Item) -> None:
        role = item.get("role")
        content = item.get("content")
        if role in ("developer", "system"):
            if self.dialect.developer_role == "developer" and role == "developer":
                self.push({"role": "developer", "content": _plain_text(content)})
                return
            self.system_text(_plain_text(content))
        elif role == "assistant":
            message: Message = {"role": "assistant", "content": self.take_notes(_plain_text(content))}
            self.push(message)
            self.attach_reasoning(message)
            self.open_assistant, self.open_pos = message, len(self.messages) - 1
        else:
            self.push({"role": "user", "content": _user_content(content)})

    # -- reasoning
    def reasoning(self, item: Item) -> None:
        text = decode_reasoning(item.get("encrypted_content"))
        if text is None:  # not ours: fall back to what the client shows
            text, _ = _text_of_parts(item.get("content") or item.get("summary") or [])
        if text:
            self.pending_reasoning.append(text)

    def attach_reasoning(self, message: Message) -> None:
        field_name = self.dialect.reasoning_replay
        if self.pending_reasoning and field_name != "none":
            message[field_name] = "\n".join(self.pending_reasoning)
        self.pending_reasoning = []

    # -- tool calls
    def call(self, call_id: str, chat_name: str, arguments: str) -> None:
        message = self.open_assistant
        if message is None or self.has_outputs_after(message):
            message = {"role": "assistant", "content": self.take_notes(None)}
            self.push(message)
            self.attach_reasoning(message)
            self.open_assistant, self.open_pos = message, len(self.messages) - 1
        else:
            if self.pending_reasoning:
                self.attach_reasoning(message)
            if self.pending_notes:
                message["content"] = self.take_notes(message.get("content"))
        message.setdefault("tool_calls", []).append(
            {"id": call_id, "type": "function", "function": {"name": chat_name, "arguments": arguments}}
        )

    def has_outputs_after(self, message: Message) -> bool:
        return self.messages[-1] is not message

    # -- hosted tools' calls: notes in the assistant turn they belong to
    def note(self, text: str) -> None:
        self.pending_notes.append(text)

    def take_notes(self, text: str | None) -> str | None:
        if not self.pending_notes:
            return text
        notes = "\n".join(self.pending_notes)
        self.pending_notes = []
        return f"{notes}\n{text}" if text else notes

    def flush_notes(self) -> None:
        """Notes with no assistant message after them: one of their own."""
        if self.pending_notes:
            self.push({"role": "assistant", "content": self.take_notes(None)})

    def output(self, call_id: str, output: Any) -> None:
        self.flush_notes()
        text, images = _output_text(output)
        if not self.call_is_open(call_id):
            # An output whose call is not in the history (dropped or never sent): chat APIs
            # reject an orphan tool message, so keep the content as a user message.
            self.push({"role": "user", "content": f"Tool output for call {call_id}:\n{text}"})
            return
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": text})
        self.pending_images.extend(images)

    def call_is_open(self, call_id: str) -> bool:
        message = self.open_assistant
        if message is None:
            return False
        return any(call["id"] == call_id for call in message.get("tool_calls", ()))

    def close_tool_turn(self) -> None:
        """Every tool call needs an answer before the conversation goes on."""
        message = self.open_assistant
        if message is not None and message.get("tool_calls"):
            tail = self.messages[self.open_pos + 1 :]
            answered = {m.get("tool_call_id") for m in tail if m["role"] == "tool"}
            for call in message["tool_calls"]:
                if call["id"] not in answered:
                    self.messages.append(
                        {"role": "tool", "tool_call_id": call["id"], "content": MISSING_OUTPUT}
                    )
        if self.pending_images:
            self.messages.append({"role": "user", "content": self.pending_images})
            self.pending_images = []

    def finish(self, notice: str | None = None) -> list[Message]:
        self.flush_notes()
        self.close_tool_turn()
        if self.pending_reasoning:
            # Reasoning with no answer after it (an interrupted turn): nothing to attach it to.
            self.pending_reasoning = []
        if self.system_parts:
            self.messages.insert(0, {"role": "system", "content": "\n\n".join(self.system_parts)})
        if notice:
            first = self.messages[0] if self.messages else None
            leading = first is not None and first["role"] in ("system", "developer")
            if first is not None and leading and isinstance(first["content"], str):
                first["content"] += "\n\n" + notice
            else:
                self.messages.insert(0, {"role": "system", "content": notice})
        return self.messages


def tools_of(req: ResponsesRequest) -> list[dict[str, Any]]:
    """The request's tools: `tools`, then those of every `additional_tools` input item (Codex's
    Responses Lite sends its tools that way and no `tools` at all)."""
    tools = list(req.tools)
    for item in req.input:
        if item.get("type") == ADDITIONAL_TOOLS:
            tools.extend(item.get("tools") or ())
    return tools


def translate_input(
    items: list[Item],
    instructions: str | None,
    dialect: ChatDialect,
    tool_map: ToolMap,
    notice: str | None = None,
) -> tuple[list[Message], list[str]]:
    """Raises InvalidRequest for an item the upstream could not read (see translate/items.py)."""
    builder = _Builder(dialect, tool_map)
    if instructions:
        builder.system_text(instructions)
    cut = cut_ids(items)  # parts of answers a failure cut short, and their markers: left out
    for index, item in enumerate(items):
        if is_cut(item, cut):
            continue
        kind = item.get("type")
        if kind is None and "role" in item:
            kind = "message"
        if kind == "message":
            builder.message(item)
        elif kind == "function_call":
            builder.call(item["call_id"], flat_name(item.get("namespace"), item["name"]), item["arguments"])
        elif kind == "custom_tool_call":
            arguments = orjson.dumps({CUSTOM_INPUT_PARAM: item["input"]}).decode()
            builder.call(item["call_id"], flat_name(item.get("namespace"), item["name"]), arguments)
        elif kind in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
            builder.output(item["call_id"], item["output"])
        elif kind == "reasoning":
            builder.reasoning(item)
        elif kind == ADDITIONAL_TOOLS:
            continue  # advertised as tools (tools_of)
        elif kind == "agent_message":
            builder.push({"role": "user", "content": agent_message_text(item, f"input[{index}]")})
        elif kind == "tool_search_call":
            builder.call(item["call_id"], TOOL_SEARCH_NAME, tool_search_arguments(item))
        elif kind == "tool_search_output":
            builder.output(item["call_id"], tool_search_output_text(item))
        elif kind == "local_shell_call":
            builder.call(item["call_id"], LOCAL_SHELL_NAME, local_shell_arguments(item))
        elif kind in HOSTED_CALL_KINDS:
            builder.note(hosted_call_note(item))
        else:
            text = readable_text(item)
            if not text:
                refuse_unreadable(item, f"input[{index}]")
            builder.push({"role": "user", "content": unknown_item_note(item, text)})
    return builder.finish(notice), builder.dropped


def to_chat_request(req: ResponsesRequest, dialect: ChatDialect, upstream_model: str) -> ChatRequest:
    """Build the upstream body. The result always streams and asks for usage when allowed.
    Values layer up: the model family's published sampling (`default_sampling = "auto"`), then
    the dialect's `extra_body` (upstream and model settings), then the client's own values."""
    chat_tools, tool_map = translate_tools(tools_of(req))
    notice = unavailable_notice(tool_map.unavailable)
    messages, dropped = translate_input(req.input, req.instructions, dialect, tool_map, notice)

    body: dict[str, Any] = {}
    if dialect.default_sampling == "auto":
        family = family_sampling(upstream_model)
        if family is not None:
            body.update(for_server(family, None).values)
    body.update(dialect.extra_body)
    body["model"] = upstream_model
    body["messages"] = messages
    body["stream"] = True
    if dialect.include_usage:
        body["stream_options"] = {"include_usage": True}
    if chat_tools:
        body["tools"] = chat_tools
        body["tool_choice"] = translate_tool_choice(req.tool_choice, tool_map)
        if req.parallel_tool_calls is not None:
            body["parallel_tool_calls"] = req.parallel_tool_calls
    if req.max_output_tokens is not None:
        body[dialect.max_tokens_field] = req.max_output_tokens
    if req.temperature is not None:
        body["temperature"] = req.temperature
    if req.top_p is not None:
        body["top_p"] = req.top_p
    if req.user is not None:
        body["user"] = req.user
    effort = (req.reasoning or {}).get("effort")
    if dialect.send_reasoning_effort and isinstance(effort, str):
        body["reasoning_effort"] = effort
    response_format = _response_format((req.text or {}).get("format"))
    if response_format is not None:
        body["response_format"] = response_format
    return ChatRequest(body=body, tool_map=tool_map, dropped_items=dropped)


def _response_format(fmt: Any) -> dict[str, Any] | None:
    if not isinstance(fmt, dict):
        return None
    kind = fmt.get("type")
    if kind == "json_schema":
        schema: dict[str, Any] = {"name": fmt.get("name") or "output", "schema": fmt.get("schema") or {}}
        if fmt.get("strict") is not None:
            schema["strict"] = bool(fmt["strict"])
        if fmt.get("description"):
            schema["description"] = fmt["description"]
        return {"type": "json_schema", "json_schema": schema}
    if kind == "json_object":
        return {"type": "json_object"}
    return None
