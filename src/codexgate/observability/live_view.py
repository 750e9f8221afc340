"""The live view: a web page served by the gateway (`GET /ui`) showing its recent turns as
they stream, with their tool calls and results, errors, repairs, latency and tokens.

`LiveView` is an observer (server/observe.py) keeping a ring of the last `capacity` turns
(observability/live_turns.py). Its routes, behind the guard like every route:

- `GET /ui`: the page, one static file with no data in it; the guard serves it without a key
  (a browser navigating cannot send one), and the page asks for the key to fetch the rest.
- `GET /ui/state`: the turns, the upstreams' repair counters, each key's day (its spend
  today, UTC, and its limits) and the pools (each pooled route and its members' health, as
  /healthz has them), as JSON.
- `GET /ui/events`: Server-Sent Events: a `state` snapshot first, then `started`, `updated`
  (coalesced: at most one per turn every `flush_seconds`) and `finished` for each turn,
  `keys` (each key's day, read from the store every `keys_seconds` while it changes), `pools`
  (read every `pools_seconds`, sent when it changed), and `resync` (a fresh snapshot) when a
  slow browser fell `queue_limit` messages behind.

Each API key sees the turns made with it (as stored responses are owned by their key), and its
own day (an admin key, every key's); without keys, everything. The stream's events are looked
at only while a browser that may see the turn is watching (`wants_batches`); otherwise a turn
costs the view its start and its end.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import re
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import TYPE_CHECKING, Any

import orjson

from codexgate.backends.base import Backend
from codexgate.observability.live_turns import Seen, Turn
from codexgate.redact import Redactor
from codexgate.routing.router import Router
from codexgate.server.asgi import App, Receive, Scope, Send
from codexgate.server.delivery import SSE_HEADERS
from codexgate.server.exchange import Exchange
from codexgate.server.guard import API_KEY_NAME
from codexgate.server.http_errors import send_json
from codexgate.server.observe import Observer
from codexgate.wire.responses_events import Event

if TYPE_CHECKING:
    from codexgate.server.app import GatewayApp

Handler = App

log = logging.getLogger("codexgate.live_view")

PAGE_PATH = "/ui"  # the one path the guard serves without a key (server/guard.py)
_NO_STORE = (b"cache-control", b"no-store")
_CALL_MEMORY = 4096  # tool-call ids remembered, to hang a later request's results on their call
_CONVERSATIONS = 1024  # conversations whose last request is remembered (ui_turn.Seen)


class _Subscriber:
    """One browser's event stream: a bounded queue of encoded messages. A browser that falls
    `limit` messages behind loses them and gets one fresh snapshot instead, so a slow reader
    costs the gateway a fixed amount of memory and never slows a turn."""

    __slots__ = ("viewer", "pending", "limit", "behind", "closed", "wake")

    def __init__(self, viewer: str | None, limit: int) -> None:
        self.viewer = viewer
        self.pending: deque[bytes] = deque()
        self.limit = limit
        self.behind = False
        self.closed = False
        self.wake = asyncio.Event()

    def offer(self, frame: bytes) -> None:
        if self.behind or self.closed:
            return
        if len(self.pending) >= self.limit:
            self.pending.clear()
            self.behind = True
        else:
            self.pending.append(frame)
        self.wake.set()

    def close(self) -> None:
        self.closed = True
        self.wake.set()


class LiveView(Observer):
    def __init__(
        self,
        router: Router[Backend],
        redactor: Redactor | None = None,
        *,
        capacity: int = 200,
        flush_seconds: float = 0.1,
        queue_limit: int = 256,
        heartbeat_seconds: float = 15.0,
        days: Callable[[str | None], Awaitable[list[dict[str, Any]]]] | None = None,
        keys_seconds: float = 5.0,
        pools_seconds: float = 1.0,
    ) -> None:
        """`days`: each key's day as a viewer may see it (server/keys/admission.py `Admission.day`)."""
        self.router = router
        self.redactor = redactor or Redactor()
        self.capacity = capacity
        self.flush_seconds = flush_seconds
        self.queue_limit = queue_limit
        self.heartbeat_seconds = heartbeat_seconds
        self.days = days
        self.keys_seconds = keys_seconds
        self.pools_seconds = pools_seconds
        self.turns: OrderedDict[int, Turn] = OrderedDict()  # by number, oldest first
        self._numbers = 0
        self._running: dict[int, Turn] = {}  # by id() of the exchange, while it runs
        # Exchanges started whose turn is still to be made (started() defers it), with their
        # request, by id() of the exchange.
        self._unshown: dict[int, tuple[Exchange, Any]] = {}
        self._call_turns: OrderedDict[str, int] = OrderedDict()  # tool call id -> turn number
        # By (caller, prompt_cache_key): so that a long history is not walked every turn.
        self._conversations: OrderedDict[tuple[str | None, str] | None, Seen] = OrderedDict()
        self._subscribers: set[_Subscriber] = set()
        self._dirty: dict[int, Turn] = {}
        self._flush: asyncio.TimerHandle | None = None
        self._page: tuple[bytes, bytes] | None = None

    def routes(self) -> dict[str, dict[str, Handler]]:
        return {
            PAGE_PATH: {"GET": self._page_route},
            "/ui/state": {"GET": self._state_route},
            "/ui/events": {"GET": self._events_route},
        }

    def close(self) -> None:
        """End every event stream (the server is stopping: an endless response would hold
        its graceful shutdown forever)."""
        for subscriber in list(self._subscribers):
            subscriber.close()
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None

    # -- the observer

    def started(self, exchange: Exchange) -> None:
        if self._watched(exchange.caller):
            self._show(exchange, exchange.req)
        else:
            # Nobody watches: the turn is made, and its request read, once the upstream request
            # is written (the request's task writes it before it first waits), off the time to
            # first token; at the exchange's end at the latest.
            self._unshown[id(exchange)] = (exchange, exchange.req)
            asyncio.get_running_loop().call_soon(self._show_unshown, id(exchange))

    def _show_unshown(self, key: int) -> None:
        unshown = self._unshown.pop(key, None)
        if unshown is not None:
            self._show(*unshown)

    def _show(self, exchange: Exchange, req: Any) -> None:
        """The exchange's turn, with what it shows of its request, then `started` to whoever
        watches."""
        turn = self._new_turn(exchange)
        turn.counts_before = {
            name: dict(backend.counts)
            for name in self._may_answer(exchange.upstream)
            if (backend := self.router.backends.get(name)) is not None
        }
        self._running[id(exchange)] = turn
        cache_key = getattr(req, "prompt_cache_key", None)
        conversation = (exchange.caller, cache_key) if cache_key else None
        seen = turn.read_request(req, self._conversations.get(conversation))
        if conversation is not None:
            self._conversations[conversation] = seen
            self._conversations.move_to_end(conversation)
            if len(self._conversations) > _CONVERSATIONS:
                self._conversations.popitem(last=False)
        self._publish("started", turn)
        for result in turn.carried:
            self._attach_result(result)

    def _may_answer(self, name: str | None) -> list[str]:
        """The upstreams that may answer a request sent to `name`: an upstream, or a pool's
        members and its fallbacks' (the pool picks one once the request is open)."""
        pool = self.router.pools.get(name or "")
        if pool is None:
            return [name] if name else []
        found: dict[str, None] = {}
        pools, seen = [pool], {pool.route}
        while pools:
            pool = pools.pop()
            found.update(dict.fromkeys(member.name for member in pool.members))
            for fallback in pool.fallback_pools():
                if fallback.route not in seen:
                    seen.add(fallback.route)
                    pools.append(fallback)
        return list(found)

    def _watched(self, caller: str | None) -> bool:
        return bool(self._subscribers) and any(s.viewer == caller for s in self._subscribers)

    def wants_batches(self, exchange: Exchange) -> bool:
        return self._watched(exchange.caller)

    def batch(self, exchange: Exchange, events: list[Event]) -> None:
        turn = self._running.get(id(exchange))
        if turn is None:
            return
        if turn.ttft_ms is None:
            turn.note(exchange)  # the first output is known by now
        turn.fold(events)
        self._mark_dirty(turn)

    def finished(self, exchange: Exchange) -> None:
        self._show_unshown(id(exchange))  # an exchange that ended before its turn was made
        turn = self._running.pop(id(exchange), None)
        if turn is None:
            if exchange.outcome == "prewarmed":  # a WebSocket warm-up: no turn to show
                return
            turn = self._new_turn(exchange)  # refused before it was routed (a 4xx)
            turn.read_request(exchange.req)
        turn.finish(exchange, self.redactor.redact)
        backend = self.router.backends.get(exchange.upstream or "")
        before = (turn.counts_before or {}).get(exchange.upstream or "")
        turn.counts_before = None
        if backend is not None and before is not None:
            moved = {kind: n - before.get(kind, 0) for kind, n in backend.counts.items()}
            turn.repairs = {kind: n for kind, n in moved.items() if n > 0}
        for call in turn.calls:
            if call.call_id:
                self._call_turns[call.call_id] = turn.number
                self._call_turns.move_to_end(call.call_id)
        while len(self._call_turns) > _CALL_MEMORY:
            self._call_turns.popitem(last=False)
        self._dirty.pop(turn.number, None)
        self._publish("finished", turn, with_counts=True)

    def _new_turn(self, exchange: Exchange) -> Turn:
        self._numbers += 1
        turn = Turn(self._numbers, exchange)
        self.turns[turn.number] = turn
        while len(self.turns) > self.capacity:
            self.turns.popitem(last=False)
        return turn

    def _attach_result(self, result: dict[str, Any]) -> None:
        """Hang a tool result on the call it answers, in the turn that made the call."""
        turn = self.turns.get(self._call_turns.get(result["call_id"], 0))
        if turn is None:
            return
        for call in turn.calls:
            if call.call_id == result["call_id"] and call.result is None:
                call.result = result["output"]
                turn.rev += 1
                self._publish("updated", turn)

    # -- publishing

    def _mark_dirty(self, turn: Turn) -> None:
        if not self._subscribers:
            return
        self._dirty[turn.number] = turn
        if self._flush is None:
            loop = asyncio.get_running_loop()
            self._flush = loop.call_later(self.flush_seconds, self._flush_dirty)

    def _flush_dirty(self) -> None:
        self._flush = None
        dirty, self._dirty = self._dirty, {}
        for turn in dirty.values():
            self._publish("updated", turn)

    def _publish(self, kind: str, turn: Turn, with_counts: bool = False) -> None:
        watching = [s for s in self._subscribers if s.viewer == turn.owner]
        if not watching:
            return
        data: dict[str, Any] = {"turn": turn.to_json()}
        if with_counts:
            data["counts"] = self._counts()
        frame = _sse(kind, data)
        for subscriber in watching:
            subscriber.offer(frame)

    def snapshot(self, viewer: str | None) -> dict[str, Any]:
        """What one viewer may see: its turns, newest first, and the upstreams' counters."""
        turns = [turn.to_json() for turn in reversed(self.turns.values()) if turn.owner == viewer]
        return {"turns": turns, "counts": self._counts(), "capacity": self.capacity, "now": time.time()}

    def _counts(self) -> dict[str, dict[str, int]]:
        """What the gateway repaired or recognised on each upstream, read now (as /healthz)."""
        backends = list(self.router.backends.items())
        return {name: dict(sorted(backend.counts.items())) for name, backend in backends}

    # -- the routes

    async def _page_route(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._page is None:
            self._page = _load_page()
        body, policy = self._page
        headers = [
            (b"content-type", b"text/html; charset=utf-8"),
            (b"content-security-policy", policy),
            (b"x-content-type-options", b"nosniff"),
            (b"x-frame-options", b"DENY"),
            (b"referrer-policy", b"no-referrer"),
            _NO_STORE,
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _state_route(self, scope: Scope, receive: Receive, send: Send) -> None:
        viewer = scope.get(API_KEY_NAME)
        keys, pools = await self._days(viewer), await self.pools()
        await send_json(send, 200, {**self.snapshot(viewer), "keys": keys, "pools": pools}, [_NO_STORE])

    async def _days(self, viewer: str | None) -> list[dict[str, Any]]:
        return await self.days(viewer) if self.days is not None else []

    async def pools(self) -> dict[str, Any]:
        """Each route a pool serves (its members, balance, stickiness, fallbacks) and each
        member's health, as /healthz has them (routing/router.py `describe_members`)."""
        return {"routes": self.router.describe_pools(), "members": await self.router.describe_members()}

    async def _feed(
        self,
        kind: str,
        read: Callable[[], Awaitable[Any]],
        every: float,
        subscriber: _Subscriber,
        shown: Any,
    ) -> None:
        """`read()` every `every` seconds, sent as `kind` when it changed."""
        while not subscriber.closed:
            await asyncio.sleep(every)
            try:
                now = await read()
            except Exception:  # the view goes on without it
                log.exception("the live view could not read its %s", kind)
                continue
            if now != shown:
                shown = now
                subscriber.offer(_sse(kind, {kind: now}))

    async def _events_route(self, scope: Scope, receive: Receive, send: Send) -> None:
        viewer = scope.get(API_KEY_NAME)
        subscriber = _Subscriber(viewer, self.queue_limit)
        keys, pools = await self._days(viewer), await self.pools()
        await send({"type": "http.response.start", "status": 200, "headers": [*SSE_HEADERS, _NO_STORE]})
        # Subscribed and snapshotted in one step of the loop: nothing falls between the two.
        self._subscribers.add(subscriber)
        first = _sse("state", {**self.snapshot(viewer), "keys": keys, "pools": pools})
        watcher = asyncio.ensure_future(_close_on_disconnect(receive, subscriber))
        feeds = [
            asyncio.ensure_future(
                self._feed("keys", lambda: self._days(viewer), self.keys_seconds, subscriber, keys)
            ),
            asyncio.ensure_future(self._feed("pools", self.pools, self.pools_seconds, subscriber, pools)),
        ]
        try:
            await send({"type": "http.response.body", "body": first, "more_body": True})
            while not subscriber.closed:
                try:
                    async with asyncio.timeout(self.heartbeat_seconds):
                        await subscriber.wake.wait()
                except TimeoutError:
                    pass
                subscriber.wake.clear()
                if subscriber.closed:
                    break
                if subscriber.behind:
                    subscriber.behind = False
                    body = _sse("resync", self.snapshot(viewer))
                elif subscriber.pending:
                    body = b"".join(subscriber.pending)
                    subscriber.pending.clear()
                else:
                    body = b": ping\n\n"  # keeps proxies from closing a quiet stream
                await send({"type": "http.response.body", "body": body, "more_body": True})
        finally:
            self._subscribers.discard(subscriber)
            watcher.cancel()
            for feed in feeds:
                feed.cancel()
        await send({"type": "http.response.body", "body": b""})


async def _close_on_disconnect(receive: Receive, subscriber: _Subscriber) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    subscriber.close()


def _sse(kind: str, data: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def _load_page() -> tuple[bytes, bytes]:
    """The page, and a Content-Security-Policy that allows its own inline script and style
    (by hash) and nothing else: no other script, no frames, requests to this origin only."""
    body = resources.files("codexgate.observability").joinpath("live_view.html").read_bytes()
    text = body.decode()

    def hashes(tag: str) -> str:
        found = re.findall(rf"<{tag}>(.*?)</{tag}>", text, re.DOTALL)
        return " ".join(
            "'sha256-" + base64.b64encode(hashlib.sha256(s.encode()).digest()).decode() + "'" for s in found
        )

    policy = (
        f"default-src 'none'; script-src {hashes('script')}; style-src {hashes('style')}; "
        "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
    return body, policy.encode()


def install_live_view(app: GatewayApp) -> LiveView:
    """Add the live view to `app`: its observer, its routes, and the end of its streams when
    the server stops."""
    view = LiveView(app.router, app.redactor, days=app.admission.day)
    app.observers.add(view)
    app.routes.update(view.routes())
    app.on_stopping.append(view.close)
    return view
