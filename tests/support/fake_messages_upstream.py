"""A scripted Anthropic Messages server (`POST .../messages`, `GET .../models`), as a raw ASGI
app that runs in process (`ASGIUpstreamTransport`) or on loopback (`servers.run_asgi_server`).

    upstream = FakeMessagesUpstream([message_reply(Thinking("Plan."), ToolUse("exec_command", {...}))])

It holds the gateway to Anthropic's rules, not to what a lenient server would take:

- The event stream is Anthropic's exactly: `message_start` (usage with the cache fields),
  `ping`, per block `content_block_start` / `content_block_delta`... / `content_block_stop`
  (`text_delta`, `thinking_delta` then one `signature_delta`, `input_json_delta`),
  `message_delta` (stop reason, output usage), `message_stop`; each as `event:` and `data:`.
- A request Anthropic would refuse is a 400 `invalid_request_error` saying why (`validate`):
  no `max_tokens`, turns that do not alternate or start with the assistant, empty text, a
  `tool_use` not answered at the start of the next user message, tool blocks with no tools
  defined, more than four breakpoints or one on a thinking block, thinking beside a forced
  tool choice or a temperature, a thinking budget below 1,024 or not below `max_tokens`, a
  tool loop whose first assistant message does not start with its thinking, and a thinking
  block whose signature is not the one this server gave (its signature is an HMAC of its text:
  a changed text or signature is refused, as Anthropic refuses one).
- Prompt caching is accounted by Anthropic's documented rules (`CacheBook`): the prompt is
  the sequence of its tools, system blocks and message blocks; a cache entry is the prefix up
  to a block marked `cache_control` (at most four), written only when it holds 1,024 tokens or
  more; a request reads the longest cached prefix ending at one of its breakpoints or at a
  block boundary up to 20 blocks before one. Tokens are estimated at 4 bytes a token of each
  block's JSON (without its `cache_control`). Each answer's usage reports `input_tokens`
  (after the last breakpoint), `cache_creation_input_tokens` and `cache_read_input_tokens`.
- Errors: `ErrorReply` answers a status and body (`overloaded()` 529, `rate_limited()` 429
  with retry-after, `prompt_too_long()` 400); `MessageReply(error=...)` sends an `error` event
  mid-stream, `cut=True` ends the body before `message_stop`.

Each POST is recorded in `requests` (body, headers, the usage reported); an exhausted script
answers 500. With `api_key` set, a request without that `x-api-key` is a 401
`authentication_error`, as on Anthropic's API.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import itertools
import math
import re
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from codexgate.server.asgi import Receive, Scope, Send

from ._exchange import read_body

JSON = dict[str, Any]

SECRET = b"fake-messages-upstream"
MIN_CACHE_TOKENS = 1024
LOOKBACK_BLOCKS = 20
MAX_BREAKPOINTS = 4
BYTES_PER_TOKEN = 4
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_IDS = itertools.count(1)


# -- replies


def sign(text: str) -> str:
    """The signature this server gives a thinking block: an HMAC of its text."""
    return base64.b64encode(hmac.new(SECRET, text.encode(), hashlib.sha256).digest()).decode()


def sign_omitted(text: str) -> str:
    """The signature of a thinking block sent with `thinking.display: "omitted"` (its text not
    shown, "" in the block): like Anthropic's, it carries the text, sealed."""
    sealed = base64.b64encode(text.encode()).decode()
    return f"om.{sealed}.{sign(text)}"


def redacted_data(secret_text: str) -> str:
    """A redacted_thinking block's data: opaque, and checked like a signature when it returns."""
    payload = base64.b64encode(secret_text.encode()).decode()
    return f"{payload}.{sign(payload)}"


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Thinking:
    text: str
    redacted: bool = False  # sent as a redacted_thinking block (its text never shown)


@dataclass(frozen=True)
class ToolUse:
    name: str
    input: JSON
    id: str = field(default_factory=lambda: f"toolu_{next(_IDS):06d}fake")


Block = Text | Thinking | ToolUse


@dataclass
class MessageReply:
    blocks: Sequence[Block]
    stop_reason: str | None = None  # None: tool_use when a ToolUse is among the blocks, else end_turn
    stop_sequence: str | None = None
    chunk_chars: int = 8
    cut: bool = False  # the body ends after the blocks, with no message_delta or message_stop
    error: JSON | None = None  # an `error` event's error object after the blocks, instead of the end
    status: int = 200


@dataclass
class ErrorReply:
    status: int
    body: JSON | bytes
    headers: Mapping[str, str] = field(default_factory=dict)


