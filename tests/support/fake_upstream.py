"""A scripted fake OpenAI Chat Completions server, as a raw ASGI app.

Raw ASGI (stdlib + orjson, no framework) so the same object runs in-process under
`ASGIUpstreamTransport` for fast unit tests and under uvicorn (`servers.run_asgi_server`) for
end-to-end tests and benchmarks, and so nothing between the bytes and the gateway hides what a
real upstream does on the wire.

    upstream = FakeUpstream([text_reply("Hello"), tool_calls_reply([("shell", '{"cmd":"ls"}')])])

Each `POST .../chat/completions` is recorded in `upstream.requests` and answered by the next
reply of the script: a list consumed in order, or a callable `(request_body) -> Reply` for
conversations whose next turn depends on the request. A `ChatReply` is streamed as
`chat.completion.chunk` SSE events when the request says `"stream": true`, and returned as one
`chat.completion` JSON body otherwise. An exhausted script, or a callable that raises, answers
500 with a JSON error that says so, so a test fails loudly instead of hanging.

A client that goes away mid-reply (`http.disconnect`, or `send` raising `OSError`) stops the
reply and counts in `upstream.disconnects`: that is how tests prove the gateway cancelled an
upstream generation. The object holds no event-loop state, so it may be served from another
thread; `wait_for_*` poll with a bound, for that case.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import secrets
import time
from collections import deque
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import orjson

from codexgate.server.asgi import Message, Receive, Scope, Send

from ._exchange import read_body

JSON = dict[str, Any]

SYSTEM_FINGERPRINT = "fp_fake"
DONE_EVENT = b"data: [DONE]\n\n"


# -- replies -------------------------------------------------------------------------------------


def new_call_id() -> str:
    """A tool-call id shaped like OpenAI's (`call_` + 24 url-safe characters)."""
    return "call_" + secrets.token_urlsafe(18)


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # the JSON text, exactly as streamed
    id: str = field(default_factory=new_call_id)


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    reasoning_tokens: int = 0

    def to_json(self) -> JSON:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": self.reasoning_tokens,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }


@dataclass
class ChatReply:
    """An assistant turn: optional reasoning, then text, then tool calls.

    `usage=True` derives token counts from the request and the reply (about 4 characters per
    token); `False` sends none, even when the request asked (as some providers do).
    `stall_after_chunks` / `stall_seconds`: after that many SSE events (negative: all but that
    many, -1 going silent before [DONE]), go silent for that long, then finish. `cut`: after
    the content, close without finish_reason, usage or [DONE].
    Non-streamed, a stall delays the whole answer and a cut truncates the JSON body.
    """

    text: str | None = None
    reasoning: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = "stop"
    usage: Usage | bool = True
    chunk_chars: int = 4
    args_chunk_chars: int = 8
    model: str | None = None  # default: echo the request's model
    delay_between_chunks: float = 0.0
    stall_after_chunks: int | None = None
    stall_seconds: float = 0.0
    cut: bool = False
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass
class ErrorReply:
    """A non-2xx answer; a dict body is sent as JSON."""

    status: int
    body: JSON | bytes
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass
class RawReply:
    """Arbitrary body bytes, one ASGI message per item; `cut` ends without finishing."""

    chunks: list[bytes]
    status: int = 200
    headers: Mapping[str, str] = field(
        default_factory=lambda: {"content-type": "text/event-stream; charset=utf-8"}
    )
    delay_between_chunks: float = 0.0
    cut: bool = False


Reply = ChatReply | ErrorReply | RawReply
Script = Iterable[Reply] | Callable[[JSON], Reply]


def text_reply(
    text: str,
    *,
    chunk_chars: int = 4,
    reasoning: str | None = None,
    usage: Usage | bool = True,
    finish_reason: str = "stop",
    delay_between_chunks: float = 0.0,
    model: str | None = None,
) -> ChatReply:
    """Text (reasoning first, as `delta.reasoning_content`) in `chunk_chars`-sized deltas."""
    return ChatReply(
        text=text,
        reasoning=reasoning,
        chunk_chars=chunk_chars,
        usage=usage,
        finish_reason=finish_reason,
        delay_between_chunks=delay_between_chunks,
        model=model,
    )


