"""The ASGI app: routes, request limits, SSE delivery, error mapping, client disconnects.

A raw ASGI app rather than a framework: the gateway has a handful of routes and its cost per
streamed event is the product, so nothing sits between uvicorn and the translator.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import orjson

from codexgate.backends.chat import ChatBackend, ChatCall
from codexgate.backends.server_info import fetch_json, model_entries
from codexgate.errors import (
    Code,
    GatewayError,
    InvalidRequest,
    NotFound,
    RateLimited,
    RequestTooLarge,
)
from codexgate.redact import Redactor
from codexgate.routing import Router
from codexgate.server.access import Exchange
from codexgate.server.guard import SHOW_DETAILS, Guard
from codexgate.translate.stream import Event
from codexgate.wire.responses import decode_json_body, parse_request
from codexgate.wire.sse import encode_events

log = logging.getLogger("codexgate.server")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

_JSON_HEADERS = [(b"content-type", b"application/json")]
_SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # proxies must not buffer the stream
]
_TERMINAL = frozenset(("response.completed", "response.failed", "response.incomplete"))


class ClientGone(Exception):
    """The client disconnected before the answer was complete."""


async def send_json(
    send: Send, status: int, body: Any, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    await send({"type": "http.response.start", "status": status, "headers": _JSON_HEADERS + (headers or [])})
    await send({"type": "http.response.body", "body": orjson.dumps(body)})


async def send_error(send: Send, error: GatewayError) -> None:
    headers = []
    if isinstance(error, RateLimited) and error.retry_after is not None:
        headers.append((b"retry-after", str(max(1, round(error.retry_after))).encode()))
    if error.status in (408, 413):
        headers.append((b"connection", b"close"))  # the rest of the body is not read
    await send_json(send, error.status, error.to_body(), headers)


class GatewayApp:
    def __init__(
        self,
        router: Router[ChatBackend],
        *,
        max_body_bytes: int,
        on_startup: Callable[[], Awaitable[None]] | None = None,
        on_shutdown: Callable[[], Awaitable[None]] | None = None,
        on_no_upstream: Callable[[], Awaitable[None]] | None = None,
        guard: Guard | None = None,
        redactor: Redactor | None = None,
        body_timeout: float | None = None,
    ) -> None:
        self.router = router
        self.max_body_bytes = max_body_bytes
        self.guard = guard
        self.redactor = redactor or Redactor()
        self.body_timeout = body_timeout
        self._on_startup = on_startup
        self._on_shutdown = on_shutdown
        self._on_no_upstream = on_no_upstream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "websocket":
            await self._refuse_websocket(scope, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    # -- lifespan

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    if self._on_startup:
                        await self._on_startup()
                except Exception as exc:
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._on_shutdown:
                    await self._on_shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    # -- routing

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.guard is not None:
            guarded = await self.guard.http(scope, send)
            if guarded is None:
                return  # refused, or a CORS preflight answered
            send = guarded
        path: str = scope["path"]
        method: str = scope["method"]
        if path.startswith("/v1/"):
            path = path[3:]
        try:
            if path == "/responses":
                if method != "POST":
                    raise InvalidRequest(
                        "Use POST for /v1/responses.", code=Code.METHOD_NOT_ALLOWED, status=405
                    )
                await self._responses(scope, receive, send)
            elif path == "/models" and method == "GET":
                await send_json(send, 200, await self._models())
            elif path in ("/health", "/healthz") and method == "GET":
                status, health = await self._health()
                details = scope.get(SHOW_DETAILS, True)
                await send_json(send, status, health if details else {"status": health["status"]})
            else:
                raise NotFound(f"Unknown route: {method} {scope['path']}.")
        except GatewayError as exc:
            exc.message = self.redactor.redact(exc.message)  # upstream text may echo secrets
            await send_error(send, exc)
        except ClientGone:
            pass
        except Exception:
            # The last line of defence: a bug answers an OpenAI-style 500 while it still can.
            log.exception("unexpected error on %s %s", method, path)
            try:
                await send_error(send, GatewayError("internal gateway error"))
            except Exception:  # the response had started: the server closes the connection
                pass

    async def _refuse_websocket(self, scope: Scope, send: Send) -> None:
        if self.guard is not None and not await self.guard.websocket(scope, send):
            return
        # 426 makes Codex fall back to HTTP at once instead of retrying (contract §5).
        if "websocket.http.response" in scope.get("extensions", {}):
            await send(
                {
                    "type": "websocket.http.response.start",
                    "status": 426,
                    "headers": _JSON_HEADERS + [(b"upgrade", b"websocket")],
                }
            )
            body = InvalidRequest("WebSockets are not served; use HTTP.", code="upgrade_required").to_body()
            await send({"type": "websocket.http.response.body", "body": orjson.dumps(body)})
        else:
            await send({"type": "websocket.close", "code": 1008})

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes:
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > self.max_body_bytes:
                raise RequestTooLarge(f"The request body is larger than {self.max_body_bytes} bytes.")
        try:
            # A client that sends part of a body and holds the connection open is cut off.
            async with asyncio.timeout(self.body_timeout):
                return await self._receive_body(receive)
        except TimeoutError:
            raise InvalidRequest(
                f"The request body did not arrive within {self.body_timeout:g} seconds.",
                code="request_timeout",
                status=408,
            ) from None

    async def _receive_body(self, receive: Receive) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ClientGone()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise RequestTooLarge(f"The request body is larger than {self.max_body_bytes} bytes.")
            chunks.append(chunk)
            if not message.get("more_body"):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    # -- /v1/responses

    async def _responses(self, scope: Scope, receive: Receive, send: Send) -> None:
        exchange = Exchange(_header(scope, b"x-client-request-id"))
        try:
            req = parse_request(decode_json_body(await self._read_body(scope, receive)))
            exchange.model = req.model
            if not self.router.backends and self._on_no_upstream is not None:
                await self._on_no_upstream()
            route = self.router.resolve(req.model)
            exchange.upstream = route.backend.target.name
            call = route.backend.call(req, route.upstream_model)
            await _until_disconnect(receive, exchange, self._answer(call, req.stream, send, exchange))
        except GatewayError as exc:
            exchange.status, exchange.outcome = exc.status, exc.code
            raise
        except ClientGone:
            exchange.outcome = exchange.outcome or "client_gone"
            raise
        finally:
            exchange.log()

    async def _answer(self, call: ChatCall, stream: bool, send: Send, delivery: Exchange) -> None:
        await call.open()  # errors before this point are HTTP errors
        events = call.events()
        try:
            if stream:
                await _deliver_sse(events, send, delivery, self.redactor)
            else:
                await _deliver_json(events, send, delivery, self.redactor)
            async for _ in events:  # the backend drains the upstream after the terminal event
                pass
        finally:
            await events.aclose()

    async def _health(self) -> tuple[int, dict[str, Any]]:
        """Each upstream's reachability (its `/models`, asked at most every few seconds), what
        the gateway repaired or recognised on each, and the context windows learned from them.
        503 when no upstream is usable, so a monitor or load balancer sees a gateway that can
        serve nothing as down."""
        if not self.router.backends and self._on_no_upstream is not None:
            await self._on_no_upstream()
        backends = list(self.router.backends.items())
        listings = await asyncio.gather(*(backend.reachability() for _, backend in backends))
        upstreams = {
            name: {
                "base_url": _without_credentials(backend.target.base_url),
                "reachable": listing.status != 0,
                "usable": listing.cause in (None, "no_models"),
                "models": len(listing.models),
                "problem": listing.problem(),
            }
            for (name, backend), listing in zip(backends, listings, strict=True)
        }
        usable = any(u["usable"] for u in upstreams.values())
        health = {
            "status": "ok" if usable else "unavailable",
            "upstreams": upstreams,
            "counts": {name: dict(sorted(b.counts.items())) for name, b in backends},
            "context_windows": {name: b.windows.known() for name, b in backends if b.windows is not None},
        }
        return (200 if usable else 503), health

    # -- /v1/models

    async def _models(self) -> dict[str, Any]:
        names = list(self.router.models)
        for backend in self.router.backends.values():
            if not self.router.routed:
                names.extend(await _upstream_model_ids(backend))
        created = int(time.time())
        unique = list(dict.fromkeys(names))
        return {
            "object": "list",
            "data": [
                {"id": n, "object": "model", "created": created, "owned_by": "codexgate"} for n in unique
            ],
        }


def _redact_failure(event: Event, redactor: Redactor) -> None:
    """Mask secrets in a `response.failed` event's message (upstream text may echo them)."""
    error = event["response"].get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        event["response"]["error"] = {**error, "message": redactor.redact(error["message"])}