Reply = MessageReply | ErrorReply
Script = Iterable[Reply] | Callable[[JSON], Reply]


def message_reply(*blocks: Block, **options: Any) -> MessageReply:
    return MessageReply(list(blocks), **options)


def anthropic_error(
    status: int, kind: str, message: str, headers: Mapping[str, str] | None = None
) -> ErrorReply:
    return ErrorReply(
        status, {"type": "error", "error": {"type": kind, "message": message}}, dict(headers or {})
    )


def overloaded() -> ErrorReply:
    return anthropic_error(529, "overloaded_error", "Overloaded")


def rate_limited(retry_after: float) -> ErrorReply:
    return anthropic_error(
        429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit",
        {"retry-after": f"{retry_after:g}"},
    )  # fmt: skip


def prompt_too_long(tokens: int = 210_000, maximum: int = 200_000) -> ErrorReply:
    return anthropic_error(
        400, "invalid_request_error", f"prompt is too long: {tokens} tokens > {maximum} maximum"
    )


# -- the rules


class Refused(Exception):
    """A request Anthropic would refuse, with what it would say."""


def _blocks_of(content: Any) -> list[JSON]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _check_signature(block: JSON, where: str) -> None:
    if block.get("type") == "thinking":
        signature, text = str(block.get("signature") or ""), str(block.get("thinking") or "")
        if signature.startswith("om.") and not text:  # display "omitted": the text is in the seal
            _, sealed, signature = signature.split(".", 2) if signature.count(".") >= 2 else ("", "", "")
            try:
                text = base64.b64decode(sealed, validate=True).decode()
            except ValueError:
                raise Refused(f"{where}: Invalid `signature` in `thinking` block") from None
        if not hmac.compare_digest(signature, sign(text)):
            raise Refused(f"{where}: Invalid `signature` in `thinking` block")
    elif block.get("type") == "redacted_thinking":
        payload, _, signature = str(block.get("data") or "").partition(".")
        if not hmac.compare_digest(signature, sign(payload)):
            raise Refused(f"{where}: Invalid `data` in `redacted_thinking` block")


