"""Canonical request -> the body a Responses upstream takes. Pure: no I/O, no clock.

The canonical request is already a Responses request, so most of it goes upstream as it is;
what this module does is repair what such servers reject (the table of docs/backends.md for
Responses upstreams is the summary of it):

- Codex's own fields (`client_metadata`, reasoning `context`, unknown keys on items such as
  `internal_chat_message_metadata_passthrough`) are left out; so are the item ids codexgate
  minted (every item the gateway built carries its own `msg_`/`rs_`/`fc_` ids, which the
  upstream never saw: OpenAI refuses ids it does not know, and pairs a reasoning item with the
  item that followed it by id).
- Reasoning: the upstream's own blob goes back to it as it was; every other reasoning item
  (the chat backend's `cgr2:` text, another server's blob, cut markers) is foreign and left
  out whole. The gateway wraps the blob of every reasoning item it passes on
  (`wrap_reasoning`), naming the upstream, so it knows its own when the client echoes them.
- Items of an answer a failure cut short are left out (translate/cuts.py), as on the chat path.
- Tools: `functions` offers every tool as a function under the flat name a model is shown
  (the catalogue's), leaves hosted tools out with a notice, and rewrites the history to
  match; `native` sends tools and items as the client did (OpenAI, another codexgate).
- Every call has an output and every output a call, as the Responses API requires.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote, unquote

import orjson

from codexgate.errors import InvalidRequest
from codexgate.translate.catalogue import (
    ADDITIONAL_TOOLS,
    CUSTOM_INPUT_PARAM,
    LOCAL_SHELL_NAME,
    TOOL_SEARCH_NAME,
    ToolCatalogue,
    catalogue_of,
    flat_name,
    request_tools,
    unavailable_notice,
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
from codexgate.translate.chat_upstream.messages import MISSING_OUTPUT
from codexgate.translate.chat_upstream.tools import chat_tool_choice, chat_tools
from codexgate.translate.cuts import cut_ids, is_cut
from codexgate.wire.chat import CHAT_SAMPLING_EXTRAS
from codexgate.wire.responses import Item, ResponsesRequest

__all__ = [
    "REFUSED_FIELDS",
    "OwnReasoning",
    "ToolFormat",
    "UpstreamRequest",
    "to_upstream_request",
    "unwrap_reasoning",
    "wrap_reasoning",
]

ToolFormat = Literal["functions", "native"]

# Fields the canonical request may hold that the Responses API has no place for: refused, not
# dropped, since leaving them out would change the answer silently. (`stop` has a place: the
# gateway applies it, TurnOptions.stop.)
REFUSED_FIELDS = ("seed", *CHAT_SAMPLING_EXTRAS)
# Values of those fields that change nothing (chat SDKs send some by default): let through.
_NEUTRAL: dict[str, tuple[Any, ...]] = {
    "frequency_penalty": (0,), "presence_penalty": (0,), "logit_bias": ({},),
}  # fmt: skip
# Fields of the canonical request that go upstream as they are, when set.
_PASSED_FIELDS = (
    "max_output_tokens", "temperature", "top_p", "metadata", "prompt_cache_key", "service_tier", "user",
)  # fmt: skip
# Fields of `extra` (unknown to the canonical model) that a Responses server takes.
_PASSED_EXTRAS = ("truncation", "top_logprobs", "max_tool_calls", "safety_identifier")

# -- the gateway's wrapper around an upstream's reasoning blob

_WRAP_PREFIX = "cgup1:"
TextField = Literal["summary", "content"]
_FIELD_CODES: dict[str, TextField] = {"s": "summary", "c": "content"}


@dataclass(frozen=True, slots=True)
class OwnReasoning:
    """What a reasoning item of this upstream carried: its id there, where its text was
    (a summary, or the raw reasoning text open models give), and its blob ('' when none)."""

    item_id: str
    text_field: TextField
    blob: str


def wrap_reasoning(upstream: str, item_id: str | None, text_field: TextField, blob: str | None) -> str:
    """The `encrypted_content` the client gets for a reasoning item of `upstream`:
    `cgup1:<upstream>:<item id>:<s|c>:<blob>`, names percent-quoted so none holds a colon."""
    code = "c" if text_field == "content" else "s"
    return f"{_WRAP_PREFIX}{quote(upstream, safe='')}:{quote(item_id or '', safe='')}:{code}:{blob or ''}"


def unwrap_reasoning(upstream: str, encrypted_content: object) -> OwnReasoning | None:
    """The reasoning of `upstream` wrapped by `wrap_reasoning`; None for anything else."""
    if not isinstance(encrypted_content, str):
        return None
    head = f"{_WRAP_PREFIX}{quote(upstream, safe='')}:"
    if not encrypted_content.startswith(head):
        return None
    parts = encrypted_content[len(head) :].split(":", 2)
    if len(parts) != 3 or parts[1] not in _FIELD_CODES:
        return None
    item_id, code, blob = parts
    return OwnReasoning(unquote(item_id), _FIELD_CODES[code], blob)


# -- the request


@dataclass(slots=True)
class UpstreamRequest:
    body: dict[str, Any]
    catalogue: ToolCatalogue  # what the turn resolves the model's calls by
    dropped_items: list[str] = field(default_factory=list)  # kinds of input items left out

    def encode(self) -> bytes:
        return orjson.dumps(self.body)


def to_upstream_request(
    req: ResponsesRequest,
    upstream_model: str,
    *,
    upstream: str,
    tool_format: ToolFormat = "functions",
    extra_body: Mapping[str, Any] | None = None,
) -> UpstreamRequest:
    """The body for `POST {base}/responses` on `upstream` (its configured name, which its
    reasoning blobs are wrapped with). Always streamed, never stored. `extra_body` (the
    upstream's and the route's settings) is merged under the client's values. Raises
    InvalidRequest for a field the Responses API cannot carry (REFUSED_FIELDS, unless its value
    changes nothing) and, with `functions`, for an item no model could read
    (translate/chat_upstream/items.py)."""
    _refuse_fields(req)
    tools = request_tools(req.tools, req.input)
    catalogue = catalogue_of(tools)
    functions = tool_format == "functions"
    body: dict[str, Any] = dict(extra_body or {})
    body["model"] = upstream_model
    instructions = req.instructions
    if functions:
        notice = unavailable_notice(catalogue.unavailable)
        if notice:
            instructions = f"{instructions}\n\n{notice}" if instructions else notice
    else:
        # Every tool goes upstream as it is: none is unavailable.
        catalogue = dataclasses.replace(catalogue, unavailable=[], skipped=[])
    if instructions:
        body["instructions"] = instructions
    translated = _Input(upstream, functions)
    translated.walk(req.input)
    body["input"] = translated.items
    upstream_tools, tool_choice = tools, req.tool_choice
    if functions:
        upstream_tools, tool_choice = _function_choice(req.tool_choice, catalogue)
    if upstream_tools:
        body["tools"] = upstream_tools
        body["tool_choice"] = tool_choice
        if req.parallel_tool_calls is not None:
            body["parallel_tool_calls"] = req.parallel_tool_calls
    _add_options(body, req)
    body["store"] = False
    body["stream"] = True
    return UpstreamRequest(body, catalogue, translated.dropped)


def _refuse_fields(req: ResponsesRequest) -> None:
    """Raises InvalidRequest for a field of REFUSED_FIELDS set to a value that changes
    something."""
    for name in REFUSED_FIELDS:
        value = req.seed if name == "seed" else req.extra.get(name)
        if value is not None and value not in _NEUTRAL.get(name, ()):
            raise InvalidRequest(
                f"'{name}' cannot be sent to this upstream: the Responses API has no such field. "
                "Send the request without it.",
                param=name,
            )


def _add_options(body: dict[str, Any], req: ResponsesRequest) -> None:
    """The client's reasoning, text and other options a Responses server takes, over the
    settings' (`extra_body`) already in `body`."""
    reasoning = _only(req.reasoning, ("effort", "summary"))  # Codex's `context` is its own
    if reasoning:
        body["reasoning"] = reasoning
    if body.get("reasoning"):  # the client's, or the settings': unstored, the blob must come back
        body["include"] = ["reasoning.encrypted_content"]
    text = _only(req.text, ("format", "verbosity"))
    if text:
        body["text"] = text
    for name in _PASSED_FIELDS:
        value = getattr(req, name)
        if value is not None:
            body[name] = value
    for name in _PASSED_EXTRAS:
        if req.extra.get(name) is not None:
            body[name] = req.extra[name]


