"""The response resource around the output: request echo, status, usage. Pure."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from codexgate.translate.catalogue import UNAVAILABLE_METADATA_KEY, unavailable_metadata
from codexgate.wire.recent import SameObject, SameObjects
from codexgate.wire.responses import ResponsesRequest

# Tool kinds the response resource may echo (the Open Responses `Tool` union); others
# (Codex's `custom`, `namespace`, hosted tools) are not echoed.
_ECHOED_TOOL_KINDS = frozenset(("function",))


def _echo_tool(tool: dict[str, Any]) -> dict[str, Any] | None:
    """A tool as the response echoes it; None for a kind the echo leaves out."""
    if tool.get("type") not in _ECHOED_TOOL_KINDS or not isinstance(tool.get("name"), str):
        return None
    return {
        "type": "function",
        "name": tool["name"],
        "description": tool.get("description"),
        "parameters": tool.get("parameters"),
        "strict": bool(tool.get("strict", False)),
    }


# Each tool's echo, encoded, by the tool object: a request's tool checked lately is the object
# checked then (wire/recent.py), so the tools Codex sessions share are encoded once.
_ECHOES: SameObject[bytes] = SameObject()


def _encoded_tools_echo(tools: list[dict[str, Any]]) -> orjson.Fragment:
    """The echo of `tools` as encoded JSON, made of each tool's (b"" for one not echoed); the
    same Fragment for the same tool objects (a conversation's turns, sessions alike)."""
    fragment = _LISTS.get(tools)
    if fragment is not None:
        return fragment
    pieces = []
    for tool in tools:
        piece = _ECHOES.get(tool)
        if piece is None:
            echoed = _echo_tool(tool)
            # A copy of the exact size: orjson's result may keep the larger buffer it grew into.
            piece = _ECHOES.put(tool, bytes(memoryview(orjson.dumps(echoed))) if echoed else b"")
        if piece:
            pieces.append(piece)
    return _LISTS.put(tools, orjson.Fragment(b"[" + b",".join(pieces) + b"]"))


_LISTS: SameObjects[orjson.Fragment] = SameObjects()


def _echo_tool_choice(choice: Any) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "name": choice["name"]}
    return "auto"


_EFFORTS = frozenset(("none", "low", "medium", "high", "xhigh"))
_SUMMARIES = frozenset(("concise", "detailed", "auto"))


def _echo_text(text: Any) -> dict[str, Any]:
    fmt = text.get("format") if isinstance(text, dict) else None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    echoed: dict[str, Any]
    if kind == "json_schema" and isinstance(fmt, dict):
        # The schema itself is not echoed: the Open Responses echo only allows null there.
        echoed = {
            "type": "json_schema",
            "name": fmt.get("name") or "output",
            "description": fmt.get("description"),
            "schema": None,
            "strict": bool(fmt.get("strict", False)),
        }
    elif kind == "json_object":
        echoed = {"type": "json_object"}
    else:
        echoed = {"type": "text"}
    result: dict[str, Any] = {"format": echoed}
    verbosity = text.get("verbosity") if isinstance(text, dict) else None
    if verbosity in ("low", "medium", "high"):
        result["verbosity"] = verbosity
    return result