def validate(body: JSON) -> None:
    """Raises Refused for a request Anthropic's Messages API would refuse (the rules above)."""
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise Refused("model: Field required")
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise Refused("max_tokens: Field required")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise Refused("messages: at least one message is required")
    tools = body.get("tools") or []
    for index, tool in enumerate(tools):
        if not _TOOL_NAME.match(str(tool.get("name", ""))):
            raise Refused(f"tools.{index}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'")
        if (tool.get("input_schema") or {}).get("type") != "object":
            raise Refused(f"tools.{index}.input_schema.type: Input should be 'object'")
    breakpoints = sum("cache_control" in t for t in tools)
    system = body.get("system")
    for block in system if isinstance(system, list) else ():
        breakpoints += "cache_control" in block
        if block.get("type") != "text" or not block.get("text"):
            raise Refused("system: text content blocks must be non-empty")
    thinking = body.get("thinking") if isinstance(body.get("thinking"), dict) else None
    thinking_on = thinking is not None and thinking.get("type") in ("enabled", "adaptive")
    if thinking is not None and thinking.get("type") == "enabled":
        budget = thinking.get("budget_tokens")
        if not isinstance(budget, int) or budget < 1024:
            raise Refused("thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")
        if budget >= max_tokens:
            raise Refused("`max_tokens` must be greater than `thinking.budget_tokens`")
    if thinking_on:
        choice = (body.get("tool_choice") or {}).get("type")
        if choice in ("any", "tool"):
            raise Refused("Thinking may not be enabled when tool_choice forces tool use.")
        if "temperature" in body and body["temperature"] != 1 or "top_k" in body:
            raise Refused(
                "`temperature` and `top_k` may only be set to their defaults when thinking is enabled"
            )
    temperature = body.get("temperature")
    if temperature is not None and not 0 <= temperature <= 1:
        raise Refused("temperature: Input should be less than or equal to 1")
    for stop in body.get("stop_sequences") or ():
        if not str(stop).strip():
            raise Refused("stop_sequences: each stop sequence must contain non-whitespace")
    has_tool_blocks = False
    expected_results: list[str] = []
    for position, message in enumerate(messages):
        role = message.get("role")
        where = f"messages.{position}"
        if role not in ("user", "assistant"):
            raise Refused(f"{where}.role: Input should be 'user' or 'assistant'")
        if position == 0 and role != "user":
            raise Refused('messages: first message must use the "user" role')
        if position and messages[position - 1].get("role") == role:
            raise Refused(f'{where}: roles must alternate between "user" and "assistant"')
        blocks = _blocks_of(message.get("content"))
        if not blocks:
            raise Refused(f"{where}: all messages must have non-empty content")
        if expected_results:
            leading = []
            for block in blocks:
                if block.get("type") != "tool_result":
                    break
                leading.append(block.get("tool_use_id"))
            missing = [i for i in expected_results if i not in leading]
            if role != "user" or missing:
                raise Refused(
                    f"{where}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                    f"{', '.join(missing or expected_results)}. Each `tool_use` block must have a corresponding "
                    "`tool_result` block in the next message."
                )
        called = set(expected_results)
        expected_results = []
        for number, block in enumerate(blocks):
            kind = block.get("type")
            at = f"{where}.content.{number}"
            breakpoints += "cache_control" in block
            if kind == "text" and not block.get("text"):
                raise Refused(f"{at}: text content blocks must be non-empty")
            if kind in ("thinking", "redacted_thinking"):
                if role != "assistant":
                    raise Refused(f"{at}: thinking blocks may only be in assistant messages")
                if "cache_control" in block:
                    raise Refused(f"{at}.cache_control: thinking blocks cannot be cached directly")
                _check_signature(block, at)
            if kind == "tool_use":
                has_tool_blocks = True
                if role != "assistant":
                    raise Refused(f"{at}: tool_use blocks may only be in assistant messages")
                if not isinstance(block.get("input"), dict):
                    raise Refused(f"{at}.input: Input should be a valid dictionary")
                expected_results.append(str(block.get("id")))
            if kind == "tool_result":
                has_tool_blocks = True
                if block.get("tool_use_id") not in called:
                    raise Refused(
                        f"{at}: unexpected `tool_use_id` found in `tool_result` blocks: {block.get('tool_use_id')}. "
                        "Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                    )
                inner = block.get("content")
                for inner_block in inner if isinstance(inner, list) else ():
                    breakpoints += "cache_control" in inner_block
    if expected_results:
        raise Refused("messages: the last `tool_use` blocks have no `tool_result` after them")
    if has_tool_blocks and not tools:
        raise Refused("Requests which include `tool_use` or `tool_result` blocks must define tools.")
    if breakpoints > MAX_BREAKPOINTS:
        raise Refused(
            f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {breakpoints}."
        )
    if thinking_on:
        _check_tool_loop_thinking(messages)


def _check_tool_loop_thinking(messages: list[JSON]) -> None:
    """With thinking on, a request inside a tool loop (after the last user message that says
    more than tool results) must give back the loop's first assistant message with its
    thinking first."""
    start = 0
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message["role"] == "user" and any(
            b.get("type") != "tool_result" for b in _blocks_of(message["content"])
        ):
            start = index + 1
            break
    turn = [m for m in messages[start:] if m["role"] == "assistant"]
    if not any(b.get("type") == "tool_use" for m in turn for b in _blocks_of(m["content"])):
        return
    first = _blocks_of(turn[0]["content"])
    if first[0].get("type") not in ("thinking", "redacted_thinking"):
        raise Refused(
            f"messages.{start + 1}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
            f"`{first[0].get('type')}`. When `thinking` is enabled, a final `assistant` message must start "
            "with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks)."
        )


# -- prompt caching


def _canonical(block: Any) -> bytes:
    if isinstance(block, dict) and "cache_control" in block:
        block = {k: v for k, v in block.items() if k != "cache_control"}
    return orjson.dumps(block, option=orjson.OPT_SORT_KEYS)


def prompt_blocks(body: JSON) -> list[tuple[bytes, bool]]:
    """The prompt as Anthropic caches it: each tool, system block and message block in order,
    as (its JSON without cache_control, whether it is a breakpoint)."""
    blocks: list[tuple[bytes, bool]] = []
    for tool in body.get("tools") or ():
        blocks.append((b"tool:" + _canonical(tool), "cache_control" in tool))
    system = body.get("system")
    for block in _blocks_of(system) if system else ():
        blocks.append((b"system:" + _canonical(block), "cache_control" in block))
    for message in body.get("messages") or ():
        role = str(message.get("role")).encode()
        for block in _blocks_of(message.get("content")):
            blocks.append((role + b":" + _canonical(block), "cache_control" in block))
    return blocks


def tokens_of(data: bytes) -> int:
    return math.ceil(len(data) / BYTES_PER_TOKEN)


@dataclass
class CacheBook:
    """Cache entries (a hash of the prefix up to a breakpoint), shared by every request."""

    min_tokens: int = MIN_CACHE_TOKENS
    entries: set[bytes] = field(default_factory=set)

    def account(self, body: JSON) -> JSON:
        """This request's usage of the input, and the entries it writes."""
        blocks = prompt_blocks(body)
        hashes: list[bytes] = []
        totals: list[int] = []
        digest, total = b"", 0
        for data, _ in blocks:
            digest = hashlib.sha256(digest + data).digest()
            total += tokens_of(data)
            hashes.append(digest)
            totals.append(total)
        points = [i for i, (_, marked) in enumerate(blocks) if marked]
        read_at = -1
        for point in points:
            for j in range(point, max(point - LOOKBACK_BLOCKS, 0) - 1, -1):
                if hashes[j] in self.entries:
                    read_at = max(read_at, j)
                    break
        read = totals[read_at] if read_at >= 0 else 0
        written_to = read_at
        for point in points:
            if point > read_at and totals[point] >= self.min_tokens:
                self.entries.add(hashes[point])
                written_to = max(written_to, point)
        written = (totals[written_to] if written_to >= 0 else 0) - read
        return {
            "input_tokens": total - read - written,
            "cache_creation_input_tokens": written,
            "cache_read_input_tokens": read,
        }


# -- the server


@dataclass
class Recorded:
    body: JSON
    headers: dict[str, str]
    path: str
    usage: JSON | None = None  # the input usage reported (None: refused)


class FakeMessagesUpstream:
    def __init__(
        self,
        script: Script = (),
        *,
        models: Sequence[JSON | str] = ("claude-sonnet-4-5",),
        api_key: str | None = None,
        min_cache_tokens: int = MIN_CACHE_TOKENS,
    ) -> None:
        self._script: deque[Reply] | None = None
        self._answer: Callable[[JSON], Reply] | None = None
        if callable(script):
            self._answer = script
        else:
            self._script = deque(script)
        self.models = [m if isinstance(m, dict) else model_entry(m) for m in models]
        self.api_key = api_key
        self.cache = CacheBook(min_tokens=min_cache_tokens)
        self.requests: list[Recorded] = []
        self.refusals: list[str] = []
        self.disconnects = 0

    @property
    def bodies(self) -> list[JSON]:
        return [r.body for r in self.requests]

    def add(self, *replies: Reply) -> None:
        assert self._script is not None, "a callable script takes no replies"
        self._script.extend(replies)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        raw = await read_body(receive)
        if raw is None:
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        path, method = scope["path"], scope["method"]
        if self.api_key is not None and headers.get("x-api-key") != self.api_key:
            reply: Reply = anthropic_error(401, "authentication_error", "invalid x-api-key")
            await self._error(send, reply)
            return
        if method == "GET" and path.endswith("/models"):
            listing = {"data": self.models, "has_more": False, "first_id": None, "last_id": None}
            await _send(send, 200, orjson.dumps(listing))
            return
        if method == "GET" and "/models/" in path:
            wanted = path.rsplit("/", 1)[-1]
            found = next((m for m in self.models if m["id"] == wanted), None)
            if found is None:
                await self._error(send, anthropic_error(404, "not_found_error", f"model: {wanted}"))
            else:
                await _send(send, 200, orjson.dumps(found))
            return
        if method != "POST" or not path.endswith("/messages"):
            await self._error(send, anthropic_error(404, "not_found_error", "Not Found"))
            return
        body = orjson.loads(raw)
        recorded = Recorded(body, headers, path)
        self.requests.append(recorded)
        if not headers.get("anthropic-version"):
            await self._error(
                send, anthropic_error(400, "invalid_request_error", "anthropic-version: header is required")
            )
            return
        try:
            validate(body)
        except Refused as exc:
            self.refusals.append(str(exc))
            await self._error(send, anthropic_error(400, "invalid_request_error", str(exc)))
            return
        reply = self._next(body)
        if isinstance(reply, ErrorReply):
            await self._error(send, reply)
            return
        recorded.usage = self.cache.account(body)
        await self._stream(reply, body, recorded.usage, send)

    def _next(self, body: JSON) -> Reply:
        if self._answer is not None:
            try:
                return self._answer(body)
            except Exception as exc:  # a broken script fails the test loudly
                return anthropic_error(500, "api_error", f"script raised {exc!r}")
        assert self._script is not None
        if not self._script:
            return anthropic_error(500, "api_error", "script exhausted")
        return self._script.popleft()

    async def _error(self, send: Send, reply: ErrorReply) -> None:
        raw = reply.body if isinstance(reply.body, bytes) else orjson.dumps(reply.body)
        await _send(send, reply.status, raw, reply.headers)

    async def _stream(self, reply: MessageReply, body: JSON, usage: JSON, send: Send) -> None:
        thinking = body.get("thinking")
        omitted = isinstance(thinking, dict) and thinking.get("display") == "omitted"
        events = message_events(reply, str(body["model"]), usage, omitted=omitted)
        await send({
            "type": "http.response.start", "status": reply.status,
            "headers": [(b"content-type", b"text/event-stream; charset=utf-8")],
        })  # fmt: skip
        try:
            for event in events:
                await send({"type": "http.response.body", "body": _frame(event), "more_body": True})
                await asyncio.sleep(0)
            await send({"type": "http.response.body", "body": b"", "more_body": reply.cut})
        except OSError:
            self.disconnects += 1


def model_entry(model: str, *, max_input_tokens: int = 200_000, max_tokens: int = 64_000) -> JSON:
    """A model as Anthropic's `GET /v1/models` lists it."""
    return {
        "type": "model", "id": model, "display_name": model, "created_at": "2025-09-29T00:00:00Z",
        "max_input_tokens": max_input_tokens, "max_tokens": max_tokens,
    }  # fmt: skip


def _frame(event: JSON) -> bytes:
    return b"event: " + event["type"].encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


async def _send(send: Send, status: int, body: bytes, headers: Mapping[str, str] | None = None) -> None:
    raw = [(b"content-type", b"application/json")] + [
        (k.encode(), v.encode()) for k, v in (headers or {}).items()
    ]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), max(1, size))] or [""]