def _only(value: dict[str, Any] | None, keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in (value or {}).items() if k in keys and v is not None}


# -- tools


def _function_tools(catalogue: ToolCatalogue) -> list[dict[str, Any]]:
    """Every callable tool as a Responses function, in the client's order (translate/chat_upstream/tools.py
    words a custom tool's grammar into its description, as for a chat upstream)."""
    # The Responses API makes a function strict unless told otherwise, and a strict schema
    # must list every property as required: only the client may ask for that.
    return [
        {"type": "function", **chat["function"], "strict": chat["function"].get("strict") is True}
        for chat in chat_tools(catalogue)
    ]


def _function_choice(choice: Any, catalogue: ToolCatalogue) -> tuple[list[dict[str, Any]], Any]:
    """The functions to offer and the `tool_choice` under their flat names, read as for a chat
    upstream (translate/chat_upstream/tools.py): a named tool by its flat name, `allowed_tools` as only the
    functions it allows. Raises InvalidRequest for a choice of a tool that is not offered."""
    tools = _function_tools(catalogue)
    as_chat = [{"type": "function", "function": {"name": tool["name"]}} for tool in tools]
    offered, chosen = chat_tool_choice(choice, catalogue, as_chat)
    names = {tool["function"]["name"] for tool in offered}
    if isinstance(chosen, dict):
        chosen = {"type": "function", "name": chosen["function"]["name"]}
    return [tool for tool in tools if tool["name"] in names], chosen