@dataclass(frozen=True, slots=True)
class Envelope:
    """Everything about a response that is fixed when it starts. `request_echo` is the echo of
    the request's parameters as encoded JSON (an object) but for its three largest: a stream
    holds it from its first event to its last, and as bytes it takes half the memory of its
    decoded value. `lead` holds those three: the previous response's id, the instructions
    (the request's own string) and the tools' echo, encoded once and shared by every stream
    with the same tools (a Codex request's ~10 KB of tools are then not decoded and encoded
    again for each event that carries the response: `response.created`, `.in_progress`,
    `.completed`)."""

    response_id: str
    created_at: int
    model: str
    request_echo: bytes
    lead: tuple[str | None, str | None, orjson.Fragment] | None = None

    @classmethod
    def for_request(
        cls,
        req: ResponsesRequest,
        response_id: str,
        created_at: int,
        sent: Mapping[str, Any] | None = None,
        unavailable_tools: Sequence[str] = (),
    ) -> Envelope:
        """`sent`: the upstream request body, whose sampling values (the gateway's defaults and
        the upstream's `extra_body` included) are echoed instead of the client's.
        `unavailable_tools`: the tool kinds the upstream could not be given, named in metadata."""
        sent = sent or {}
        temperature = sent.get("temperature", req.temperature)
        top_p = sent.get("top_p", req.top_p)
        max_output_tokens = sent.get("max_completion_tokens", sent.get("max_tokens", req.max_output_tokens))
        reasoning = None
        if req.reasoning:
            effort, summary = req.reasoning.get("effort"), req.reasoning.get("summary")
            reasoning = {
                "effort": effort if effort in _EFFORTS else None,
                "summary": summary if summary in _SUMMARIES else None,
            }
        echo = {
            "tool_choice": _echo_tool_choice(req.tool_choice),
            "truncation": "disabled",
            "parallel_tool_calls": req.parallel_tool_calls if req.parallel_tool_calls is not None else True,
            "text": _echo_text(req.text),
            "top_p": top_p if isinstance(top_p, (int, float)) else 1.0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "top_logprobs": 0,
            "temperature": temperature if isinstance(temperature, (int, float)) else 1.0,
            "reasoning": reasoning,
            "max_output_tokens": max_output_tokens if isinstance(max_output_tokens, int) else None,
            "max_tool_calls": None,
            "store": req.store is not False,  # absent means true (server/state.py keeps it)
            "background": False,
            "service_tier": req.service_tier or "default",
            "metadata": _metadata(req, unavailable_tools),
            "safety_identifier": None,
            "prompt_cache_key": req.prompt_cache_key,
        }
        lead = (req.previous_response_id, req.instructions, _encoded_tools_echo(req.tools))
        # A copy of the exact size: orjson's result may keep the larger buffer it grew into.
        return cls(response_id, created_at, req.model, bytes(memoryview(orjson.dumps(echo))), lead)

    def resource(
        self,
        status: str,
        output: list[dict[str, Any]],
        *,
        usage: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
        incomplete_reason: str | None = None,
        completed_at: int | None = None,
    ) -> dict[str, Any]:
        """The response object. Its `tools` is an `orjson.Fragment` (encoded JSON) when the
        envelope was made for a request: the resource is only ever encoded, never read back."""
        resource = {
            "id": self.response_id,
            "object": "response",
            "created_at": self.created_at,
            "completed_at": completed_at,
            "status": status,
            "incomplete_details": {"reason": incomplete_reason} if incomplete_reason else None,
            "model": self.model,
            "output": output,
            "error": error,
            "usage": usage,
        }
        if self.lead is not None:
            previous, instructions, tools = self.lead
            resource["previous_response_id"] = previous
            resource["instructions"] = instructions
            resource["tools"] = tools
        resource.update(orjson.loads(self.request_echo))
        return resource


def _metadata(req: ResponsesRequest, unavailable: Sequence[str]) -> dict[str, Any]:
    """The client's metadata, plus the tools the upstream could not be given (hosted ones such
    as web_search): the one place a client sees that they were left out."""
    metadata = dict(req.metadata or {})
    if unavailable:
        metadata[UNAVAILABLE_METADATA_KEY] = unavailable_metadata(unavailable)
    return metadata


def token_count(value: Any) -> int:
    """An upstream's token count, read leniently: a non-negative integer (or a float or a
    string of digits), anything else 0. Never raises: usage must not cost the terminal event."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(0, value)
    if isinstance(value, float) and math.isfinite(value):
        return max(0, int(value))
    if isinstance(value, str) and value.strip().isdigit() and len(value) < 20:
        return int(value)
    return 0


def chat_usage_to_responses(usage: dict[str, Any]) -> dict[str, Any]:
    """Chat `usage` -> Responses `usage`, details included (zeros when absent or unreadable)."""
    input_tokens = token_count(usage.get("prompt_tokens"))
    output_tokens = token_count(usage.get("completion_tokens"))
    prompt_details = usage.get("prompt_tokens_details")
    completion_details = usage.get("completion_tokens_details")
    cached = token_count(prompt_details.get("cached_tokens")) if isinstance(prompt_details, dict) else 0
    if not cached:
        cached = token_count(usage.get("prompt_cache_hit_tokens"))  # DeepSeek and its copies
    reasoning = 0
    if isinstance(completion_details, dict):
        reasoning = token_count(completion_details.get("reasoning_tokens"))
    total = token_count(usage.get("total_tokens"))
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": total or input_tokens + output_tokens,
    }


def estimated_usage(input_tokens: int, output_chars: int) -> dict[str, Any]:
    """Usage when the upstream sent none: Codex only compacts when it sees token counts.
    The caller estimates input as request-body bytes / 4; output is characters / 3, since what
    models write (tool-call JSON, markup, short lines) is denser in tokens than prose.
    bench/usage_estimate.py measures both against real tokenizers."""
    output_tokens = (output_chars + 2) // 3
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }
