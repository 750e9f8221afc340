"""A scripted raw Responses server (`POST .../responses`), as an ASGI app, and helpers to write
Responses event streams, for the Responses backend's tests.

    upstream = ScriptedResponses([sse_reply(text_events("Hello")), ErrorAnswer(503, {...})])

Each POST is recorded in `requests` (decoded bodies) and answered by the next reply: an
`Answer` (raw body pieces, one ASGI message each; `cut` ends without finishing the body;
`hang_after` stops sending after that many pieces until the client leaves) or an
`ErrorAnswer` (a status and a JSON or raw body). An exhausted script answers 500, so a test
fails loudly. `GET .../models` lists `models`. Clients that leave are counted in `disconnects`
(and set `left`, for a test to wait on).
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from codexgate.server.asgi import Receive, Scope, Send

from ._exchange import read_body

JSON = dict[str, Any]


@dataclass
class Answer:
    pieces: list[bytes]
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=lambda: {"content-type": "text/event-stream"})
    cut: bool = False
    hang_after: int | None = None  # pieces sent before going silent (until the client leaves)


@dataclass
class ErrorAnswer:
    status: int
    body: JSON | bytes
    headers: Mapping[str, str] = field(default_factory=dict)


Reply = Answer | ErrorAnswer


def sse(events: Iterable[JSON], *, done: bool = False) -> list[bytes]:
    """Events as event-stream pieces (`event:` and `data:` lines, as OpenAI sends them)."""
    pieces = [b"event: " + e["type"].encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n" for e in events]
    return pieces + [b"data: [DONE]\n\n"] if done else pieces


def sse_reply(events: Iterable[JSON], **options: Any) -> Answer:
    return Answer(sse(events), **options)


def json_reply(body: JSON, status: int = 200) -> Answer:
    return Answer([orjson.dumps(body)], status=status, headers={"content-type": "application/json"})


_RESPONSE_IDS = itertools.count(1)


def response_resource(status: str, output: list[JSON], usage: JSON | None = None, **extra: Any) -> JSON:
    resource: JSON = {
        "id": f"resp_up{next(_RESPONSE_IDS)}",
        "object": "response",
        "created_at": 1764075745,
        "status": status,
        "error": None,
        "incomplete_details": None,
        "model": "up-model",
        "output": output,
        "usage": usage,
    }
    resource.update(extra)
    return resource


def usage(input_tokens: int, output_tokens: int, cached: int = 0) -> JSON:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }


def text_events(
    *pieces: str, item_id: str = "msg_up1", end: str | None = "completed", at: int = 0
) -> list[JSON]:
    """A message streamed in `pieces`, then (unless `end` is None) the terminal event."""
    text = "".join(pieces)
    events: list[JSON] = [{"type": "response.created", "response": response_resource("in_progress", [])}]
    added = {"id": item_id, "type": "message", "status": "in_progress", "role": "assistant", "content": []}
    events.append({"type": "response.output_item.added", "output_index": at, "item": added})
    for piece in pieces:
        events.append(
            {"type": "response.output_text.delta", "item_id": item_id, "output_index": at, "content_index": 0,
             "delta": piece}
        )  # fmt: skip
    part = {"type": "output_text", "text": text, "annotations": []}
    done = {**added, "status": "completed", "content": [part]}
    events.append({"type": "response.output_item.done", "output_index": at, "item": done})
    if end == "completed":
        events.append(
            {"type": "response.completed", "response": response_resource("completed", [done], usage(20, 5))}
        )
    return events


class ScriptedResponses:
    def __init__(self, script: Iterable[Reply] = (), *, models: Iterable[str] = ("up-model",)) -> None:
        self.script: deque[Reply] = deque(script)
        self.models = list(models)
        self.requests: list[JSON] = []
        self.paths: list[str] = []
        self.disconnects = 0
        self.left = asyncio.Event()  # set when a client leaves before its answer ended

    def add(self, *replies: Reply) -> None:
        self.script.extend(replies)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        raw = await read_body(receive)
        if raw is None:
            return
        path = scope["path"]
        self.paths.append(path)
        if scope["method"] == "GET" and path.endswith("/models"):
            body = {
                "object": "list",
                "data": [{"id": m, "object": "model", "owned_by": "me"} for m in self.models],
            }
            await self._send(send, 200, orjson.dumps(body), {"content-type": "application/json"})
            return
        if not path.endswith("/responses"):
            await self._send(
                send, 404, b'{"error":{"message":"unknown path"}}', {"content-type": "application/json"}
            )
            return
        self.requests.append(orjson.loads(raw))
        reply = (
            self.script.popleft()
            if self.script
            else ErrorAnswer(500, {"error": {"message": "script exhausted"}})
        )
        if isinstance(reply, ErrorAnswer):
            raw = reply.body if isinstance(reply.body, bytes) else orjson.dumps(reply.body)
            await self._send(send, reply.status, raw, {"content-type": "application/json", **reply.headers})
            return
        await self._stream(reply, receive, send)

    async def _stream(self, reply: Answer, receive: Receive, send: Send) -> None:
        headers = [(k.encode(), v.encode()) for k, v in reply.headers.items()]
        await send({"type": "http.response.start", "status": reply.status, "headers": headers})
        try:
            for index, piece in enumerate(reply.pieces):
                if reply.hang_after is not None and index == reply.hang_after:
                    await self._until_disconnect(receive)
                    return
                last = index == len(reply.pieces) - 1
                await send({"type": "http.response.body", "body": piece, "more_body": reply.cut or not last})
                await asyncio.sleep(0)  # a real server's pieces take loop turns to arrive
            if reply.hang_after is not None and reply.hang_after >= len(reply.pieces):
                await self._until_disconnect(receive)
                return
            if not reply.pieces and not reply.cut:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            self._client_left()

    async def _until_disconnect(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self._client_left()

    def _client_left(self) -> None:
        self.disconnects += 1
        self.left.set()

    @staticmethod
    async def _send(send: Send, status: int, body: bytes, headers: Mapping[str, str]) -> None:
        raw_headers = [(k.encode(), v.encode()) for k, v in headers.items()]
        await send({"type": "http.response.start", "status": status, "headers": raw_headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})