def tool_calls_reply(
    calls: Sequence[tuple[str, str] | tuple[str, str, str] | ToolCall],
    *,
    text: str | None = None,
    reasoning: str | None = None,
    args_chunk_chars: int = 8,
    chunk_chars: int = 4,
    usage: Usage | bool = True,
    delay_between_chunks: float = 0.0,
    model: str | None = None,
) -> ChatReply:
    """Tool calls `(name, arguments_json[, id])`, streamed as OpenAI does: per call, one delta
    with index, id, type and name (empty arguments), then argument fragments; calls get
    indexes 0, 1, ... in order; finish_reason "tool_calls". Optional text comes first."""
    tool_calls = tuple(call if isinstance(call, ToolCall) else ToolCall(*call) for call in calls)
    return ChatReply(
        text=text,
        reasoning=reasoning,
        tool_calls=tool_calls,
        finish_reason="tool_calls",
        args_chunk_chars=args_chunk_chars,
        chunk_chars=chunk_chars,
        usage=usage,
        delay_between_chunks=delay_between_chunks,
        model=model,
    )


def error_reply(status: int, body: JSON | bytes, headers: Mapping[str, str] | None = None) -> ErrorReply:
    return ErrorReply(status=status, body=body, headers=dict(headers or {}))


def openai_error(message: str, *, error_type: str = "invalid_request_error", code: str | None = None) -> JSON:
    """An OpenAI-shaped error body, for `error_reply(400, openai_error(...))`."""
    return {"error": {"message": message, "type": error_type, "param": None, "code": code}}


def cut_reply(text: str, *, chunk_chars: int = 4) -> ChatReply:
    """Streams `text`, then drops the connection: no finish_reason, no usage, no [DONE]."""
    return ChatReply(text=text, chunk_chars=chunk_chars, cut=True)


PREFILL_REFUSED = "Cannot have 2 or more assistant messages at the end of the list."


def ends_with_assistant_text(body: JSON) -> bool:
    """Whether a chat request's messages end with an assistant message that calls no tool
    (a prefill: the model would continue it)."""
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    return last.get("role") == "assistant" and not last.get("tool_calls")


def refusing_prefill(script: Callable[[JSON], Reply]) -> Callable[[JSON], Reply]:
    """`script`, behind a llama.cpp-like check: a request that ends with an assistant message
    (without tool calls) gets a 400 instead. llama.cpp continues one such message as a prefill
    and refuses two; refusing one too makes a test fail at the first bad request."""

    def answer(body: JSON) -> Reply:
        if ends_with_assistant_text(body):
            return error_reply(400, openai_error(PREFILL_REFUSED))
        return script(body)

    return answer


def stall_reply(
    text: str, stall_seconds: float, *, chunk_chars: int = 4, stall_after_chunks: int = 2
) -> ChatReply:
    """Streams the role chunk and the first text fragment (`stall_after_chunks` SSE events),
    sends nothing for `stall_seconds`, then finishes normally."""
    return ChatReply(
        text=text,
        chunk_chars=chunk_chars,
        stall_after_chunks=stall_after_chunks,
        stall_seconds=stall_seconds,
    )


def lingering(reply: ChatReply, linger: float) -> ChatReply:
    """`reply` with its `[DONE]` sent `linger` seconds after the rest (its usage chunk, where
    the turn ends, included), as a server slow to close its stream: the gateway has sent its
    terminal event and still reads the upstream's tail."""
    return replace(reply, stall_after_chunks=-1, stall_seconds=linger)


def raw_reply(
    chunks: Sequence[bytes],
    status: int = 200,
    headers: Mapping[str, str] | None = None,
    *,
    delay_between_chunks: float = 0.0,
    cut: bool = False,
) -> RawReply:
    reply = RawReply(chunks=list(chunks), status=status, delay_between_chunks=delay_between_chunks, cut=cut)
    if headers is not None:
        reply.headers = dict(headers)
    return reply


# -- rendering ----------------------------------------------------------------------------------


def _pieces(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)]


def _tokens(chars: int) -> int:
    return math.ceil(chars / 4)


def _usage_for(reply: ChatReply, request: JSON) -> Usage | None:
    if reply.usage is False:
        return None
    if isinstance(reply.usage, Usage):
        return reply.usage
    prompt_chars = len(orjson.dumps(request.get("messages", [])))
    reasoning_chars = len(reply.reasoning or "")
    completion_chars = (
        reasoning_chars
        + len(reply.text or "")
        + sum(len(c.name) + len(c.arguments) for c in reply.tool_calls)
    )
    return Usage(
        prompt_tokens=max(1, _tokens(prompt_chars)),
        completion_tokens=max(1, _tokens(completion_chars)),
        reasoning_tokens=_tokens(reasoning_chars),
    )


