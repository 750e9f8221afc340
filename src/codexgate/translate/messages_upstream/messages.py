"""Responses input items -> an Anthropic Messages `system` and `messages`. Pure: no I/O.

Anthropic's conversation is strict where Responses items are loose, so the walk repairs as it
goes (each repair is what the chat path does, translate/chat_upstream/messages.py):

- Turns alternate, user then assistant: consecutive items of one side join one message (a
  reasoning item, the text and the calls of one answer are one assistant message), and a
  conversation that starts with the assistant gets a short user turn before it.
- Every `tool_use` is answered at the start of the next user message (`tool_result` blocks
  first, then any text); a call with no output gets the chat path's MISSING_OUTPUT, an output
  with no call in the message before it becomes user text naming the call.
- Leading system and developer messages join `system`; later ones are user text marked as
  developer instructions, so that the cached prefix (system first) stays the same as the
  conversation grows.
- Reasoning: a thinking block this gateway kept (translate/reasoning.py `decode_thinking`: a
  `thinking` block with its signature, or a `redacted_thinking` block) goes back as that exact
  block at its place in the assistant message; any other reasoning (another upstream's) is
  left out, since Anthropic refuses a thinking block it did not sign.
- Tools are called by the flat names a model is shown (translate/catalogue.py), a custom tool
  with its raw input as the one `input` string; client-run kinds (tool_search, local_shell),
  hosted calls, agent messages and unknown items are carried as on the chat path
  (translate/chat_upstream/items.py), or refused there.
- Parts: text; images as `image` blocks (base64 from a data: URL, or a URL); PDFs as
  `document` blocks; text files as text (translate/files.py). What cannot be carried is a 400
  naming the part (translate/parts.py).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from codexgate.errors import InvalidRequest
from codexgate.translate.catalogue import (
    ADDITIONAL_TOOLS,
    CUSTOM_INPUT_PARAM,
    LOCAL_SHELL_NAME,
    TOOL_SEARCH_NAME,
    flat_name,
)
from codexgate.translate.chat_upstream.items import (
    HOSTED_CALL_KINDS,
    agent_message_text,
    hosted_call_note,
    local_shell_arguments,
    refuse_unreadable,
    tool_search_arguments,
    tool_search_output_text,
    unknown_item_note,
)
from codexgate.translate.chat_upstream.messages import LATE_DEVELOPER_PREFIX, MISSING_OUTPUT
from codexgate.translate.cuts import cut_ids, is_cut
from codexgate.translate.files import file_text, pdf_bytes
from codexgate.translate.parts import chat_content, checked_kind, image_url
from codexgate.translate.reasoning import decode_thinking
from codexgate.wire.responses import Item

__all__ = ["CONVERSATION_START", "Block", "Conversation", "Message", "is_thinking", "translate_items"]

Block = dict[str, Any]
Message = dict[str, Any]  # {"role": "user" | "assistant", "content": [Block, ...]}

# The user turn put before a conversation that starts with the assistant (Anthropic's first
# message is the user's).
CONVERSATION_START = "[The conversation so far follows.]"
_THINKING = frozenset(("thinking", "redacted_thinking"))
_TEXT_FIELD = {"refusal": "refusal", "encrypted_content": "encrypted_content"}
# What Anthropic takes as an image (others are refused with the part named).
_IMAGE_TYPES = frozenset(("image/jpeg", "image/png", "image/gif", "image/webp"))
_OUTPUT_KINDS = frozenset(("function_call_output", "custom_tool_call_output", "local_shell_call_output"))
_TITLE_CHARS = 200
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(slots=True)
class Conversation:
    system: list[str]  # the system texts, in order (instructions first)
    messages: list[Message]
    dropped: list[str] = field(default_factory=list)  # kinds of input items left out


def translate_items(items: list[Item], instructions: str | None) -> Conversation:
    """The system texts and messages for a request's instructions and input. Raises
    InvalidRequest for an item or part the upstream could not read, naming it."""
    walk = _Walk()
    if instructions:
        walk.system.append(instructions)
    cut = cut_ids(items)  # answers a failure cut short, and their markers: left out
    for index, item in enumerate(items):
        if not is_cut(item, cut):
            walk.item(item, index)
    return Conversation(walk.system, walk.finish(), walk.dropped)


def _text(text: str) -> Block:
    return {"type": "text", "text": text}


class _Walk:
    def __init__(self) -> None:
        self.system: list[str] = []
        self.messages: list[Message] = []
        self.dropped: list[str] = []
        self._answered: set[str] = set()  # tool_use ids given their result

    # -- messages

    def add(self, role: str, block: Block) -> None:
        """`block` at the end of the conversation, in the last message when it is `role`'s."""
        messages = self.messages
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].append(block)
        else:
            messages.append({"role": role, "content": [block]})

    def item(self, item: Item, index: int) -> None:
        kind = item.get("type")
        if kind is None and "role" in item:
            kind = "message"
        if kind == "message":
            self.message(item, index)
        elif kind == "reasoning":
            block = decode_thinking(item.get("encrypted_content"))
            if block is None:
                self.dropped.append("reasoning")
            else:
                self.add("assistant", block)
        elif kind == "function_call":
            name = flat_name(item.get("namespace"), item["name"])
            self.call(item["call_id"], name, _call_input(item["arguments"]))
        elif kind == "custom_tool_call":
            name = flat_name(item.get("namespace"), item["name"])
            self.call(item["call_id"], name, {CUSTOM_INPUT_PARAM: item["input"]})
        elif kind in _OUTPUT_KINDS:
            self.result(item["call_id"], item["output"], f"input[{index}].output")
        elif kind == "tool_search_call":
            self.call(item["call_id"], TOOL_SEARCH_NAME, _call_input(tool_search_arguments(item)))
        elif kind == "tool_search_output":
            self.result(item["call_id"], tool_search_output_text(item), f"input[{index}]")
        elif kind == "local_shell_call":
            self.call(item["call_id"], LOCAL_SHELL_NAME, _call_input(local_shell_arguments(item)))
        elif kind == ADDITIONAL_TOOLS:
            return  # its tools are the request's tools (request_tools)
        elif kind in HOSTED_CALL_KINDS:
            self.add("assistant", _text(hosted_call_note(item)))
        elif kind == "agent_message":
            self.add("user", _text(agent_message_text(item, f"input[{index}]")))
        elif kind in ("compaction", "compaction_summary", "compaction_trigger"):
            refuse_unreadable(item, f"input[{index}]")
        else:
            self.add("user", _text(unknown_item_note(item, f"input[{index}]")))

    def message(self, item: Item, index: int) -> None:
        role, content = item.get("role"), item.get("content")
        param = f"input[{index}].content"
        if role in ("system", "developer"):
            text = (
                content if isinstance(content, str) else chat_content(content or [], param, images=False)[0]
            )
            if not self.messages:
                if text:
                    self.system.append(text)
            elif text:
                self.add("user", _text(LATE_DEVELOPER_PREFIX + text))
            return
        side = "assistant" if role == "assistant" else "user"
        for block in _blocks(content, param, images=side == "user"):
            self.add(side, block)

    # -- calls and their results

    def call(self, call_id: str, name: str, arguments: dict[str, Any]) -> None:
        self.add("assistant", {"type": "tool_use", "id": _id(call_id), "name": name, "input": arguments})

    def result(self, call_id: str, output: Any, param: str) -> None:
        """A call's output: a `tool_result` at the start of the user message after the call, or
        user text when the message before has no such call (or it was answered already)."""
        tool_use_id = _id(call_id)
        blocks = None if isinstance(output, str) else _blocks(output, param, images=True)
        content: str | list[Block] = output if blocks is None else blocks
        calls = self._open_calls()
        if tool_use_id not in calls or tool_use_id in self._answered:
            text = output if blocks is None else _plain(blocks)
            self.add("user", _text(f"Tool output for call {call_id}:\n{text}"))
            for kept in blocks or ():
                if kept["type"] != "text":
                    self.add("user", kept)  # its images and documents, after its words
            return
        self._answered.add(tool_use_id)
        block: Block = {"type": "tool_result", "tool_use_id": tool_use_id}
        if content:
            block["content"] = content
        messages = self.messages
        if messages[-1]["role"] == "assistant":
            messages.append({"role": "user", "content": [block]})
            return
        blocks = messages[-1]["content"]
        at = next((i for i, b in enumerate(blocks) if b["type"] != "tool_result"), len(blocks))
        blocks.insert(at, block)

    def _open_calls(self) -> set[str]:
        """The tool_use ids of the assistant message the next results answer: the last
        message's, or the one before when the last is the user message of their results."""
        messages = self.messages
        for message in reversed(messages[-2:]):
            if message["role"] == "assistant":
                return {b["id"] for b in message["content"] if b["type"] == "tool_use"}
            if any(b["type"] != "tool_result" for b in message["content"]):
                return set()  # the user said more since: those calls are closed
        return set()

    # -- the end

    def finish(self) -> list[Message]:
        """The messages, every call answered, the user's first."""
        messages = self.messages
        position = 0
        while position < len(messages):
            message = messages[position]
            position += 1
            if message["role"] != "assistant":
                continue
            ids = [b["id"] for b in message["content"] if b["type"] == "tool_use"]
            if not ids:
                continue
            if position == len(messages) or messages[position]["role"] != "user":
                messages.insert(position, {"role": "user", "content": []})
            blocks = messages[position]["content"]
            given = {b["tool_use_id"] for b in blocks if b["type"] == "tool_result"}
            at = next((i for i, b in enumerate(blocks) if b["type"] != "tool_result"), len(blocks))
            missing = [
                {"type": "tool_result", "tool_use_id": tool_use_id, "content": MISSING_OUTPUT}
                for tool_use_id in ids
                if tool_use_id not in given
            ]
            blocks[at:at] = missing
        if messages and messages[0]["role"] != "user":
            messages.insert(0, {"role": "user", "content": [_text(CONVERSATION_START)]})
        return messages


