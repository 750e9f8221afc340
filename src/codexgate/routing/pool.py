"""A route served by several upstreams (a pool), and the routes it falls back to.

A pool is a Backend (backends/base.py) whose call picks a member (routing/choice.py), takes a
place on it (routing/health.py: a capped member that is full makes the request wait, fairly
across callers, or go to another), and opens the member's own call. A member that fails before
the client's first byte is told to cool down and the next usable member is tried at once: every
member but the last is asked without retries of its own (`Inbound.max_retries = 0`), so the pool
fails over instead of waiting on a dead server. After the first byte the stream is the member's
to the end (a failure there is `response.failed`, never half-spliced with another member's).

When every member failed before the first byte, or the upstream said the context is too long
(`context_length_exceeded`), the route's `fallbacks` are tried in order (theirs after them, no
route twice). When none answers, the error is the last one's kind, and its message names every
member tried and what it failed with. The client's `model` is the one it asked for whichever
route answers; the route and upstream that answered go into the request's scope for the access
line and /metrics.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, OrderedDict
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any

from codexgate.backends import scope
from codexgate.backends.base import UNKNOWN, Backend, Call, Event, Inbound, ModelList
from codexgate.config import Balance
from codexgate.errors import (
    ContextLengthExceeded,
    GatewayError,
    InvalidRequest,
    Overloaded,
    RateLimited,
    UpstreamBadRequest,
    UpstreamError,
)
from codexgate.redact import redact_patterns
from codexgate.routing.choice import Chooser, rendezvous, yields
from codexgate.routing.health import HealthBoard, MemberHealth, Slot
from codexgate.wire.responses import ResponsesRequest

__all__ = ["SHORT_RETRY_AFTER", "Member", "Pool", "PooledCall"]

# A 429 whose Retry-After is this short is the server's moment, not its failure: the request
# goes to the next member, but the member does not cool down.
SHORT_RETRY_AFTER = 2.0
# Conversations remembered on a member other than their rendezvous choice (they moved there by
# failover or load, and its prefix cache holds them now), the least recently used forgotten.
MOVED_MEMORY = 50_000
_SAID_LIMIT = 300  # characters of a member's error kept as its `last_error`


@dataclass(frozen=True, slots=True)
class Member:
    """One upstream of a pool: the route's view of its backend and its id of the model."""

    backend: Backend
    model: str
    health: MemberHealth
    queue_timeout: float  # seconds a request waits for a place on it when it is full
    position: int  # in the route's list (for its weight)

    @property
    def name(self) -> str:
        return self.health.name

    @property
    def load(self) -> int:
        return self.health.load


class _CannotAnswer(Exception):
    """No member of a pool could take the request: its fallbacks may."""

    def __init__(self, error: GatewayError) -> None:
        super().__init__(error.message)
        self.error = error


class Pool:  # a backends.base.Backend
    def __init__(
        self,
        route: str,
        members: list[Member],
        board: HealthBoard,
        *,
        balance: Balance = "least_busy",
        weights: list[float] | None = None,
        sticky: bool = True,
        fallbacks: tuple[str, ...] = (),
        resolve: Callable[[str], Pool] | None = None,
    ) -> None:
        """`resolve(name)`: the pool of the route `name` (for the fallbacks)."""
        self.route = route
        self.members = members
        self.board = board
        self.sticky = sticky
        self.fallbacks = fallbacks
        self._chooser = Chooser(balance, weights or ())
        self._resolve = resolve
        self.counts: Counter[str] = Counter()
        self.windows = None
        self._moved: OrderedDict[str, str] = OrderedDict()  # conversation -> the member it moved to

    @property
    def name(self) -> str:
        return self.route

    @property
    def base_url(self) -> str:
        return "pool of " + ", ".join(member.name for member in self.members)

    def call(self, req: ResponsesRequest, upstream_model: str, inbound: Inbound = UNKNOWN) -> PooledCall:
        return PooledCall(self, req, inbound)

    async def model_ids(self) -> list[str]:
        return list(dict.fromkeys(member.model for member in self.members))

    async def reachability(self) -> ModelList:
        return await self.members[0].backend.reachability()

    async def aclose(self) -> None:
        """Nothing to release: the members are the upstreams' backends, closed with them."""

    def describe(self) -> dict[str, Any]:
        """For /healthz."""
        return {
            "members": [member.name for member in self.members],
            "balance": self._chooser.balance,
            "sticky": self.sticky,
            "fallbacks": list(self.fallbacks),
        }

    def plan(self, conversation: str | None) -> list[Member]:
        """The members in the order to try them: those that can take a request first (the
        conversation's own, unless it yields to load; else by `balance`), then the cooling ones."""
        ready = [member for member in self.members if member.health.can_take()]
        cooling = sorted(
            (member for member in self.members if not member.health.can_take()),
            key=lambda member: member.health.cooling_until,
        )
        if self.sticky and conversation is not None and ready:
            ranked = rendezvous(conversation, ready)
            moved = self._moved.get(conversation)
            for member in ranked[1:] if moved is not None else ():
                if member.name == moved:  # its history is cached there now: it stays
                    ranked.remove(member)
                    ranked.insert(0, member)
                    break
            idlest = min(ready, key=lambda member: member.load)
            if ranked[0] is not idlest and yields(ranked[0].load, idlest.load):
                self.board.sticky_yields[self.route] += 1
                ranked.remove(idlest)
                ranked.insert(0, idlest)
            return ranked + cooling
        return self._chooser.order(ready, [member.position for member in ready]) + cooling

    def settled(self, conversation: str | None, member: Member) -> None:
        """`member` answers the conversation: remembered when it is not the conversation's
        rendezvous choice, so that its next turns go where its history is cached (each
        replica remembers its own moves; the others send those turns to the first choice)."""
        if not self.sticky or conversation is None:
            return
        if member is rendezvous(conversation, self.members)[0]:
            self._moved.pop(conversation, None)
            return
        self._moved[conversation] = member.name
        self._moved.move_to_end(conversation)
        if len(self._moved) > MOVED_MEMORY:
            self._moved.popitem(last=False)

    def fallback_pools(self) -> list[Pool]:
        if self._resolve is None:
            return []
        return [self._resolve(name) for name in self.fallbacks]


class PooledCall:
    """One request to a pool: `open()` finds a member (or a fallback route) that takes it."""

    def __init__(self, pool: Pool, req: ResponsesRequest, inbound: Inbound) -> None:
        self._pool, self._req, self._inbound = pool, req, inbound
        self._call: Call | None = None
        self._slot: Slot | None = None
        self._failures: list[tuple[str, GatewayError]] = []  # (member, its error), in order

    async def open(self) -> None:
        """Raises, when no member of the route or its fallbacks could take the request, the
        last member's kind of error naming every member's; at once, what the client must fix
        (InvalidRequest)."""
        tried = {self._pool.route}
        waiting = [self._pool]
        while True:
            pool = waiting.pop(0)
            try:
                await self._open_in(pool)
                return
            except _CannotAnswer as exc:
                error = exc.error
            for fallback in pool.fallback_pools():
                if fallback.route not in tried:
                    tried.add(fallback.route)
                    waiting.append(fallback)
            if not waiting:
                raise self._every_failure(error)
            self._pool.board.fallbacks[self._pool.route, waiting[0].route] += 1

    def _every_failure(self, last: GatewayError) -> GatewayError:
        """`last`, worded to name every member that failed and what with (a route and its
        fallbacks), when more than one did."""
        if len(self._failures) < 2 or last is not self._failures[-1][1]:
            return last
        said = "; ".join(_named(member, exc) for member, exc in self._failures)
        where = f"route {self._pool.route!r}" + (" or its fallbacks" if self._pool.fallbacks else "")
        named = type(last)(
            f"No upstream of {where} could answer ({len(self._failures)} tried): {said}.",
            code=last.code,
            param=last.param,
            retry_after=last.retry_after,
            status=last.status,
        )
        if isinstance(last, UpstreamError) and isinstance(named, UpstreamError):
            named.reason = last.reason
        return named

    async def _open_in(self, pool: Pool) -> None:
        plan = pool.plan(self._inbound.conversation)
        error: GatewayError | None = None
        for i, member in enumerate(plan):
            slot = await self._place(pool, member, first=i == 0)
            if slot is None:
                continue
            last = all(not later.health.can_take() for later in plan[i + 1 :])
            inbound = self._inbound if last else dataclasses.replace(self._inbound, max_retries=0)
            call = member.backend.call(self._req, member.model, inbound)
            try:
                await call.open()
            except GatewayError as exc:
                slot.release()
                if isinstance(exc, ContextLengthExceeded):
                    raise _CannotAnswer(exc) from None  # every member serves the same window
                if _clients_fault(exc):
                    raise
                error = exc
                self._failures.append((member.name, exc))
                self._failed(pool, member, exc, plan[i + 1 :])
                continue
            except BaseException:
                slot.release()
                raise
            member.health.succeeded()
            pool.settled(self._inbound.conversation, member)
            self._call, self._slot = call, slot
            scope.current().answered_by = (pool.route, member.name)
            return
        # A 503 before the first byte, with a Retry-After: Codex waits and retries it.
        busy = Overloaded(f"Every upstream of route {pool.route!r} is busy; retry later.", retry_after=1)
        raise _CannotAnswer(error or busy)

    async def _place(self, pool: Pool, member: Member, *, first: bool) -> Slot | None:
        """A place on `member`: now, or for the first choice after waiting its turn when it is
        full and no other member has room (or the conversation keeps to it)."""
        slot = member.health.take()
        if slot is not None or not first:
            return slot
        keeps_to_it = pool.sticky and self._inbound.conversation is not None
        others_have_room = any(
            other is not member and other.health.can_take() and other.health.has_room()
            for other in pool.members
        )
        if others_have_room and not keeps_to_it:
            return None  # the next member takes it
        caller = self._inbound.caller or ""
        return await member.health.wait(caller, member.queue_timeout)

    def _failed(self, pool: Pool, member: Member, exc: GatewayError, rest: list[Member]) -> None:
        board = pool.board
        wait = exc.retry_after if isinstance(exc, RateLimited) else None
        if wait is None or wait > SHORT_RETRY_AFTER:
            board.failed(member.health, _said(exc))
        if rest:
            board.failovers[pool.route, member.name, rest[0].name] += 1

    def events(self) -> AsyncGenerator[list[Event], None]:
        assert self._call is not None and self._slot is not None, "open() first"
        return _Releasing(self._call.events(), self._slot)


def _said(exc: GatewayError) -> str:
    """What a member failed with, for its `last_error` and the log: the code, and what failed
    (the transport's words, else the message, secrets masked, clipped)."""
    what = exc.reason if isinstance(exc, UpstreamError) and exc.reason else exc.message
    what = redact_patterns(what.rstrip("."))
    return f"{exc.code}: {what[:_SAID_LIMIT]}" if what else exc.code


def _named(member: str, exc: GatewayError) -> str:
    """A member's error in the message that names them all."""
    message = exc.message.rstrip(".")
    return message if message.startswith(f"upstream {member!r}") else f"upstream {member!r}: {message}"


def _clients_fault(exc: GatewayError) -> bool:
    """An error another member would give too: the request itself is wrong (the gateway's own
    checks, or an upstream's 400 about the request; not its wrong path or unknown model, which
    are that member's)."""
    return isinstance(exc, (InvalidRequest, UpstreamBadRequest))


class _Releasing:
    """The member's events; the member's place is given back when they end or are closed, even
    if nobody ever read them (an async generator never started runs no `finally`)."""

    __slots__ = ("_events", "_slot")

    def __init__(self, events: AsyncGenerator[list[Event], None], slot: Slot) -> None:
        self._events, self._slot = events, slot

    def __aiter__(self) -> _Releasing:
        return self

    async def __anext__(self) -> list[Event]:
        try:
            return await self._events.__anext__()
        except BaseException:
            self._slot.release()
            raise

    async def asend(self, value: None) -> list[Event]:
        return await self.__anext__()

    async def athrow(self, *args: Any) -> list[Event]:
        try:
            return await self._events.athrow(*args)
        finally:
            self._slot.release()

    async def aclose(self) -> None:
        try:
            await self._events.aclose()
        finally:
            self._slot.release()
