"""Canonical request -> the body an Anthropic Messages server takes (`POST {base}/messages`).
Pure: no I/O, no clock. The summary is docs/backends.md, "Anthropic Messages upstreams".

The input becomes `system` and `messages` in translate/messages_upstream/messages.py; this
module adds the rest:

- tools: every callable tool of the catalogue (translate/catalogue.py) as
  `{name, description, input_schema}` under the flat name a model is shown (namespaces
  flattened, a custom tool with one `input` string and its grammar in the description, as
  translate/chat_upstream/tools.py words it); hosted tools are left out and the model told.
  `tool_choice` auto/required/none/a tool -> auto/any/none/tool; `parallel_tool_calls: false`
  -> `disable_parallel_tool_use`.
- `max_tokens`, which Anthropic requires: the client's `max_output_tokens`, else a default
  per model family (`default_max_tokens`), at most what the route's window holds beside the
  prompt when the window is known.
- reasoning: `reasoning.effort` -> `thinking` (`enabled` with a budget per effort, EFFORT_BUDGETS,
  below max_tokens; or `adaptive` with `output_config.effort`), unless something in the request
  rules it out: a forced tool choice, sampling values Anthropic refuses beside thinking, or a
  tool loop whose assistant turn has no signed thinking to give back (a conversation that came
  from another upstream). Then the request goes without thinking, and `notes` says why.
- `text.format` json_schema -> `output_config.format` (Anthropic's structured outputs);
  json_object -> a system line asking for one JSON object.
- temperature (0 to 1 here), top_p, `top_k` (an extra), stop -> `stop_sequences` (those of
  white space only the gateway applies, Anthropic refuses them), `user` -> `metadata.user_id`.
- prompt caching: translate/messages_upstream/cache.py places the breakpoints.

A request the Messages face kept whole (`req.native`, dialect "messages") is passed through
instead: the client's own body, every block, `cache_control` and signature as it sent them,
with the route's model, `max_tokens` held to the window, `stream: true`, and the client's
`anthropic-beta` values for the upstream to add to its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from codexgate.errors import InvalidRequest
from codexgate.translate.catalogue import ToolCatalogue, catalogue_of, request_tools, unavailable_notice
from codexgate.translate.chat_upstream.tools import chat_tool_choice, chat_tools
from codexgate.translate.messages_face.thinking import SIGNATURE_PREFIX
from codexgate.translate.messages_upstream.cache import has_cache_control, place_breakpoints
from codexgate.translate.messages_upstream.messages import Message, is_thinking, translate_items
from codexgate.wire.chat import CHAT_SAMPLING_EXTRAS
from codexgate.wire.recent import SameObjects
from codexgate.wire.responses import ResponsesRequest

__all__ = [
    "EFFORT_BUDGETS",
    "JSON_OBJECT_NOTE",
    "MIN_THINKING_BUDGET",
    "MessagesOptions",
    "MessagesRequest",
    "PROMPT_BYTES_PER_TOKEN",
    "ThinkingMode",
    "default_max_tokens",
    "to_messages_request",
]

ThinkingMode = Literal["enabled", "adaptive", "off"]

# Thinking tokens per `reasoning.effort` (thinking "enabled"): Anthropic's minimum budget for
# the least, doubling up to the 32k Anthropic suggests as the most worth asking for; "none"
# asks for no thinking.
EFFORT_BUDGETS: Mapping[str, int] = {
    "minimal": 1024, "low": 4096, "medium": 8192, "high": 16384, "xhigh": 32000,
}  # fmt: skip
MIN_THINKING_BUDGET = 1024  # Anthropic's minimum
_ANSWER_ROOM = 1024  # tokens of max_tokens kept for the answer beside the thinking budget
# `output_config.effort` per `reasoning.effort` (thinking "adaptive").
_ADAPTIVE_EFFORT: Mapping[str, str] = {
    "minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "xhigh",
}  # fmt: skip
# The most output a model family writes (Anthropic's model pages), by the start of its id;
# the first match wins. Any other model (a local server's): _DEFAULT_MAX_TOKENS.
# Later families (Claude 4 onwards write 32k or more): 32000.
_MAX_TOKENS_BY_PREFIX: tuple[tuple[str, int], ...] = (
    ("claude-opus-4-5", 64000), ("claude-opus-4-6", 64000), ("claude-opus-4", 32000),
    ("claude-sonnet-4", 64000), ("claude-haiku-4", 64000), ("claude-3-7-sonnet", 64000),
    ("claude-3-5", 8192), ("claude-3", 4096), ("claude-", 32000),
)  # fmt: skip
_DEFAULT_MAX_TOKENS = 8192
# Bytes of a body per token, reckoned low, so that the prompt is not under-counted when
# max_tokens is held to what the window leaves (a server refuses prompt + max_tokens past it).
PROMPT_BYTES_PER_TOKEN = 3
_MIN_CLAMPED_MAX_TOKENS = 1024
JSON_OBJECT_NOTE = "Answer with one JSON object and nothing else."
# Fields the canonical request may hold that the Messages API has no place for: refused, not
# dropped, unless their value changes nothing.
_REFUSED = ("seed", *CHAT_SAMPLING_EXTRAS)
_NEUTRAL: dict[str, tuple[Any, ...]] = {
    "frequency_penalty": (0,), "presence_penalty": (0,), "logit_bias": ({},),
}  # fmt: skip
_NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True, slots=True)
class MessagesOptions:
    """What the upstream's and the route's settings say of the body."""

    prompt_cache: bool = True  # prompt_cache = "auto"
    thinking: ThinkingMode = "enabled"
    context_window: int | None = None  # the route's, when known
    extra_body: Mapping[str, Any] = field(default_factory=dict)  # under the client's values


@dataclass(slots=True)
class MessagesRequest:
    body: dict[str, Any]
    catalogue: ToolCatalogue  # what the turn resolves the model's calls by
    betas: list[str] = field(default_factory=list)  # the client's anthropic-beta values
    dropped_items: list[str] = field(default_factory=list)  # kinds of input items left out
    notes: list[str] = field(default_factory=list)  # what was changed to keep it valid, as counts keys
    gateway_stops: list[str] | None = None  # stop sequences the gateway applies

    def encode(self) -> bytes:
        return orjson.dumps(self.body)


def default_max_tokens(model: str) -> int:
    """`max_tokens` for a request that names no `max_output_tokens`: the most the model
    family writes, else 8192."""
    lowered = model.lower()
    for prefix, tokens in _MAX_TOKENS_BY_PREFIX:
        if lowered.startswith(prefix):
            return tokens
    return _DEFAULT_MAX_TOKENS


def to_messages_request(
    req: ResponsesRequest, upstream_model: str, options: MessagesOptions = MessagesOptions()
) -> MessagesRequest:
    """The body for `POST {base}/messages`, always streamed. Raises InvalidRequest for what
    the Messages API cannot carry (a field it has no place for, a temperature above 1, a tool
    choice of a tool it cannot call, an item or part it could not read), naming the field."""
    native = req.native
    if native is not None and native.dialect == "messages":
        return _pass_through(req, upstream_model, options)
    _refuse_fields(req)
    tools = request_tools(req.tools, req.input)
    catalogue, functions = _read_tools(tools)
    conversation = translate_items(req.input, req.instructions)
    system = list(conversation.system)
    notice = unavailable_notice(catalogue.unavailable)
    if notice:
        system.append(notice)
    fmt = (req.text or {}).get("format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_object":
        system.append(JSON_OBJECT_NOTE)
    body: dict[str, Any] = dict(options.extra_body)
    body["model"] = upstream_model
    if system:
        body["system"] = [{"type": "text", "text": text} for text in system]
    body["messages"] = conversation.messages
    translated = MessagesRequest(body, catalogue, dropped_items=conversation.dropped)
    forced = _add_tools(body, req, catalogue, functions)
    _add_sampling(body, req, translated)
    _add_metadata(body, req)
    requested = req.max_output_tokens or default_max_tokens(upstream_model)
    body["max_tokens"] = _held_to_window(requested, body, options.context_window)
    _add_thinking(body, req, options, translated, forced=forced)
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        config = body.setdefault("output_config", {})
        config["format"] = {"type": "json_schema", "schema": fmt.get("schema") or {}}
    body["stream"] = True
    if options.prompt_cache and not has_cache_control(body):
        place_breakpoints(body)
    return translated


def _refuse_fields(req: ResponsesRequest) -> None:
    for name in _REFUSED:
        value = req.seed if name == "seed" else req.extra.get(name)
        if value is not None and value not in _NEUTRAL.get(name, ()):
            raise InvalidRequest(
                f"'{name}' cannot be sent to this upstream: the Anthropic Messages API has no such field. "
                "Send the request without it.",
                param=name,
            )


# -- tools

_TOOLS: SameObjects[tuple[ToolCatalogue, list[dict[str, Any]]]] = SameObjects()


def _read_tools(tools: list[dict[str, Any]]) -> tuple[ToolCatalogue, list[dict[str, Any]]]:
    """The catalogue of `tools` and its chat functions (read-only: shared by the requests whose
    tools are the same objects, wire/recent.py)."""
    found = _TOOLS.get(tools)
    if found is None:
        catalogue = catalogue_of(tools)
        found = _TOOLS.put(tools, (catalogue, chat_tools(catalogue)))
    return found


def _anthropic_tool(function: dict[str, Any]) -> dict[str, Any]:
    """A chat function (translate/chat_upstream/tools.py: the flat name, a custom tool's
    grammar in its description) as an Anthropic tool."""
    spec = function["function"]
    schema = spec.get("parameters") or _NO_PARAMETERS
    if schema.get("type") != "object":
        schema = {**schema, "type": "object"}  # Anthropic's input_schema is an object's
    tool: dict[str, Any] = {"name": spec["name"]}
    if spec.get("description"):
        tool["description"] = spec["description"]
    tool["input_schema"] = schema
    return tool


def _add_tools(
    body: dict[str, Any], req: ResponsesRequest, catalogue: ToolCatalogue, functions: list[dict[str, Any]]
) -> bool:
    """`tools` and `tool_choice`; whether the choice forces a call (Anthropic takes no
    thinking beside one). Raises InvalidRequest for a choice of a tool that cannot be called."""
    offered, choice = chat_tool_choice(req.tool_choice, catalogue, functions)
    if not offered:
        _declare_called_tools(body)
        return False
    body["tools"] = [_anthropic_tool(f) for f in offered]
    if isinstance(choice, dict):
        tool_choice: dict[str, Any] = {"type": "tool", "name": choice["function"]["name"]}
    else:
        tool_choice = {"type": {"required": "any"}.get(choice, choice)}
    if req.parallel_tool_calls is False and tool_choice["type"] != "none":
        tool_choice["disable_parallel_tool_use"] = True
    body["tool_choice"] = tool_choice
    return tool_choice["type"] in ("any", "tool")


def _declare_called_tools(body: dict[str, Any]) -> None:
    """A request with no tool to offer whose history holds calls: Anthropic refuses tool_use
    and tool_result blocks in a request that defines no tools, so the tools called are
    declared (any object as input) and none may be called now."""
    names = {
        block["name"]: None
        for message in body["messages"]
        if message["role"] == "assistant"
        for block in message["content"]
        if block.get("type") == "tool_use"
    }
    if names:
        body["tools"] = [{"name": name, "input_schema": _NO_PARAMETERS} for name in names]
        body["tool_choice"] = {"type": "none"}


# -- sampling, metadata, the output's length


def _add_sampling(body: dict[str, Any], req: ResponsesRequest, translated: MessagesRequest) -> None:
    if req.temperature is not None:
        if req.temperature > 1:
            raise InvalidRequest(
                f"'temperature' is {req.temperature:g}; Anthropic's models take a temperature from 0 to 1.",
                param="temperature",
            )
        body["temperature"] = req.temperature
    if req.top_p is not None:
        body["top_p"] = req.top_p
    top_k = req.extra.get("top_k")
    if top_k is not None:
        if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1:
            raise InvalidRequest("'top_k' must be a positive integer.", param="top_k")
        body["top_k"] = top_k
    if req.stop:
        upstream = [s for s in req.stop if s.strip()]
        if upstream:
            body["stop_sequences"] = upstream
        if len(upstream) < len(req.stop):
            # Anthropic refuses a stop sequence of white space alone: the gateway applies those
            # (and, since it then reads the stream for them, all of them).
            translated.gateway_stops = list(req.stop)


def _add_metadata(body: dict[str, Any], req: ResponsesRequest) -> None:
    user = req.user if req.user is not None else req.extra.get("safety_identifier")
    if isinstance(user, str) and user:
        body["metadata"] = {"user_id": user}


def _held_to_window(requested: int, body: dict[str, Any], window: int | None) -> int:
    """`requested` output tokens, at most what `window` leaves beside the prompt (reckoned
    high, at 3 bytes a token), but never below 1024 (a prompt that leaves less is the
    upstream's to refuse as too long, which a route's fallbacks act on)."""
    if not window:
        return requested
    prompt = sum(len(orjson.dumps(body.get(key))) for key in ("system", "tools", "messages") if key in body)
    room = window - prompt // PROMPT_BYTES_PER_TOKEN
    return max(min(requested, room), min(requested, _MIN_CLAMPED_MAX_TOKENS))


# -- thinking


def _add_thinking(
    body: dict[str, Any],
    req: ResponsesRequest,
    options: MessagesOptions,
    translated: MessagesRequest,
    *,
    forced: bool,
) -> None:
    """`thinking` for the request's effort, unless the request rules it out (`notes` says why)."""
    effort = (req.reasoning or {}).get("effort")
    if options.thinking == "off" or not isinstance(effort, str) or effort not in EFFORT_BUDGETS:
        return  # no effort, "none", or one Anthropic has no level for
    why_not = _why_no_thinking(body, forced)
    if why_not is not None:
        translated.notes.append(why_not)
        return
    if options.thinking == "adaptive":
        body["thinking"] = {"type": "adaptive"}
        body.setdefault("output_config", {})["effort"] = _ADAPTIVE_EFFORT[effort]
        return
    budget = min(EFFORT_BUDGETS[effort], body["max_tokens"] - _ANSWER_ROOM)
    if budget < MIN_THINKING_BUDGET:
        translated.notes.append("thinking_off.max_tokens")
        return
    body["thinking"] = {"type": "enabled", "budget_tokens": budget}