def _call_input(arguments: str) -> dict[str, Any]:
    """A call's arguments as the object a `tool_use` holds. Arguments that are not a JSON
    object (a model's broken call from another upstream) are kept as the one string they are,
    so the model still sees what was called."""
    if not arguments.strip():
        return {}
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        value = None
    return value if isinstance(value, dict) else {"arguments": arguments}


_VALID_ID = re.compile(r"^[a-zA-Z0-9_-]+$")


def _id(call_id: str) -> str:
    """A call id as Anthropic takes it (`^[a-zA-Z0-9_-]+$`), the same for a call and its output."""
    return call_id if _VALID_ID.match(call_id) else flat_name(None, call_id)


def _blocks(content: Any, param: str, *, images: bool) -> list[Block]:
    """A message's (or an output's) content as blocks, empty text left out. Raises
    InvalidRequest naming a part that cannot be carried."""
    if isinstance(content, str):
        return [_text(content)] if content else []
    blocks: list[Block] = []
    for index, part in enumerate(content if isinstance(content, list) else ()):
        part_param = f"{param}[{index}]"
        kind = checked_kind(part, part_param, images=images)
        if kind == "input_image":
            blocks.append(_image(part, part_param))
        elif kind == "input_file":
            blocks.append(_document(part, part_param))
        else:
            text = part[_TEXT_FIELD.get(kind, "text")]
            if text:
                blocks.append(_text(text))
    return blocks


