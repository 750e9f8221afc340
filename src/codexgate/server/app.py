"""The ASGI app: the route table, lifespan, request bodies and limits, health and the model
list.

A raw ASGI app rather than a framework: the gateway has a handful of routes and its cost per
streamed event is the product, so nothing sits between uvicorn and the translator. Each face
(server/faces/: Responses, Chat Completions) reads its requests into the canonical request and
chooses the encoder of its answers; one handler serves them all: route, call the backend,
deliver (server/delivery.py). Errors become HTTP in server/http_errors.py; backends are reached
through backends/base.py only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

import orjson

from codexgate import timeouts
from codexgate.backends.base import Backend
from codexgate.errors import (
    Code,
    GatewayError,
    InvalidRequest,
    NotFound,
    RequestTooLarge,
    UpstreamConnectError,
)
from codexgate.redact import Redactor
from codexgate.routing.router import Router
from codexgate.server.asgi import App, Receive, Scope, Send
from codexgate.server.delivery import ClientGone, Face, http_output, until_disconnect
from codexgate.server.exchange import Exchange
from codexgate.server.faces.messages import MessagesFace
from codexgate.server.faces.responses import ResponsesFace
from codexgate.server.guard import API_KEY_NAME, SHOW_DETAILS, Guard
from codexgate.server.http_errors import JSON_HEADERS, ErrorShape, openai_shape, send_error, send_json
from codexgate.server.keys.admission import Admission
from codexgate.server.keys.usage import UsageRoute
from codexgate.server.observe import Observers
from codexgate.server.response import Responder
from codexgate.server.response_routes import ResourceHandler, StoredResponses
from codexgate.server.state import ResponseState
from codexgate.server.stopping import Streams
from codexgate.server.websocket import ResponsesSockets, SocketLimits
from codexgate.store.meter import MemoryMeter

log = logging.getLogger("codexgate.server")

Handler = App

__all__ = ["ClientGone", "GatewayApp", "send_error", "send_json"]


class GatewayApp:
    def __init__(
        self,
        router: Router[Backend],
        *,
        max_body_bytes: int,
        on_startup: Callable[[], Awaitable[None]] | None = None,
        on_shutdown: Callable[[], Awaitable[None]] | None = None,
        on_no_upstream: Callable[[], Awaitable[None]] | None = None,
        guard: Guard | None = None,
        redactor: Redactor | None = None,
        body_timeout: float | None = None,
        faces: dict[str, Face] | None = None,
        state: ResponseState | None = None,
        socket_limits: SocketLimits | None = None,
        observers: Observers | None = None,
        health_details: Callable[[], dict[str, Any]] | None = None,
        admission: Admission | None = None,
    ) -> None:
        """`faces`: the faces by the path they serve under /v1 (POST), e.g.
        {"/responses": ResponsesFace()}. `health_details`: more sections for /healthz (the
        embedded model's state). `admission`: what each API key may spend (server/keys/admission.py)."""
        self.router = router
        self.faces = faces if faces is not None else {"/responses": ResponsesFace()}
        self.max_body_bytes = max_body_bytes
        self.guard = guard
        self.redactor = redactor or Redactor()
        self.body_timeout = body_timeout
        # Stored responses, previous_response_id, item_reference, compaction (server/state.py).
        self.state = state or ResponseState(None)
        # Metrics, traces, the recorder, the live view (server/observe.py).
        self.observers = observers or Observers()
        # Each key's limits, admitted before a request is routed; its usage (server/keys/usage.py).
        self.admission = admission or Admission(MemoryMeter(), shared=False)
        self._on_startup = on_startup
        self._on_shutdown = on_shutdown
        self._on_no_upstream = on_no_upstream
        self._health_details = health_details
        # Called when the server begins to stop, before it waits for open responses: streams
        # that never end on their own (the live view's) end then (server/serve.py).
        self.on_stopping: list[Callable[[], None]] = []
        # The responses being delivered, which a stopping server lets finish and then ends
        # with a terminal event (server/stopping.py).
        self.streams = Streams()
        self.on_stopping.append(self.streams.begin)
        # One response's life, shared by every face and transport (server/response.py).
        self.responder = Responder(
            router, self.state, self.observers, self.admission, self.streams, self.redactor, on_no_upstream
        )
        if guard is not None:
            guard.shape_for = self.error_shape
        # The route table: path (without /v1) -> method -> handler.
        self.routes: dict[str, dict[str, Handler]] = self._route_table()
        self.sockets = self._responses_sockets(socket_limits or SocketLimits())
        stored = StoredResponses(self.state)
        # /responses/{id} and /responses/{id}/input_items: matched after the fixed paths.
        self.resource_routes: dict[str, dict[str, ResourceHandler]] = {
            "": {"GET": stored.get, "DELETE": stored.delete},
            "/input_items": {"GET": stored.input_items},
        }

    def _route_table(self) -> dict[str, dict[str, Handler]]:
        """Each face's POST, the model list and the health check."""
        routes: dict[str, dict[str, Handler]] = {
            path: {"POST": self._face_handler(face)} for path, face in self.faces.items()
        }
        messages = self.faces.get("/messages")
        if isinstance(messages, MessagesFace):
            routes["/messages/count_tokens"] = {"POST": self._count_tokens_route(messages)}
        routes["/models"] = {"GET": self._models_route}
        routes["/usage"] = {"GET": UsageRoute(self.admission.ledger, self.admission.is_admin)}
        routes["/health"] = routes["/healthz"] = {"GET": self._health_route}
        return routes

    def _responses_sockets(self, limits: SocketLimits) -> ResponsesSockets | None:
        """The Responses face over WebSocket, when the app has that face."""
        responses = self.faces.get("/responses")
        if not isinstance(responses, ResponsesFace):
            return None
        return ResponsesSockets(responses.reader.read_object, self.responder, limits)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "websocket":
            await self._websocket(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    # -- lifespan

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.state.start()
                    await self.admission.start()
                    if self._on_startup:
                        await self._on_startup()
                except Exception as exc:
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                try:
                    if self._on_shutdown:
                        await self._on_shutdown()
                finally:
                    await self.admission.close()
                    await self.state.stop()
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
            methods = self.routes.get(path)
            if methods is None:
                await self._resource(scope, path, method, send)
                return
            handler = methods.get(method)
            if handler is None:
                raise _method_not_allowed(methods, scope)
            await handler(scope, receive, send)
        except GatewayError as exc:
            await send_error(send, exc, self.redactor, shape=self.error_shape(path))
        except ClientGone:
            pass
        except Exception:
            # The last line of defence: a bug answers an OpenAI-style 500 while it still can.
            log.exception("unexpected error on %s %s", method, path)
            try:
                await send_error(send, GatewayError("internal gateway error"))
            except Exception:  # the response had started: the server closes the connection
                pass

    async def _resource(self, scope: Scope, path: str, method: str, send: Send) -> None:
        """`/responses/{id}[/input_items]`: a stored response."""
        response_id, sub = _resource_path(path)
        methods = self.resource_routes.get(sub) if response_id else None
        if methods is None:
            raise NotFound(f"Unknown route: {method} {scope['path']}.")
        handler = methods.get(method)
        if handler is None:
            raise _method_not_allowed(methods, scope)
        owner = scope.get(API_KEY_NAME) or ""
        status, body = await handler(response_id, owner, _query(scope))
        await send_json(send, status, body)

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.guard is not None and not await self.guard.websocket(scope, send):
            return
        path: str = scope["path"]
        if path.removeprefix("/v1") == "/responses" and self.sockets is not None:
            await self.sockets.serve(scope, receive, send)
            return
        # 426 makes Codex fall back to HTTP at once instead of retrying (contract §5).
        if "websocket.http.response" in scope.get("extensions", {}):
            await send(
                {
                    "type": "websocket.http.response.start",
                    "status": 426,
                    "headers": JSON_HEADERS + [(b"upgrade", b"websocket")],
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
            if name == b"content-encoding" and value.strip().lower() not in (b"", b"identity"):
                raise _unsupported_encoding(value.decode("latin-1"))
        try:
            # A client that sends part of a body and holds the connection open is cut off.
            with timeouts.timeout(self.body_timeout):
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

    # -- the faces: /v1/responses, /v1/chat/completions

    def _face_handler(self, face: Face) -> Handler:
        async def handle(scope: Scope, receive: Receive, send: Send) -> None:
            await self._serve(face, scope, receive, send)

        return handle

    async def _serve(self, face: Face, scope: Scope, receive: Receive, send: Send) -> None:
        exchange = Exchange(_header(scope, b"x-client-request-id"), face.name)
        exchange.caller = scope.get(API_KEY_NAME)
        output = None
        try:
            # The body is not kept in a variable, nor the request once the backend has it: this
            # frame lives as long as the stream.
            ask = face.read(await self._read_body(scope, receive), exchange.caller, scope["headers"])
            exchange.model, exchange.req = ask.req.model, ask.req
            output = http_output(ask.encoder, send, exchange)
            answer = self.responder.respond(exchange, ask.req, ask.inbound, output)
            del ask
            await until_disconnect(receive, exchange, answer)
        except GatewayError as exc:  # before the first byte (server/response.py)
            exchange.status, exchange.outcome = exc.status, exc.code
            exchange.error_message = exc.message
            headers = output.headers if output is not None else None
            await send_error(send, exc, self.redactor, headers, face.error_shape)
        except ClientGone:
            exchange.outcome = exchange.outcome or "client_gone"
        finally:
            await exchange.settle()  # when the answer did not end with a terminal event
            exchange.log()
            self.observers.finished(exchange)

    def error_shape(self, path: str) -> ErrorShape:
        """How the clients of `path` (with or without /v1) read an error: its face's shape, or
        OpenAI's."""
        path = path.removeprefix("/v1")
        face = self.faces.get(path) or self.faces.get(path.rpartition("/")[0])
        return face.error_shape if face is not None else openai_shape

    def _count_tokens_route(self, face: MessagesFace) -> Handler:
        """`POST /v1/messages/count_tokens`: the prompt's tokens, estimated here for every backend
        (translate/messages_face/count_tokens.py); no upstream is asked. Counted in a worker
        thread: a PDF's pages are read to be counted (about 1 ms a page), and the loop serves
        every other stream meanwhile (bench/pdf_loop.py)."""

        async def count(scope: Scope, receive: Receive, send: Send) -> None:
            body = await self._read_body(scope, receive)
            status, answer = await asyncio.to_thread(face.count_tokens, body, _named_headers(scope))
            await send_json(send, status, answer)

        return count

    async def _health_route(self, scope: Scope, receive: Receive, send: Send) -> None:
        status, health = await self._health()
        details = scope.get(SHOW_DETAILS, True)
        await send_json(send, status, health if details else {"status": health["status"]})

    async def _models_route(self, scope: Scope, receive: Receive, send: Send) -> None:
        listed = await self._models()  # raises GatewayError: answered as one
        caller = scope.get(API_KEY_NAME)
        # A key with `models` sees those only.
        listed["data"] = [m for m in listed["data"] if self.admission.may_use(caller, m["id"])]
        if _header(scope, b"anthropic-version") is not None:  # an Anthropic client (Claude Code)
            listed = _anthropic_models(listed["data"], _query(scope))
        await send_json(send, 200, listed)

    async def _health(self) -> tuple[int, dict[str, Any]]:
        """Each upstream's reachability (its `/models`, asked at most every few seconds), what
        the gateway repaired or recognised on each, and the context windows learned from them.
        503 when no upstream is usable, so a monitor or load balancer sees a gateway that can
        serve nothing as down."""
        if not self.router.backends and self._on_no_upstream is not None:
            await self._on_no_upstream()
        backends = list(self.router.backends.items())
        listings = await asyncio.gather(*(backend.reachability() for _, backend in backends))
        board = self.router.health
        upstreams = {
            name: {"base_url": _without_credentials(backend.base_url), **board.upstream(name, listing)}
            for (name, backend), listing in zip(backends, listings, strict=True)
        }
        usable = any(u["usable"] for u in upstreams.values())
        health = {
            "status": "ok" if usable else "unavailable",
            "upstreams": upstreams,
            "routes": self.router.describe_pools(),
            "counts": {name: dict(sorted(b.counts.items())) for name, b in backends},
            "context_windows": {name: b.windows.known() for name, b in backends if b.windows is not None},
        }
        if self._health_details is not None:
            health.update(self._health_details())
        return (200 if usable else 503), health

    # -- /v1/models

    async def _models(self) -> dict[str, Any]:
        """The routed names (configuration: listed whether or not their upstream answers), or
        with no routes each upstream's own models. Raises NoUpstream with no upstream at all,
        and UpstreamConnectError (503) when no upstream answered: an empty list would say there
        are no models, when the truth is that nobody could be asked (docs/faces.md)."""
        if not self.router.backends and self._on_no_upstream is not None:
            await self._on_no_upstream()
        if not self.router.backends and not self.router.models:
            raise self.router.no_upstream()
        names = list(self.router.models)
        if not self.router.routed:
            names += await self._upstream_models()
        created = int(time.time())
        unique = list(dict.fromkeys(names))
        return {
            "object": "list",
            "data": [
                {"id": n, "object": "model", "created": created, "owned_by": "codexgate"} for n in unique
            ],
        }

    async def _upstream_models(self) -> list[str]:
        """Every upstream's model ids; an upstream that lists none is asked why (its cached
        reachability), and when none answered, the 503 says, per upstream, what is wrong."""
        backends = list(self.router.backends.items())
        listed = await asyncio.gather(*(backend.model_ids() for _, backend in backends))
        names = [name for ids in listed for name in ids]
        if names:
            return names
        listings = await asyncio.gather(*(backend.reachability() for _, backend in backends))
        problems = [
            f"upstream {name!r}: {listing.problem()}"
            for (name, _), listing in zip(backends, listings, strict=True)
            if listing.cause not in (None, "no_models")
        ]
        if len(problems) < len(backends):
            return []  # an upstream answered, with no models: the list is truly empty
        raise UpstreamConnectError(
            "No upstream answered, so the gateway cannot list their models: " + "; ".join(problems),
            status=503,
        )


def _anthropic_models(models: list[dict[str, Any]], query: dict[str, str]) -> dict[str, Any]:
    """The model list as Anthropic's API answers it (`GET /v1/models` with `anthropic-version`:
    Claude Code's gateway model discovery), paged by `limit`, `after_id` and `before_id`."""
    ids = [m["id"] for m in models]
    if query.get("after_id") in ids:
        ids = ids[ids.index(query["after_id"]) + 1 :]
    if query.get("before_id") in ids:
        ids = ids[: ids.index(query["before_id"])]
    limit = int(query["limit"]) if query.get("limit", "").isdigit() else 20
    page, more = ids[: max(1, min(limit, 1000))], len(ids) > max(1, min(limit, 1000))
    created = {m["id"]: m["created"] for m in models}
    data = [
        {
            "type": "model",
            "id": name,
            "display_name": name,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created[name])),
        }
        for name in page
    ]
    return {"data": data, "has_more": more, "first_id": page[0] if page else None,
            "last_id": page[-1] if page else None}  # fmt: skip


def _named_headers(scope: Scope) -> dict[str, str]:
    return {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}


def _method_not_allowed(methods: dict[str, Any], scope: Scope) -> InvalidRequest:
    allowed = " or ".join(sorted(methods))
    return InvalidRequest(f"Use {allowed} for {scope['path']}.", code=Code.METHOD_NOT_ALLOWED, status=405)


def _unsupported_encoding(encoding: str) -> InvalidRequest:
    """A compressed request body is refused before it is read. Codex compresses (zstd) only for
    its built-in OpenAI provider signed in with ChatGPT (codex-contract.md §1.1); a provider
    that points at codexgate sends plain JSON, so this names the cause instead of a JSON error."""
    return InvalidRequest(
        f"The request body is compressed (Content-Encoding: {encoding}); codexgate reads "
        "uncompressed JSON only. Send it without Content-Encoding (Codex does for a custom "
        "model provider such as codexgate's profile).",
        code="unsupported_content_encoding",
        status=415,
    )


def _resource_path(path: str) -> tuple[str, str]:
    """`/responses/{id}` -> (id, ""), `/responses/{id}/input_items` -> (id, "/input_items");
    ("", "") for anything else."""
    if not path.startswith("/responses/"):
        return "", ""
    response_id, slash, rest = path[len("/responses/") :].partition("/")
    return response_id, (slash + rest if slash else "")


def _query(scope: Scope) -> dict[str, str]:
    raw = scope.get("query_string", b"").decode("latin-1")
    return {key: values[-1] for key, values in parse_qs(raw).items()}


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
