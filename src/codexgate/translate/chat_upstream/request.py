"""Responses request -> Chat Completions request. Pure: no I/O, no clock.

The input items become messages in translate/chat_upstream/messages.py; this module adds the tools, the
sampling values and the rest of the body, and encodes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import orjson

from codexgate.translate.catalogue import ToolCatalogue, catalogue_of, request_tools, unavailable_notice
from codexgate.translate.chat_upstream.messages import (
    LATE_DEVELOPER_PREFIX,
    MISSING_OUTPUT,
    History,
    Message,
    translate_input,
)
from codexgate.translate.chat_upstream.tools import chat_tool_choice, chat_tools
from codexgate.translate.dialect import ChatDialect
from codexgate.translate.files import FileTexts
from codexgate.translate.open_models.sampling import family_sampling, for_server
from codexgate.wire.chat import CHAT_SAMPLING_EXTRAS  # a chat upstream takes them as they are
from codexgate.wire.recent import SameObject, SameObjects
from codexgate.wire.responses import Item, ResponsesRequest

__all__ = [
    "LATE_DEVELOPER_PREFIX",
    "MISSING_OUTPUT",
    "ChatRequest",
    "Checkpoint",
    "to_chat_request",
    "tools_of",
]


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """What a request leaves for the next request of the same conversation (Codex re-sends
    the same tools and the whole history every turn): its input as translated, and its
    tools as translated."""

    history: History
    tools: list[dict[str, Any]]
    chat_tools: list[dict[str, Any]]
    catalogue: ToolCatalogue


@dataclass(slots=True)
class ChatRequest:
    body: dict[str, Any]
    catalogue: ToolCatalogue
    checkpoint: Checkpoint | None  # for the next request of the same conversation, if kept
    dropped_items: list[str] = field(default_factory=list)
    # `tools` as encoded JSON, when they are a tool list's functions shared by every request
    # with the same tools (a Codex request's ~10 KB of them are then encoded once, not per
    # request; `body` keeps the list itself for whoever reads it).
    tools_json: orjson.Fragment | None = None

    def encode(self) -> bytes:
        """The body as JSON, with `messages` last (`pieces`, joined)."""
        return b"".join(self.pieces())

    def pieces(self) -> list[bytes]:
        """The body as JSON in pieces, in order, which a transport may send as they are (one
        vectored write, rather than a copy of the whole history into one buffer). A message
        encoded for an earlier request of the conversation is not encoded again (a long
        history is most of the body); this request's encodings are kept in its checkpoint for
        the next one."""
        body = self.body
        messages: list[Message] = body["messages"]
        fields = {k: v for k, v in body.items() if k != "messages"}
        if self.tools_json is not None:
            fields["tools"] = self.tools_json
        head = orjson.dumps(fields)
        opening = head[:-1] + (b',"messages":[' if len(head) > 2 else b'"messages":[')
        if not messages:
            return [opening, b"]}"]
        if self.checkpoint is None:  # nothing to keep: the messages in one go
            return [opening[:-1], orjson.dumps(messages), b"}"]
        history = self.checkpoint.history
        known = history.encoded
        ids = list(map(id, messages))
        parts = list(map(known.get, ids))  # C loops: most messages are known
        fresh = [i for i, part in enumerate(parts) if part is None]
        if fresh:
            held = history.builder.messages
            for i in fresh:
                message = messages[i]
                part = parts[i] = orjson.dumps(message)
                if _holds(held, i, message):
                    # A copy of the exact size: orjson's result keeps the buffer it grew
                    # (4 KB or more even for a short message), and these stay for the
                    # conversation's next turn.
                    known[ids[i]] = bytes(memoryview(part))
        # The messages with a comma between each two (slice assignment: a C loop).
        framed = [b","] * (2 * len(parts) + 1)
        framed[1::2] = cast(list[bytes], parts)  # no None is left
        framed[0], framed[-1] = opening, b"]}"
        return framed


# How far `_Builder.finish` may move the builder's own messages: it puts one message before
# them, the system message (instructions), or else a notice of its own (a notice joins a
# leading system message instead).
_FRONT_SHIFTS = (0, 1)


def _holds(held: list[Message], index: int, message: Message) -> bool:
    """Whether `message`, at `index` of a request's messages, is one of `held`: its checkpoint's
    builder's messages, which the request's hold in the same order, shifted by what `finish`
    put before them. Two identity checks at most, instead of a set of a long history's ids
    made for each request; a message this misses would only be encoded again next turn."""
    for shift in _FRONT_SHIFTS:
        at = index - shift
        if 0 <= at < len(held) and held[at] is message:
            return True
    return False


def tools_of(req: ResponsesRequest, kinds: frozenset[Any] | None = None) -> list[dict[str, Any]]:
    """The request's tools: `tools`, then those of every `additional_tools` input item (Codex's
    Responses Lite sends its tools that way and no `tools` at all); `kinds` as request_tools
    takes them."""
    return request_tools(req.tools, req.input, kinds)


def to_chat_request(
    req: ResponsesRequest,
    dialect: ChatDialect,
    upstream_model: str,
    earlier: Checkpoint | None = None,
    known: tuple[list[Item], int] | None = None,
    *,
    keep: bool = True,
    kinds: frozenset[Any] | None = None,
    files: FileTexts | None = None,
) -> ChatRequest:
    """Build the upstream body. The result always streams and asks for usage when allowed.
    Values layer up: the model family's published sampling (`default_sampling = "auto"`), then
    the dialect's `extra_body` (upstream and model settings), then the client's own values.
    `earlier`: the checkpoint of an earlier request of the same conversation, translated with
    the same dialect; what the two share is not translated again (the result is the same).
    `known`: the leading input items known equal to that earlier request's (Inbound).
    `keep`: make the checkpoint for the next request (False: it would not be remembered, so
    neither its copy of the translation nor its encodings are made).
    `kinds`: the input's item types, when known (Inbound.input_kinds).
    `files`: the input's files read ahead (translate/files.py FileTexts; None: read here).
    Raises InvalidRequest for what a chat upstream cannot be given (a tool choice it cannot
    honour, an input item or part it could not read)."""
    tools = tools_of(req, kinds)
    if earlier is not None and tools == earlier.tools:
        functions, catalogue = earlier.chat_tools, earlier.catalogue
    else:
        catalogue, functions = _read_tools(tools)
    notice = unavailable_notice(catalogue.unavailable)
    history = earlier.history if earlier is not None else None
    translated = translate_input(
        req.input, req.instructions, dialect, notice, history, known, keep=keep, files=files
    )
    body = _sampling(req, dialect, upstream_model)
    body["model"] = upstream_model
    body["messages"] = translated.messages
    body["stream"] = True
    if dialect.include_usage:
        body["stream_options"] = {"include_usage": True}
    offered, tool_choice = chat_tool_choice(req.tool_choice, catalogue, functions)
    tools_json = None
    if offered:
        body["tools"] = offered
        if offered is functions:  # shared (_read_tools): encoded once
            tools_json = _FUNCTIONS_JSON.get(functions) or _FUNCTIONS_JSON.put(
                functions, orjson.Fragment(orjson.dumps(functions))
            )
        body["tool_choice"] = tool_choice
        if req.parallel_tool_calls is not None:
            body["parallel_tool_calls"] = req.parallel_tool_calls
    _add_options(body, req, dialect)
    kept = translated.history
    checkpoint = Checkpoint(kept, tools, functions, catalogue) if kept is not None else None
    return ChatRequest(body, catalogue, checkpoint, translated.dropped, tools_json)


# The catalogue and chat functions of a tool list, by its tools' identities: a request's tool
# checked lately is the object checked then (wire/recent.py), so a list seen before (each turn
# of a conversation, every session with the same tools) is one lookup.
_CATALOGUES: SameObjects[tuple[ToolCatalogue, list[dict[str, Any]]]] = SameObjects()
# Those chat functions as JSON, by the list's identity (read-only, like the list).
_FUNCTIONS_JSON: SameObject[orjson.Fragment] = SameObject()


def _read_tools(tools: list[dict[str, Any]]) -> tuple[ToolCatalogue, list[dict[str, Any]]]:
    """The catalogue of `tools` and the chat functions offered for them (read-only: shared)."""
    found = _CATALOGUES.get(tools)
    if found is None:
        catalogue = catalogue_of(tools)
        found = _CATALOGUES.put(tools, (catalogue, chat_tools(catalogue)))
    return found


def _sampling(req: ResponsesRequest, dialect: ChatDialect, upstream_model: str) -> dict[str, Any]:
    """The body's first values, each layer over the one before: the model family's published
    sampling (`default_sampling = "auto"`), the dialect's `extra_body`, the client's sampling
    extras."""
    body: dict[str, Any] = {}
    if dialect.default_sampling == "auto":
        family = family_sampling(upstream_model)
        if family is not None:
            body.update(for_server(family, None).values)
    body.update(dialect.extra_body)
    for name in CHAT_SAMPLING_EXTRAS:
        if name in req.extra:
            body[name] = req.extra[name]
    return body


def _add_options(body: dict[str, Any], req: ResponsesRequest, dialect: ChatDialect) -> None:
    """The client's values that have a chat field, under the dialect's names."""
    if req.max_output_tokens is not None:
        body[dialect.max_tokens_field] = req.max_output_tokens
    if req.temperature is not None:
        body["temperature"] = req.temperature
    if req.top_p is not None:
        body["top_p"] = req.top_p
    user = req.user if req.user is not None else req.extra.get("safety_identifier")
    if user is not None:  # the chat field every server knows; `safety_identifier` is its newer name
        body["user"] = user
    if req.stop:
        body["stop"] = req.stop
    if req.seed is not None:
        body["seed"] = req.seed
    effort = (req.reasoning or {}).get("effort")
    if dialect.send_reasoning_effort and isinstance(effort, str):
        body["reasoning_effort"] = effort
    response_format = _response_format((req.text or {}).get("format"))
    if response_format is not None:
        body["response_format"] = response_format


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