async def _deliver_sse(
    events: AsyncIterator[list[Event]], send: Send, delivery: Exchange, redactor: Redactor
) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
    delivery.status = 200
    batches = 0
    async for batch in events:
        last = batch[-1]["type"]
        if last == "response.failed":
            _redact_failure(batch[-1], redactor)
        await send({"type": "http.response.body", "body": encode_events(batch), "more_body": True})
        batches += 1
        if batches == 2:  # the first batch after response.created/in_progress
            delivery.saw_output()
        if last in _TERMINAL:
            delivery.ended_with(batch[-1])
            break
    # End the HTTP response at the terminal event; the backend may still drain the upstream.
    delivery.complete = True
    await send({"type": "http.response.body", "body": b""})


async def _deliver_json(
    events: AsyncIterator[list[Event]], send: Send, delivery: Exchange, redactor: Redactor
) -> None:
    """Non-streaming: the same events, folded into the final response object."""
    final: dict[str, Any] | None = None
    batches = 0
    async for batch in events:
        batches += 1
        if batches == 2:
            delivery.saw_output()
        last = batch[-1]
        if last["type"] in _TERMINAL:
            final = last
            break
    if final is None:
        raise GatewayError("The stream ended without a terminal event.")
    if final["type"] == "response.failed":
        _redact_failure(final, redactor)
    resource = final["response"]
    delivery.complete = True
    delivery.ended_with(final)
    delivery.status = 200
    if final["type"] == "response.failed":
        error = resource.get("error") or {}
        status = 504 if error.get("code") == Code.UPSTREAM_TIMEOUT else 502
        delivery.status = status
        await send_json(
            send,
            status,
            {
                "error": {
                    "message": error.get("message", ""),
                    "type": "server_error",
                    "param": None,
                    "code": error.get("code"),
                }
            },
        )
    else:
        await send_json(send, 200, resource)


async def _until_disconnect(receive: Receive, delivery: Exchange, work: Awaitable[None]) -> None:
    """Run the answer while listening for the client leaving; if it leaves before the response
    is complete, cancel the work, which closes the upstream request."""
    task = asyncio.ensure_future(work)

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.ensure_future(watch())
    try:
        done, _ = await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
        if task in done or delivery.complete:
            await task  # re-raises its error
            return
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        log.info("client disconnected; upstream request cancelled")
        raise ClientGone()
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _without_credentials(url: str) -> str:
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


async def _upstream_model_ids(backend: ChatBackend) -> list[str]:
    """The upstream's own model list (for a pass-through upstream); [] when it cannot tell."""
    target = backend.target
    if target.models:
        return list(target.models)
    url = target.base_url.rstrip("/") + "/models"
    status, body = await fetch_json(backend.transport, url, target.headers, target.connect_timeout)
    return [m["id"] for m in model_entries(body)] if status == 200 else []
