"""Responses input items -> Chat Completions messages. Pure: no I/O, no clock.

Items are walked once (`_Builder`): calls are grouped into assistant messages, each output is
kept right after its call, as chat APIs require, and reasoning rides on the next assistant
message. Item kinds with no chat twin are carried as notes or refused (translate/chat_upstream/items.py).
A `History` keeps the walk's state so the next turn of a conversation only walks what is new.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

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
    tool_search_arguments,
    tool_search_output_text,
    unknown_item_note,
)
from codexgate.translate.cuts import cut_ids, is_cut
from codexgate.translate.dialect import ChatDialect
from codexgate.translate.files import FileTexts
from codexgate.translate.parts import chat_content, plain_texts, text_of_parts
from codexgate.translate.reasoning import decode_reasoning
from codexgate.wire.responses import Item

__all__ = ["LATE_DEVELOPER_PREFIX", "MISSING_OUTPUT", "History", "Message", "Translated", "translate_input"]

Message = dict[str, Any]

# Later developer messages, in "merge" mode, are sent as user messages marked as such.
LATE_DEVELOPER_PREFIX = "[Developer instructions]\n"
MISSING_OUTPUT = "No output was recorded for this tool call."


def _plain_text(content: Any, param: Callable[[], str], files: FileTexts | None) -> str:
    """A message's text: content is a string or an array of parts (validated on input).
    `param()` names the content, for errors; `files`: its files read ahead (None: read here).
    Raises InvalidRequest for a part with no text form (translate/parts.py)."""
    if isinstance(content, str):
        return content
    text = plain_texts(content)
    return text if text is not None else chat_content(content, param(), images=False, files=files)[0]


def _user_content(
    content: Any, param: Callable[[], str], files: FileTexts | None
) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    text = plain_texts(content)
    if text is not None:
        return text
    text, images = chat_content(content, param(), images=True, files=files)
    if not images:
        return text
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    return parts + images


def _output_text(
    output: Any, param: Callable[[], str], files: FileTexts | None
) -> tuple[str, list[dict[str, Any]]]:
    if isinstance(output, str):
        return output, []
    text = plain_texts(output)
    return (text, []) if text is not None else chat_content(output, param(), images=True, files=files)


class _Builder:
    """Walks the items once, grouping calls into assistant messages and keeping each output
    right after its call, as chat APIs require."""

    def __init__(self, dialect: ChatDialect) -> None:
        self.dialect = dialect
        self.messages: list[Message] = []
        self.system_parts: list[str] = []
        self.seen_conversation = False
        self.pending_reasoning: list[str] = []
        self.open_assistant: Message | None = None  # may still receive tool calls
        self.open_pos = 0  # its index in messages
        self.pending_images: list[dict[str, Any]] = []  # from tool outputs; sent after them
        self.pending_notes: list[str] = []  # hosted tool calls, for the next assistant turn
        self.dropped: list[str] = []

    def copy(self) -> _Builder:
        """An independent builder in the same state. A message is never changed once pushed,
        except the open assistant message (calls, notes and reasoning join it): the others
        are shared, the open one is copied."""
        other = _Builder(self.dialect)
        other.messages = list(self.messages)
        other.system_parts = list(self.system_parts)
        other.seen_conversation = self.seen_conversation
        other.pending_reasoning = list(self.pending_reasoning)
        other.pending_images = list(self.pending_images)
        other.pending_notes = list(self.pending_notes)
        other.dropped = list(self.dropped)
        other.open_pos = self.open_pos
        if self.open_assistant is not None:
            open_message = dict(self.open_assistant)
            if "tool_calls" in open_message:
                open_message["tool_calls"] = list(open_message["tool_calls"])
            other.messages[self.open_pos] = other.open_assistant = open_message
        return other

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

    def message(self, item: Item, index: int, files: FileTexts | None = None) -> None:
        """`index`: where the item is in the request's input, for errors; `files`: the
        request's files read ahead (None: read here)."""
        role = item.get("role")
        content = item.get("content")

        def content_param() -> str:
            return f"input[{index}].content"

        if role in ("developer", "system"):
            if self.dialect.developer_role == "developer" and role == "developer":
                self.push({"role": "developer", "content": _plain_text(content, content_param, files)})
                return
            self.system_text(_plain_text(content, content_param, files))
        elif role == "assistant":
            text = _plain_text(content, content_param, files)
            message: Message = {"role": "assistant", "content": self.take_notes(text)}
            self.push(message)
            self.attach_reasoning(message)
            self.open_assistant, self.open_pos = message, len(self.messages) - 1
        else:
            self.push({"role": "user", "content": _user_content(content, content_param, files)})

    # -- reasoning
    def reasoning(self, item: Item) -> None:
        text = decode_reasoning(item.get("encrypted_content"))
        if text is None:  # not ours: fall back to what the client shows
            text = text_of_parts(item.get("content") or item.get("summary"))
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

    def output(
        self, call_id: str, output: Any, index: int | None = None, files: FileTexts | None = None
    ) -> None:
        """`index`: where the output is in the request's input, for errors; `files` as for
        `message`."""
        self.flush_notes()
        where = (lambda: "") if index is None else (lambda: f"input[{index}].output")
        text, images = _output_text(output, where, files)
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
                # a new dict: the first message may be shared with a Checkpoint
                self.messages[0] = {**first, "content": first["content"] + "\n\n" + notice}
            else:
                self.messages.insert(0, {"role": "system", "content": notice})
        return self.messages