def _content_deltas(reply: ChatReply) -> list[JSON]:
    """The deltas before the finish chunk, in OpenAI's order."""
    deltas: list[JSON] = []
    for piece in _pieces(reply.reasoning or "", reply.chunk_chars):
        deltas.append({"reasoning_content": piece})
    for piece in _pieces(reply.text or "", reply.chunk_chars):
        deltas.append({"content": piece})
    for index, call in enumerate(reply.tool_calls):
        deltas.append(
            {
                "tool_calls": [
                    {
                        "index": index,
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": ""},
                    }
                ]
            }
        )
        for piece in _pieces(call.arguments, reply.args_chunk_chars):
            deltas.append({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    # OpenAI opens with the role: alone (content "") before text, merged into a leading call.
    if deltas and "tool_calls" in deltas[0]:
        deltas[0] = {"role": "assistant", "content": None, **deltas[0]}
    else:
        deltas.insert(0, {"role": "assistant", "content": "", "refusal": None})
    return deltas


@dataclass
class _Completion:
    id: str
    created: int
    model: str
    usage: Usage | None


def _sse(payload: JSON) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def render_stream(reply: ChatReply, request: JSON, completion: _Completion) -> list[bytes]:
    """Every SSE event of a streamed reply, [DONE] included (unless the reply is cut)."""
    include_usage = bool((request.get("stream_options") or {}).get("include_usage"))

    def chunk(delta: JSON, finish_reason: str | None = None) -> bytes:
        payload: JSON = {
            "id": completion.id,
            "object": "chat.completion.chunk",
            "created": completion.created,
            "model": completion.model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
        }
        if include_usage:
            payload["usage"] = None  # as OpenAI: null on every chunk but the last
        return _sse(payload)

    events = [chunk(delta) for delta in _content_deltas(reply)]
    if reply.cut:
        return events
    events.append(chunk({}, reply.finish_reason))
    if include_usage and completion.usage is not None:
        events.append(
            _sse(
                {
                    "id": completion.id,
                    "object": "chat.completion.chunk",
                    "created": completion.created,
                    "model": completion.model,
                    "system_fingerprint": SYSTEM_FINGERPRINT,
                    "choices": [],
                    "usage": completion.usage.to_json(),
                }
            )
        )
    events.append(DONE_EVENT)
    return events


def render_completion(reply: ChatReply, completion: _Completion) -> JSON:
    """The non-streamed `chat.completion` body."""
    content = reply.text
    if content is None and not reply.tool_calls:
        content = ""
    message: JSON = {"role": "assistant", "content": content, "refusal": None}
    if reply.reasoning:
        message["reasoning_content"] = reply.reasoning
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in reply.tool_calls
        ]
    body: JSON = {
        "id": completion.id,
        "object": "chat.completion",
        "created": completion.created,
        "model": completion.model,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": reply.finish_reason}],
    }
    if completion.usage is not None:
        body["usage"] = completion.usage.to_json()
    return body


# -- the app ------------------------------------------------------------------------------------


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: JSON
    disconnected: bool = False  # the client went away before the reply was complete


class _ClientGone(Exception):
    """`send` raised: the connection is gone."""


class _Sender:
    """Wraps `send`: turns a failing send into `_ClientGone`, remembers if the last body
    message went out (so a disconnect reported after it is not a cancellation)."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.final_started = False

    async def start(self, status: int, headers: Mapping[str, str]) -> None:
        raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        await self._call({"type": "http.response.start", "status": status, "headers": raw})

    async def body(self, data: bytes, *, more: bool) -> None:
        if not more:
            self.final_started = True
        await self._call({"type": "http.response.body", "body": data, "more_body": more})

    async def _call(self, message: Message) -> None:
        try:
            await self._send(message)
        except OSError as exc:
            raise _ClientGone from exc


def _json_headers(body: bytes, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    return {
        "content-type": "application/json",
        "content-length": str(len(body)),
        "x-request-id": "req_" + secrets.token_hex(8),
        **{k.lower(): v for k, v in (extra or {}).items()},
    }


class FakeUpstream:
    """The ASGI app (see the module docstring). What tests read:

    `requests`: every chat request, in order (`RecordedRequest`: method, path, lower-cased
    headers, parsed body, whether the client left early); `model_list_requests`;
    `disconnects`: replies abandoned because the client went away; `completed`: replies sent to
    their end (deliberate cuts included); `in_flight`: replies being sent now; `errors`: script
    problems (also answered as 500s); `remaining`: replies left in a list script.
    """

    def __init__(
        self,
        script: Script = (),
        *,
        models: Sequence[str] = ("fake-model",),
        model_fields: Mapping[str, JSON] | None = None,
        endpoints: Mapping[str, JSON] | None = None,
    ) -> None:
        """`model_fields`: extra fields per model in `/models` (e.g. vLLM's `max_model_len`);
        `endpoints`: JSON bodies for server-specific paths (`/props`, `/api/show`), any method."""
        self._responder: Callable[[JSON], Reply] | None = None
        self._queue: deque[Reply] = deque()
        if callable(script):
            self._responder = script
        else:
            self._queue.extend(script)
        self.models = list(models)
        self.model_fields = dict(model_fields or {})
        self.endpoints = dict(endpoints or {})
        self.endpoint_requests: list[str] = []
        self.requests: list[RecordedRequest] = []
        self.model_list_requests = 0
        self.disconnects = 0
        self.completed = 0  # replies sent to the end (cut replies included)
        self.in_flight = 0
        self.errors: list[str] = []  # script problems, also sent as the 500's message
        self._ids = itertools.count(1)

    # -- scripting ------------------------------------------------------------------------------

    def add(self, *replies: Reply) -> None:
        """Append to a list script."""
        if self._responder is not None:
            raise TypeError("this FakeUpstream is scripted by a callable")
        self._queue.extend(replies)

    @property
    def remaining(self) -> int:
        return len(self._queue)

    def _next_reply(self, body: JSON) -> Reply:
        if self._responder is not None:
            try:
                return self._responder(body)
            except Exception as exc:
                return self._script_error(f"script callable raised {exc!r}")
        if not self._queue:
            return self._script_error(f"script exhausted: request #{len(self.requests)} has no reply left")
        return self._queue.popleft()

    def _script_error(self, message: str) -> ErrorReply:
        message = f"fake upstream: {message}"
        self.errors.append(message)
        return error_reply(
            500, openai_error(message, error_type="fake_upstream_error", code="fake_upstream_script")
        )

    # -- waiting (from tests; works across threads and loops) -----------------------------------

    async def wait_for(
        self, predicate: Callable[[], bool], *, timeout: float = 5.0, what: str = "condition"
    ) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"fake upstream: timed out after {timeout}s waiting for {what}")
            await asyncio.sleep(0.002)

    async def wait_for_disconnects(self, n: int = 1, *, timeout: float = 5.0) -> None:
        await self.wait_for(lambda: self.disconnects >= n, timeout=timeout, what=f"{n} disconnect(s)")

    async def wait_for_requests(self, n: int = 1, *, timeout: float = 5.0) -> None:
        await self.wait_for(lambda: len(self.requests) >= n, timeout=timeout, what=f"{n} request(s)")

    async def wait_idle(self, *, timeout: float = 5.0) -> None:
        """Until no reply is being sent."""
        await self.wait_for(lambda: self.in_flight == 0, timeout=timeout, what="no reply in flight")

    # -- ASGI -----------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        if body is None:
            return  # the client left before sending the whole request
        method: str = scope["method"]
        path: str = scope["path"]
        sender = _Sender(send)
        try:
            if path in self.endpoints:
                self.endpoint_requests.append(path)
                await self._send_json(sender, 200, self.endpoints[path])
            elif path.endswith("/chat/completions"):
                if method != "POST":
                    await self._send_error(sender, 405, f"method {method} not allowed")
                else:
                    await self._chat(scope, body, receive, sender)
            elif path.endswith("/v1/models") or path == "/models":
                if method != "GET":
                    await self._send_error(sender, 405, f"method {method} not allowed")
                else:
                    self.model_list_requests += 1
                    await self._send_json(sender, 200, self._models_body())
            else:
                await self._send_error(sender, 404, f"unknown path {path}")
        except _ClientGone:
            self.disconnects += 1

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

    def _models_body(self) -> JSON:
        return {
            "object": "list",
            "data": [
                {
                    "id": m,
                    "object": "model",
                    "created": 1700000000,
                    "owned_by": "fake",
                    **self.model_fields.get(m, {}),
                }
                for m in self.models
            ],
        }

    async def _send_json(
        self, sender: _Sender, status: int, payload: JSON, headers: Mapping[str, str] | None = None
    ) -> None:
        data = orjson.dumps(payload)
        await sender.start(status, _json_headers(data, headers))
        await sender.body(data, more=False)

    async def _send_error(self, sender: _Sender, status: int, message: str) -> None:
        await self._send_json(sender, status, openai_error(message))

    async def _chat(self, scope: Scope, raw: bytes, receive: Receive, sender: _Sender) -> None:
        try:
            body = orjson.loads(raw)
            if not isinstance(body, dict):
                raise ValueError("not an object")
        except ValueError:
            await self._send_error(sender, 400, "We could not parse the JSON body of your request.")
            return
        record = RecordedRequest(
            method=scope["method"],
            path=scope["path"],
            headers={k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]},
            body=body,
        )
        self.requests.append(record)
        reply = self._next_reply(body)

        self.in_flight += 1
        try:
            completed = await _race_disconnect(self._serve(reply, body, sender), receive, sender)
        except asyncio.CancelledError:
            # The server or transport aborted the request: to the model, the client is gone.
            record.disconnected = True
            self.disconnects += 1
            raise
        finally:
            self.in_flight -= 1
        if completed:
            self.completed += 1
        else:
            record.disconnected = True
            self.disconnects += 1

    async def _serve(self, reply: Reply, request: JSON, sender: _Sender) -> None:
        if isinstance(reply, ErrorReply):
            if isinstance(reply.body, bytes):
                data = reply.body
                headers = {"content-type": "text/plain", "content-length": str(len(data))}
                headers.update({k.lower(): v for k, v in reply.headers.items()})
                await sender.start(reply.status, headers)
                await sender.body(data, more=False)
            else:
                await self._send_json(sender, reply.status, reply.body, reply.headers)
        elif isinstance(reply, RawReply):
            await sender.start(reply.status, reply.headers)
            await _send_events(sender, reply.chunks, reply.delay_between_chunks, cut=reply.cut)
        else:
            await self._serve_chat(reply, request, sender)

    async def _serve_chat(self, reply: ChatReply, request: JSON, sender: _Sender) -> None:
        completion = _Completion(
            id=f"chatcmpl-fake{next(self._ids):06d}{secrets.token_hex(6)}",
            created=int(time.time()),
            model=reply.model or str(request.get("model") or "fake-model"),
            usage=_usage_for(reply, request),
        )
        if not request.get("stream"):
            if reply.stall_seconds:
                await asyncio.sleep(reply.stall_seconds)
            data = orjson.dumps(render_completion(reply, completion))
            await sender.start(reply.status, _json_headers(data, reply.headers))
            if reply.cut:
                await sender.body(data[: len(data) // 2], more=True)
            else:
                await sender.body(data, more=False)
            return
        headers = {
            "content-type": "text/event-stream; charset=utf-8",
            "cache-control": "no-cache",
            "x-request-id": "req_" + secrets.token_hex(8),
            **{k.lower(): v for k, v in reply.headers.items()},
        }
        await sender.start(reply.status, headers)
        events = render_stream(reply, request, completion)
        stall_after = reply.stall_after_chunks
        if stall_after is not None and stall_after < 0:
            stall_after += len(events)
        await _send_events(
            sender,
            events,
            reply.delay_between_chunks,
            cut=reply.cut,
            stall_after=stall_after,
            stall_seconds=reply.stall_seconds,
        )


async def _send_events(
    sender: _Sender,
    events: Sequence[bytes],
    delay: float,
    *,
    cut: bool,
    stall_after: int | None = None,
    stall_seconds: float = 0.0,
) -> None:
    """One ASGI body message per event. Between events it always yields to the loop, as a
    real token stream would, so a disconnect is noticed even when `delay` is 0."""
    last = len(events) - 1
    for i, event in enumerate(events):
        if i:
            await asyncio.sleep(delay)
        if stall_after is not None and i == stall_after:
            await asyncio.sleep(stall_seconds)
        await sender.body(event, more=cut or i < last)
    if not events and not cut:
        await sender.body(b"", more=False)
    # cut: return without more_body=False; the server closes the connection mid-body.


async def _race_disconnect(reply: Coroutine[Any, Any, None], receive: Receive, sender: _Sender) -> bool:
    """Run the reply coroutine until done or until the client disconnects.

    Returns True when the reply went out to the end (or was deliberately cut), False when the
    client went away first; the reply task is cancelled then.
    """
    sending: asyncio.Task[None] = asyncio.ensure_future(reply)
    watching: asyncio.Task[Literal[True]] = asyncio.ensure_future(_wait_disconnect(receive))
    try:
        await asyncio.wait({sending, watching}, return_when=asyncio.FIRST_COMPLETED)
        if not sending.done() and sender.final_started:
            # Servers report a disconnect as soon as the response is complete: not a cancel.
            await asyncio.wait({sending})
    finally:
        for task in (sending, watching):
            task.cancel()
        await asyncio.wait({sending, watching})
    if sending.cancelled():
        return False
    error = sending.exception()
    if isinstance(error, _ClientGone):
        return False
    if error is not None:
        raise error
    return True


async def _wait_disconnect(receive: Receive) -> Literal[True]:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return True