def message_events(reply: MessageReply, model: str, usage: JSON, *, omitted: bool = False) -> list[JSON]:
    """The events of one streamed message, as Anthropic sends them (`omitted`: the request asked
    for `thinking.display: "omitted"`: thinking blocks without their text)."""
    message_id = f"msg_{next(_IDS):06d}fake"
    start_usage = {**usage, "output_tokens": 1}
    message = {
        "id": message_id, "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": start_usage,
    }  # fmt: skip
    events: list[JSON] = [{"type": "message_start", "message": message}, {"type": "ping"}]
    output_chars = 0
    size = reply.chunk_chars
    for index, block in enumerate(reply.blocks):
        if isinstance(block, Thinking) and block.redacted:
            events.append({"type": "content_block_start", "index": index,
                           "content_block": {"type": "redacted_thinking", "data": redacted_data(block.text)}})  # fmt: skip
        elif isinstance(block, Thinking):
            events.append({"type": "content_block_start", "index": index,
                           "content_block": {"type": "thinking", "thinking": "", "signature": ""}})  # fmt: skip
            for piece in _pieces(block.text, size) if not omitted else ():
                events.append({"type": "content_block_delta", "index": index,
                               "delta": {"type": "thinking_delta", "thinking": piece}})  # fmt: skip
            signature = sign_omitted(block.text) if omitted else sign(block.text)
            events.append({"type": "content_block_delta", "index": index,
                           "delta": {"type": "signature_delta", "signature": signature}})  # fmt: skip
            output_chars += len(block.text)
        elif isinstance(block, Text):
            events.append({"type": "content_block_start", "index": index,
                           "content_block": {"type": "text", "text": ""}})  # fmt: skip
            for piece in _pieces(block.text, size):
                events.append({"type": "content_block_delta", "index": index,
                               "delta": {"type": "text_delta", "text": piece}})  # fmt: skip
            output_chars += len(block.text)
        else:
            events.append({"type": "content_block_start", "index": index,
                           "content_block": {"type": "tool_use", "id": block.id, "name": block.name, "input": {}}})  # fmt: skip
            arguments = orjson.dumps(block.input).decode()
            for piece in _pieces(arguments, size):
                events.append({"type": "content_block_delta", "index": index,
                               "delta": {"type": "input_json_delta", "partial_json": piece}})  # fmt: skip
            output_chars += len(arguments)
        events.append({"type": "content_block_stop", "index": index})
    if reply.error is not None:
        return [*events, {"type": "error", "error": reply.error}]
    if reply.cut:
        return events
    stop_reason = reply.stop_reason or (
        "tool_use" if any(isinstance(b, ToolUse) for b in reply.blocks) else "end_turn"
    )
    delta = {"stop_reason": stop_reason, "stop_sequence": reply.stop_sequence}
    events.append(
        {"type": "message_delta", "delta": delta, "usage": {"output_tokens": max(1, output_chars // 4)}}
    )
    events.append({"type": "message_stop"})
    return events
