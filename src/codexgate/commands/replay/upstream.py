"""The fixture upstream of `codexgate replay`: it answers with what a recording
(observability/recorder.py) says the upstream answered, byte for byte and in the chunks the bytes
arrived in. In process, as the gateway's `Transport`, for a replay; over HTTP for
`codexgate replay --upstream-only`, so that a gateway under a debugger, or any client, can be
pointed at it.
"""

from __future__ import annotations

import asyncio
import socket
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import uvicorn

from codexgate import errors
from codexgate.backends.http.transport import HttpRequest, UpstreamResponse, body_bytes
from codexgate.errors import UpstreamConnectError, UpstreamError
from codexgate.observability.transcript import decode_body
from codexgate.server.asgi import Receive, Scope, Send

__all__ = ["Answers", "RecordedAnswer", "ReplayTransport", "recorded_answers", "serve_fixture"]

_NOT_RECORDED_STATUS = 404
# Framing headers describe the recorded connection, not the replayed one.
_FRAMING = frozenset(("content-length", "transfer-encoding", "connection", "content-encoding"))


@dataclass(frozen=True, slots=True)
class RecordedAnswer:
    """One upstream request of a recording and what came back."""

    method: str
    path: str  # relative to the upstream's base URL
    status: int | None  # None: no answer; `error` says what was raised instead
    headers: Mapping[str, str]
    chunks: list[bytes]
    end: str  # eof | error | cancelled | closed (backends/http/tap.py End)
    error: str | None
    error_kind: str | None
    sent: Any  # the JSON body that was sent, when it was JSON


def recorded_answers(document: Mapping[str, Any]) -> list[RecordedAnswer]:
    answers: list[RecordedAnswer] = []
    for entry in document.get("upstream_exchanges") or []:
        body = entry.get("body") or {}
        answers.append(
            RecordedAnswer(
                method=str(entry.get("method", "POST")),
                path=str(entry.get("path", "")),
                status=entry.get("status"),
                headers=dict(entry.get("response_headers") or {}),
                chunks=decode_body(entry.get("response_body")),
                end=str(entry.get("end", "eof")),
                error=entry.get("error"),
                error_kind=entry.get("error_kind"),
                sent=body.get("json") if isinstance(body, dict) else None,
            )
        )
    return answers


class Answers:
    """The recorded answers by (method, path), each consumed in order; with `cycle`, served
    again from the first once used up (a fixture server serves any number of runs)."""

    def __init__(self, answers: list[RecordedAnswer], *, cycle: bool = False) -> None:
        self._all: dict[tuple[str, str], list[RecordedAnswer]] = {}
        for answer in answers:
            self._all.setdefault((answer.method, answer.path), []).append(answer)
        self._left = {key: deque(found) for key, found in self._all.items()}
        self._cycle = cycle

    def next(self, method: str, path: str) -> RecordedAnswer | None:
        key = (method, path)
        left = self._left.get(key)
        if not left and self._cycle and key in self._all:
            left = self._left[key] = deque(self._all[key])
        return left.popleft() if left else None


def _error(kind: str | None, message: str | None) -> UpstreamError:
    """The recorded exception again (by its class name in errors.py)."""
    found = getattr(errors, kind or "", None)
    cls = found if isinstance(found, type) and issubclass(found, UpstreamError) else UpstreamConnectError
    return cls(message or "the recorded upstream connection broke")


class ReplayTransport:
    """A `Transport` answering from a recording. `stall`: what a recorded answer the gateway
    abandoned while waiting raises at its end (the recorded timeout: a replay does not wait it
    out). `sent` collects what the gateway sent: (method, path, body)."""

    def __init__(self, base_url: str, answers: Answers, stall: UpstreamError | None = None) -> None:
        self._base = base_url.rstrip("/")
        self._answers = answers
        self._stall = stall
        self.sent: list[tuple[str, str, bytes | None]] = []

    async def open(self, request: HttpRequest) -> UpstreamResponse:
        """The recorded answer to the next such request (the connect timeout plays no part)."""
        method, url, body = request.method, request.url, body_bytes(request.body)
        path = url[len(self._base) :] if url.startswith(self._base) else url
        self.sent.append((method, path, body))
        answer = self._answers.next(method, path)
        if answer is None:
            return _Response(
                _NOT_RECORDED_STATUS, {"content-type": "application/json"}, [_not_recorded(method, path)]
            )
        if answer.status is None:
            raise _error(answer.error_kind, answer.error)
        failure: UpstreamError | None = None
        if answer.end == "error":
            failure = _error(answer.error_kind, answer.error)
        elif answer.end == "cancelled":
            failure = self._stall
        return _Response(answer.status, answer.headers, answer.chunks, failure)

    async def aclose(self) -> None:
        pass


class _Response:
    def __init__(
        self,
        status: int,
        headers: Mapping[str, str],
        chunks: list[bytes],
        failure: UpstreamError | None = None,
    ) -> None:
        self.status = status
        self.headers: Mapping[str, str] = {k: v for k, v in headers.items() if k.lower() not in _FRAMING}
        self._chunks = chunks
        self._failure = failure

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk
        if self._failure is not None:
            raise self._failure

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.iter_chunks()])

    async def rest(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def aclose(self) -> None:
        pass


def _not_recorded(method: str, path: str) -> bytes:
    message = f"{method} {path} is not in the recording"
    return orjson.dumps({"error": {"message": message, "type": "not_found", "param": None, "code": None}})


def fixture_app(answers: Answers, base_path: str) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """The recording as an ASGI app under `base_path` (e.g. `/v1`). An answer recorded as
    broken or abandoned ends normally here: an HTTP server cannot replay a timeout."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        more = True
        while more:  # the request body: not compared here, only read
            message = await receive()
            more = message.get("more_body", False) and message["type"] == "http.request"
        path: str = scope["path"]
        path = path[len(base_path) :] if base_path and path.startswith(base_path) else path
        answer = answers.next(scope["method"], path)
        if answer is None or answer.status is None:
            status, headers, chunks = (
                404,
                {"content-type": "application/json"},
                [_not_recorded(scope["method"], path)],
            )
        else:
            status, headers, chunks = answer.status, dict(answer.headers), answer.chunks
        raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()
               if k.lower() not in _FRAMING]  # fmt: skip
        await send({"type": "http.response.start", "status": status, "headers": raw})
        for chunk in chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    return app


def serve_fixture(answers: Answers, base_path: str, port: int, announce: Callable[[str], None]) -> None:
    """Serve the recording on 127.0.0.1:`port` (0: any free port) until interrupted; `announce`
    gets the base URL to give a gateway as its upstream."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(100)  # before the address is announced: a client may connect at once
    host, bound = sock.getsockname()[:2]
    config = uvicorn.Config(fixture_app(answers, base_path), lifespan="off", log_level="warning")
    server = uvicorn.Server(config)
    announce(f"http://{host}:{bound}{base_path}")
    server.run(sockets=[sock])