def _plain(blocks: Iterable[Block]) -> str:
    return "\n".join(b["text"] for b in blocks if b.get("type") == "text")


def _image(part: dict[str, Any], param: str) -> Block:
    """An `input_image` part (checked: it has a URL) as an image block."""
    url = image_url(part) or ""
    if url[:5].lower() == "data:":
        header, comma, data = url[5:].partition(",")
        params = [p.strip().lower() for p in header.split(";")]
        media_type = params[0]
        if not comma or params[-1] != "base64":
            raise InvalidRequest(
                f"'{param}.image_url' is a data: URL that is not base64; this upstream takes base64 images.",
                param=f"{param}.image_url",
            )
        if media_type not in _IMAGE_TYPES:
            raise InvalidRequest(
                f"'{param}.image_url' is an image of type '{media_type[:60]}'; this upstream takes JPEG, "
                "PNG, GIF and WebP images.",
                param=f"{param}.image_url",
            )
        return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
    if url[:8].lower() == "https://" or url[:7].lower() == "http://":
        return {"type": "image", "source": {"type": "url", "url": url}}
    raise InvalidRequest(
        f"'{param}.image_url' is neither an http(s) URL nor a data: URL.", param=f"{param}.image_url"
    )


def _document(part: dict[str, Any], param: str) -> Block:
    """An `input_file` part: a PDF as a document block the model reads itself, any other file
    as the text block translate/files.py makes of it."""
    raw = pdf_bytes(part, param)
    if raw is None:
        return _text(file_text(part, param))
    block: Block = {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": base64.b64encode(raw).decode()},
    }
    name = part.get("filename")
    if isinstance(name, str) and name.strip():
        block["title"] = _CONTROL.sub(" ", name).strip()[:_TITLE_CHARS]
    return block


def is_thinking(block: Block) -> bool:
    return block.get("type") in _THINKING