def _why_no_thinking(body: dict[str, Any], forced: bool) -> str | None:
    """Why this request cannot ask for thinking (a counts key), or None when it can."""
    if forced:
        return "thinking_off.forced_tool"  # Anthropic: no thinking beside a forced tool choice
    top_p = body.get("top_p")
    if "temperature" in body or "top_k" in body or (top_p is not None and top_p < 0.95):
        return "thinking_off.sampling"  # Anthropic: no temperature or top_k beside thinking
    if not _tool_loop_has_thinking(body["messages"]):
        return "thinking_off.unsigned_turn"
    return None


def _tool_loop_has_thinking(messages: list[Message]) -> bool:
    """Whether a request may ask for thinking as far as its history goes: when the
    conversation is inside a tool loop (it ends with tool results), Anthropic wants the loop's
    first assistant message to start with the thinking it was answered with. A turn that came
    from another upstream has none (nothing signed to give back)."""
    start = _current_turn(messages)
    turn = messages[start:]
    if not any(b.get("type") == "tool_use" for m in turn if m["role"] == "assistant" for b in m["content"]):
        return True
    first = next((m for m in turn if m["role"] == "assistant"), None)
    return first is not None and bool(first["content"]) and is_thinking(first["content"][0])


def _current_turn(messages: list[Message]) -> int:
    """Where the current assistant turn starts: after the last user message that says more
    than tool results."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message["role"] == "user" and any(b.get("type") != "tool_result" for b in message["content"]):
            return index + 1
    return 0


# -- pass-through


def _pass_through(req: ResponsesRequest, upstream_model: str, options: MessagesOptions) -> MessagesRequest:
    """The client's own Messages body, as it sent it but for the model, `max_tokens` (held to
    the window, the thinking budget below it) and `stream`."""
    native = req.native
    assert native is not None
    body = dict(native.body)
    body["model"] = upstream_model
    requested = body.get("max_tokens")
    if not isinstance(requested, int) or isinstance(requested, bool) or requested < 1:
        requested = default_max_tokens(upstream_model)
    body["max_tokens"] = max_tokens = _held_to_window(requested, body, options.context_window)
    thinking = body.get("thinking")
    budget = thinking.get("budget_tokens") if isinstance(thinking, dict) else None
    if isinstance(thinking, dict) and isinstance(budget, int) and budget >= max_tokens:
        body["thinking"] = {**thinking, "budget_tokens": max(max_tokens - _ANSWER_ROOM, MIN_THINKING_BUDGET)}
    body["stream"] = True
    if options.prompt_cache and not has_cache_control(body):
        place_breakpoints(body)
    tools = request_tools(req.tools, req.input)
    given = next((v for k, v in native.headers.items() if k.lower() == "anthropic-beta"), "")
    betas = [b.strip() for b in given.split(",") if b.strip()]
    translated = MessagesRequest(body, catalogue_of(tools), betas=betas)
    _leave_out_gateway_thinking(body, translated)
    return translated


def _leave_out_gateway_thinking(body: dict[str, Any], translated: MessagesRequest) -> None:
    """Thinking blocks the gateway signed (`cgs1:`: another upstream's reasoning, as the
    Messages face gave it to the client: a conversation that moved here from a chat member of
    the pool) are left out, since Anthropic would refuse their signature; if the tool loop the
    request is in then lacks its thinking, the request asks for none."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return
    dropped = False
    kept_messages: list[Any] = []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and message.get("role") == "assistant":
            kept = [block for block in content if not _gateway_signed(block)]
            if len(kept) < len(content):
                dropped = True
                # Anthropic refuses an assistant message without content.
                message = {**message, "content": kept or [{"type": "text", "text": "(thinking left out)"}]}
        kept_messages.append(message)
    if not dropped:
        return
    body["messages"] = kept_messages
    blocks = [_as_blocks(m) for m in kept_messages if isinstance(m, dict)]
    if "thinking" in body and not _tool_loop_has_thinking(blocks):
        del body["thinking"]
        management = body.get("context_management")
        if isinstance(management, dict) and isinstance(management.get("edits"), list):
            # Clearing thinking needs thinking on.
            edits = [
                e for e in management["edits"] if not str(e.get("type", "")).startswith("clear_thinking")
            ]
            body["context_management"] = {**management, "edits": edits}
        translated.notes.append("thinking_off.unsigned_turn")


def _gateway_signed(block: Any) -> bool:
    return (
        isinstance(block, dict)
        and block.get("type") == "thinking"
        and str(block.get("signature") or "").startswith(SIGNATURE_PREFIX)
    )


def _as_blocks(message: dict[str, Any]) -> Message:
    """A client's message with its content as blocks (a string is one text block)."""
    content = message.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    return {"role": message.get("role"), "content": [b for b in blocks or () if isinstance(b, dict)]}