@dataclass(frozen=True, slots=True)
class History:
    """A request's input as translated, kept for the next request of the same conversation.
    Codex re-sends the whole history every turn: a request whose input starts with exactly
    these items, after the same instructions, resumes from `builder` and translates only the
    items that follow. Nothing else is trusted: the items are compared, not their ids."""

    items: list[Item]
    instructions: str | None
    builder: _Builder  # the state after `items`, before finish(); copied before use
    ids: frozenset[str]  # the items' ids
    cut: frozenset[str]  # the ids that cut markers among them name
    # The JSON of the messages `builder` holds, by id(message), once the request was encoded
    # (translate/chat_upstream/request.py): the next request sends them again. Only messages `builder`
    # holds, which are therefore alive (their ids unique) and never change again.
    encoded: dict[int, bytes] = field(default_factory=dict)

    def resume(
        self, items: list[Item], instructions: str | None, known: tuple[list[Item], int] | None = None
    ) -> tuple[_Builder, int, set[str]] | None:
        """A builder to continue from, where to continue, and the cut ids that apply; None when
        the input does not start with these items, or when a cut marker after them names one
        of them (that changes how they translate: then the whole input is read again).
        `known`: (a list, n) when `items` is known to start with that list's first n items."""
        n = len(self.items)
        if instructions != self.instructions or len(items) < n:
            return None
        compared = known is not None and known[0] is self.items and known[1] >= n
        if not compared and items[:n] != self.items:
            return None
        cut = cut_ids(items[n:])
        if not cut.isdisjoint(self.ids):
            return None
        return self.builder.copy(), n, cut | self.cut


@dataclass(frozen=True, slots=True)
class Translated:
    messages: list[Message]
    dropped: list[str]  # item types left out
    history: History | None  # for the next request of the conversation (None: not kept)


def translate_input(
    items: list[Item],
    instructions: str | None,
    dialect: ChatDialect,
    notice: str | None = None,
    earlier: History | None = None,
    known: tuple[list[Item], int] | None = None,
    *,
    keep: bool = True,
    files: FileTexts | None = None,
) -> Translated:
    """The chat messages for a request's instructions and input. `earlier`: the History of an
    earlier request of the same conversation, translated with the same dialect; the result is
    the same with or without it; `known` says what is known of the items (History.resume).
    `keep`: make the History (False: the caller will not remember it). `files`: the files
    read ahead (translate/files.py FileTexts; None: read here).
    Raises InvalidRequest for an item the upstream could not read (see translate/chat_upstream/items.py)."""
    resumed = earlier.resume(items, instructions, known) if earlier is not None else None
    if resumed is not None and earlier is not None:
        builder, start, cut = resumed
        ids = earlier.ids | _item_ids(items[start:])
    else:
        builder, start = _Builder(dialect), 0
        if instructions:
            builder.system_text(instructions)
        cut = cut_ids(items)  # parts of answers a failure cut short, and their markers: left out
        ids = _item_ids(items) if keep else frozenset()
    for index in range(start, len(items)):
        item = items[index]
        if is_cut(item, cut):
            continue
        _translate_item(builder, item, index, files)
    if not keep:
        return Translated(builder.finish(notice), builder.dropped, None)
    history = History(items, instructions, builder.copy(), ids, frozenset(cut))
    if resumed is not None and earlier is not None:
        # Every message the earlier History encoded is held by this one too: resuming
        # copied its builder, and a builder never drops a message.
        history.encoded.update(earlier.encoded)
    return Translated(builder.finish(notice), builder.dropped, history)


def _translate_item(builder: _Builder, item: Item, index: int, files: FileTexts | None) -> None:
    kind = item.get("type")
    if kind is None and "role" in item:
        kind = "message"
    if kind == "message":
        builder.message(item, index, files)
    elif kind == "function_call":
        builder.call(item["call_id"], flat_name(item.get("namespace"), item["name"]), item["arguments"])
    elif kind == "custom_tool_call":
        arguments = orjson.dumps({CUSTOM_INPUT_PARAM: item["input"]}).decode()
        builder.call(item["call_id"], flat_name(item.get("namespace"), item["name"]), arguments)
    elif kind in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
        builder.output(item["call_id"], item["output"], index, files)
    elif kind == "reasoning":
        builder.reasoning(item)
    elif kind == ADDITIONAL_TOOLS:
        return  # advertised as tools (tools_of)
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
        builder.push({"role": "user", "content": unknown_item_note(item, f"input[{index}]")})


def _item_ids(items: list[Item]) -> frozenset[str]:
    return frozenset(i for item in items if isinstance(i := item.get("id"), str))