# -- input items

# The keys each kind of item keeps (its `type` included); every other key is the client's or
# codexgate's own and is left out, `id` first of all.
_KEPT_KEYS: dict[str, frozenset[str]] = {
    "message": frozenset(("type", "role", "content", "phase")),
    "function_call": frozenset(("type", "call_id", "name", "namespace", "arguments")),
    "function_call_output": frozenset(("type", "call_id", "output")),
    "custom_tool_call": frozenset(("type", "call_id", "name", "namespace", "input")),
    "custom_tool_call_output": frozenset(("type", "call_id", "output")),
    "tool_search_call": frozenset(("type", "call_id", "status", "execution", "arguments")),
    "tool_search_output": frozenset(("type", "call_id", "status", "execution", "tools")),
    "local_shell_call": frozenset(("type", "call_id", "status", "action")),
    "local_shell_call_output": frozenset(("type", "call_id", "status", "output")),
}
# Calls that need an output in the same request, and the output kind that answers each.
_OUTPUT_OF = {"function_call": "function_call_output", "custom_tool_call": "custom_tool_call_output"}
_OUTPUT_KINDS = frozenset(_OUTPUT_OF.values())
# Items only OpenAI's servers can read: a `functions` upstream is assumed not to be one.
_OPENAI_ONLY = frozenset(("compaction", "compaction_summary", "compaction_trigger"))
_TEXT_PARTS = frozenset(("output_text", "input_text", "text", "summary_text", "reasoning_text"))


def _kept(item: Item, kind: str) -> Item:
    keys = _KEPT_KEYS[kind]
    kept = {k: v for k, v in item.items() if k in keys}
    kept["type"] = kind
    return kept


def _text_of(content: Any) -> str:
    """The text of a message's content (a string, or parts)."""
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for part in content if isinstance(content, list) else ():
        if not isinstance(part, dict):
            continue
        if part.get("type") in _TEXT_PARTS and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif part.get("type") == "refusal" and isinstance(part.get("refusal"), str):
            texts.append(part["refusal"])
    return "\n".join(texts)


def _message(role: str, content: Any) -> Item:
    return {"type": "message", "role": role, "content": content}


class _Input:
    """Walks the client's items once into the upstream's, in order."""

    def __init__(self, upstream: str, functions: bool) -> None:
        self.upstream = upstream
        self.functions = functions
        self.items: list[Item] = []
        self.dropped: list[str] = []
        # Calls still waiting for their output: call_id -> (position after the call, output kind)
        self._waiting: dict[str, tuple[int, str]] = {}
        self._called: set[str] = set()

    def walk(self, items: list[Item]) -> None:
        cut = cut_ids(items)
        for index, item in enumerate(items):
            if is_cut(item, cut):
                continue
            self._item(item, index)
        # A call with no output (an interrupted turn): the Responses API refuses the request
        # unless it has one, so it gets the one the chat path gives it. From the last, so the
        # positions of the earlier ones stay right.
        for call_id, (position, kind) in sorted(self._waiting.items(), key=lambda e: -e[1][0]):
            self.items.insert(position, {"type": kind, "call_id": call_id, "output": MISSING_OUTPUT})

    def _item(self, item: Item, index: int) -> None:
        kind = item.get("type")
        if kind is None and "role" in item:
            kind = "message"
        if kind == ADDITIONAL_TOOLS:
            return  # its tools are the request's tools (request_tools)
        if kind == "reasoning":
            self._reasoning(item)
        elif kind == "message":
            self._message(item)
        elif self.functions:
            self._as_function(item, kind, index)
        elif kind in _OUTPUT_OF:
            self._call(_kept(item, kind))
        elif kind in _OUTPUT_KINDS:
            self._output(item["call_id"], _kept(item, kind))
        elif isinstance(kind, str) and kind in _KEPT_KEYS:
            self.items.append(_kept(item, kind))
        else:
            # Hosted calls, compaction, agent messages and kinds codexgate does not know: the
            # upstream gave them (with their ids, which the API requires on most) or reads them.
            self.items.append(item)

    def _message(self, item: Item) -> None:
        role, content = item["role"], item["content"]
        if not self.functions:
            self.items.append(_kept(item, "message"))
        elif role == "assistant":
            # Plain text: an assistant message of output_text parts is an output item with a
            # required id in the API's own schema, which servers that validate by it refuse.
            self.items.append(_message("assistant", _text_of(content)))
        else:
            self.items.append(_message(role, content))

    def _reasoning(self, item: Item) -> None:
        own = unwrap_reasoning(self.upstream, item.get("encrypted_content"))
        if own is None:
            # Foreign (the chat backend's text, another server's blob, a cut marker): no use
            # to this upstream, and OpenAI looks a reasoning item without its own blob up by
            # id, which fails when nothing is stored. Left out whole, summary included.
            self.dropped.append("reasoning")
            return
        text = _text_of(item.get("summary") or [])
        if not text and not own.blob:
            return  # nothing to give back
        rebuilt: Item = {"type": "reasoning"}
        if own.blob:
            # OpenAI-like: the blob is the state. No id: OpenAI would pair it by id with the
            # item that followed it, whose id codexgate replaced.
            rebuilt["encrypted_content"] = own.blob
        elif own.item_id:
            # No blob: the text is the state (vLLM, Ollama), and vLLM's schema wants an id.
            rebuilt["id"] = own.item_id
        if own.text_field == "content":
            rebuilt["summary"] = []
            rebuilt["content"] = [{"type": "reasoning_text", "text": text}] if text else []
        else:
            rebuilt["summary"] = [{"type": "summary_text", "text": text}] if text else []
        self.items.append(rebuilt)

    # -- calls and outputs, paired

    def _call(self, call: Item) -> None:
        call_id = call["call_id"]
        self.items.append(call)
        self._called.add(call_id)
        self._waiting[call_id] = (len(self.items), _OUTPUT_OF[call["type"]])

    def _output(self, call_id: str, output: Item) -> None:
        if call_id not in self._called:
            # An output whose call is not in the history: the API refuses it; its content is
            # kept as a user message, as on the chat path.
            text = _text_of(output.get("output"))
            self.items.append(_message("user", f"Tool output for call {call_id}:\n{text}"))
            return
        self._waiting.pop(call_id, None)
        self.items.append(output)

    # -- tool_format = "functions": the history as function calls under the flat names

    def _as_function(self, item: Item, kind: Any, index: int) -> None:
        if kind == "function_call":
            name = flat_name(item.get("namespace"), item["name"])
            self._function_call(item["call_id"], name, item["arguments"])
        elif kind == "custom_tool_call":
            arguments = orjson.dumps({CUSTOM_INPUT_PARAM: item["input"]}).decode()
            self._function_call(item["call_id"], flat_name(item.get("namespace"), item["name"]), arguments)
        elif kind == "tool_search_call":
            self._function_call(item["call_id"], TOOL_SEARCH_NAME, tool_search_arguments(item))
        elif kind == "local_shell_call":
            self._function_call(item["call_id"], LOCAL_SHELL_NAME, local_shell_arguments(item))
        elif kind in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
            self._function_output(item["call_id"], item["output"])
        elif kind == "tool_search_output":
            self._function_output(item["call_id"], tool_search_output_text(item))
        elif kind in HOSTED_CALL_KINDS:
            self.items.append(_message("assistant", hosted_call_note(item)))
        elif kind == "agent_message":
            self.items.append(_message("user", agent_message_text(item, f"input[{index}]")))
        elif kind in _OPENAI_ONLY:
            refuse_unreadable(item, f"input[{index}]")
        else:
            self.items.append(_message("user", unknown_item_note(item, f"input[{index}]")))

    def _function_call(self, call_id: str, name: str, arguments: str) -> None:
        self._call({"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments})

    def _function_output(self, call_id: str, output: Any) -> None:
        self._output(call_id, {"type": "function_call_output", "call_id": call_id, "output": output})
