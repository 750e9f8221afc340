"""How each upstream is doing, as the pools see it (routing/pool.py): the requests in flight and
waiting (an upstream may cap what it takes at once, `max_concurrent`), and whether it is usable
or cooling down after failing.

Passive health: a member that fails before the client's first byte (it cannot be reached, it
timed out before answering, a 5xx, a 429 without a short Retry-After) cools down, 1 s after its
first failure in a row, doubling up to 30 s. When that time is up it is half-open: one request
may try it (or the background probe, which asks its `/models` every second, finds it answering),
and the first success makes it usable again; a failure cools it down for twice as long.

The log says when a member goes down and when it comes back, once each, and while it stays
down a reminder at a growing interval (REMIND_FIRST, doubling up to REMIND_MAX), not at every
failed probe.

What /healthz and the live view say of an upstream is `HealthBoard.upstream`: one verdict from
the member's state and the upstream's `/models` listing, whichever is newer winning (a listing
is cached for a few seconds, so it may predate the member's recovery or its failure).

A capped member that is full makes requests wait in its queue, served fairly across callers:
each caller (an API key) has its own line, of at most QUEUE_PER_SLOT per slot, and a freed slot
goes to the next caller in turn, so one key's fifty requests neither starve another key's one
nor fill the queue before it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from typing import Literal

from codexgate.backends.base import ModelList

__all__ = [
    "COOLDOWN_FIRST", "COOLDOWN_MAX", "QUEUE_PER_SLOT", "REMIND_FIRST", "REMIND_MAX",
    "HealthBoard", "MemberHealth", "Slot", "answers",
]  # fmt: skip

log = logging.getLogger("codexgate.routing")

State = Literal["usable", "cooling", "probing"]
# What /healthz says: a member's State, or "down": its /models got no answer after its last
# answer, and no request has failed on it since (the next one that tries it fails over at once).
Verdict = Literal["usable", "cooling", "probing", "down"]

COOLDOWN_FIRST = 1.0  # seconds a member cools down after its first failure in a row
COOLDOWN_MAX = 30.0
QUEUE_PER_SLOT = 4  # a caller's line on a full member holds up to max_concurrent x this requests
PROBE_EVERY = 1.0  # seconds between background probes of members that are not usable
REMIND_FIRST = 60.0  # seconds after a member went down that the log reminds it is still down
REMIND_MAX = 3600.0  # the interval between reminders doubles up to this


def answers(listing: ModelList) -> bool:
    """Whether an upstream's `/models` listing says it serves (an empty list is an answer)."""
    return listing.cause in (None, "no_models")


class _FairQueue:
    """Waiters in one line per caller, served a caller at a time in turn."""

    __slots__ = ("_lines", "_turns", "size")

    def __init__(self) -> None:
        self._lines: dict[str, deque[asyncio.Future[None]]] = {}
        self._turns: deque[str] = deque()  # callers with waiters, in the order they are served
        self.size = 0

    def put(self, caller: str) -> asyncio.Future[None]:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        line = self._lines.get(caller)
        if line is None:
            line = self._lines[caller] = deque()
            self._turns.append(caller)
        line.append(waiter)
        self.size += 1
        return waiter

    def waiting(self, caller: str) -> int:
        line = self._lines.get(caller)
        return len(line) if line is not None else 0

    def drop(self, caller: str, waiter: asyncio.Future[None]) -> None:
        """Take out a waiter that gave up (a line is short: at most QUEUE_PER_SLOT per slot)."""
        line = self._lines.get(caller)
        if line is None or waiter not in line:
            return
        line.remove(waiter)
        self.size -= 1
        if not line:
            del self._lines[caller]
            self._turns.remove(caller)

    def pop(self) -> asyncio.Future[None] | None:
        """The next waiter still waiting, the next caller's turn; None: nobody waits."""
        while self._turns:
            caller = self._turns.popleft()
            line = self._lines[caller]
            waiter = line.popleft()
            self.size -= 1
            if line:
                self._turns.append(caller)  # its next waiter comes after the other callers'
            else:
                del self._lines[caller]
            if not waiter.done():  # a waiter that gave up is passed over
                return waiter
        return None


class Slot:
    """A request's place on a member, held from its upstream call to the end of its answer."""

    __slots__ = ("_member",)

    def __init__(self, member: MemberHealth) -> None:
        self._member: MemberHealth | None = member

    def release(self) -> None:
        """Give the place back (to the next waiter, if any). A second call does nothing."""
        member, self._member = self._member, None
        if member is not None:
            member.hand_over()


class MemberHealth:
    """One upstream's load and health, shared by every route it serves."""

    def __init__(self, name: str, max_concurrent: int | None = None) -> None:
        self.name = name
        self.max_concurrent = max_concurrent
        self.in_flight = 0
        self.failures = 0  # in a row; 0: usable
        self.cooling_until = 0.0  # monotonic time
        self.last_error: str | None = None
        self.answered_at = float("-inf")  # monotonic: its last answer (a request or the probe)
        self.failed_at = float("-inf")  # monotonic: its last failure
        self.listing: ModelList | None = None  # the newest /models listing seen (probe, /healthz)
        self._queue = _FairQueue()
        self._down_since = 0.0  # monotonic, while failures > 0
        self._remind_at = 0.0
        self._remind_every = REMIND_FIRST

    @property
    def queued(self) -> int:
        return self._queue.size

    @property
    def load(self) -> int:
        return self.in_flight + self._queue.size

    @property
    def state(self) -> State:
        if not self.failures:
            return "usable"
        return "cooling" if time.monotonic() < self.cooling_until else "probing"

    def can_take(self) -> bool:
        """Whether a request may go to it now: usable, or half-open with no request trying it."""
        state = self.state
        return state == "usable" or (state == "probing" and self.in_flight == 0)

    def has_room(self) -> bool:
        return self.max_concurrent is None or self.in_flight < self.max_concurrent

    def queue_full(self, caller: str) -> bool:
        """Whether `caller`'s line is full (an uncapped member has no queue)."""
        if self.max_concurrent is None:
            return True
        return self._queue.waiting(caller) >= self.max_concurrent * QUEUE_PER_SLOT

    def take(self) -> Slot | None:
        """A place now, or None when it is full."""
        if not self.has_room():
            return None
        self.in_flight += 1
        return Slot(self)

    async def wait(self, caller: str, timeout: float) -> Slot | None:
        """A place once one is free, waiting in the caller's line; None when that line is full
        or `timeout` seconds passed first."""
        slot = self.take()
        if slot is not None or self.queue_full(caller):
            return slot
        waiter = self._queue.put(caller)
        try:
            async with asyncio.timeout(timeout):
                await waiter
        except TimeoutError:
            if waiter.done() and not waiter.cancelled():
                return Slot(self)  # handed a place as the time ran out: take it
            self._queue.drop(caller, waiter)
            return None
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.hand_over()  # handed a place as it was cancelled: pass it on
            else:
                self._queue.drop(caller, waiter)
            raise
        return Slot(self)  # the releaser kept its place counted for this waiter

    def hand_over(self) -> None:
        waiter = self._queue.pop()
        if waiter is None:
            self.in_flight -= 1
        else:
            waiter.set_result(None)

    def succeeded(self) -> None:
        """It answered (a request's first byte, or the probe's listing): usable."""
        now = time.monotonic()
        if self.failures:
            log.info(
                "upstream %s answers again after %s down (%d failures): usable",
                self.name, _span(now - self._down_since), self.failures,
            )  # fmt: skip
        self.failures, self.last_error, self.answered_at = 0, None, now

    def failed(self, error: str) -> float:
        """It failed a request before its first byte (`error`: what it failed with): cool down.
        Logged when it goes down, then as a reminder at a growing interval. Returns the
        seconds of the cooldown."""
        now = time.monotonic()
        self.failures += 1
        seconds = min(COOLDOWN_MAX, COOLDOWN_FIRST * 2.0 ** (self.failures - 1))
        self.cooling_until, self.failed_at, self.last_error = now + seconds, now, error
        if self.failures == 1:
            self._down_since, self._remind_every = now, REMIND_FIRST
            self._remind_at = now + REMIND_FIRST
            log.warning(
                "upstream %s is down (%s): requests go to the other members; it is tried again "
                "after a cooldown, and the log says when it answers again", self.name, error,
            )  # fmt: skip
        elif now >= self._remind_at:
            self._remind_every = min(REMIND_MAX, self._remind_every * 2)
            self._remind_at = now + self._remind_every
            log.warning(
                "upstream %s is still down after %s (%d failures; the last: %s)",
                self.name, _span(now - self._down_since), self.failures, error,
            )  # fmt: skip
        else:
            log.debug("upstream %s failed again (%s): cooling down for %.0f s", self.name, error, seconds)
        return seconds

    def saw(self, listing: ModelList) -> ModelList:
        """Keep `listing` if it is newer than the one kept; returns the newest."""
        if self.listing is None or listing.checked_at > self.listing.checked_at:
            self.listing = listing
        return self.listing

    def describe(self, listing: ModelList | None = None) -> dict[str, object]:
        """/healthz's word on it, with `listing` (its `/models`, possibly cached): see
        `HealthBoard.upstream`."""
        newest = self.saw(listing) if listing is not None else self.listing
        verdict: Verdict = self.state
        listed: dict[str, object] = {}
        if newest is not None:
            since = self.answered_at >= newest.checked_at  # it answered after this was listed
            if verdict == "usable" and not since and not answers(newest):
                verdict = "down"
            listed = {
                "reachable": since or newest.status != 0,
                "models": len(newest.models),
                "problem": None if since else newest.problem(),
            }
        left = max(0.0, self.cooling_until - time.monotonic()) if self.failures else 0.0
        return {
            "reachable": listed.get("reachable"),
            "usable": verdict == "usable",
            "models": listed.get("models"),
            "problem": listed.get("problem"),
            "state": verdict,
            "in_flight": self.in_flight,
            "queued": self.queued,
            "max_concurrent": self.max_concurrent,
            "failures": self.failures,
            "cooldown_seconds": round(left, 1),
            "last_error": self.last_error,
        }


class HealthBoard:
    """Every upstream's health, and what the pools did (for /metrics): failovers by route and
    from which member to which, fallbacks by route and to which, cooldowns by upstream, and
    sticky choices that yielded to load by route."""

    def __init__(self) -> None:
        self.members: dict[str, MemberHealth] = {}
        self.failovers: Counter[tuple[str, str, str]] = Counter()
        self.fallbacks: Counter[tuple[str, str]] = Counter()
        self.cooldowns: Counter[str] = Counter()
        self.sticky_yields: Counter[str] = Counter()
        self._probes: dict[str, Callable[[], Awaitable[ModelList]]] = {}
        self._task: asyncio.Task[None] | None = None

    def member(self, name: str, max_concurrent: int | None = None) -> MemberHealth:
        """The upstream's health, made the first time it is asked for."""
        health = self.members.get(name)
        if health is None:
            health = self.members[name] = MemberHealth(name, max_concurrent)
        return health

    def can_take(self, name: str) -> bool:
        """Whether requests may go to the upstream `name` (one no pool uses always may)."""
        member = self.members.get(name)
        return member is None or member.can_take()

    def upstream(self, name: str, listing: ModelList) -> dict[str, object]:
        """The upstream `name` as /healthz and the live view show it, from its `/models`
        `listing` (cached for a few seconds) and, for a pool's member, its health: the newer
        word wins. `usable` is `state == "usable"`; `reachable`, `models` and `problem` are the
        newest listing's, but a member that answered since is reachable, with no problem."""
        member = self.members.get(name)
        if member is not None:
            return member.describe(listing)
        listed = answers(listing)
        return {
            "reachable": listing.status != 0,
            "usable": listed,
            "models": len(listing.models),
            "problem": listing.problem(),
            "state": "usable" if listed else "down",
        }

    def watch(self, name: str, probe: Callable[[], Awaitable[ModelList]]) -> None:
        """`probe()` lists the upstream's models (its `/models`), for the background probe."""
        self._probes[name] = probe

    def failed(self, member: MemberHealth, error: str) -> None:
        member.failed(error)
        self.cooldowns[member.name] += 1

    def start(self) -> None:
        """Probe the members that are not usable in the background (in the running loop)."""
        if self._task is None and self._probes:
            self._task = asyncio.get_running_loop().create_task(self._probing(), name="codexgate-health")

    async def _probing(self) -> None:
        while True:
            await asyncio.sleep(PROBE_EVERY)
            for name, probe in self._probes.items():
                member = self.members.get(name)
                if member is None or member.state != "probing" or member.in_flight:
                    continue
                try:
                    listing = await probe()
                except Exception:  # the probe of one upstream must not stop the others'
                    log.debug("health probe of %s failed", name, exc_info=True)
                    if member.state == "probing":
                        self.failed(member, "its health probe failed")
                    continue
                member.saw(listing)
                if listing.checked_at <= member.failed_at or member.state != "probing":
                    continue  # listed before its last failure (a cached listing): no news
                if answers(listing):
                    member.succeeded()
                else:
                    self.failed(member, listing.problem() or "its /models got no answer")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None


def _span(seconds: float) -> str:
    """A duration as the log says it: 45 s, 3 min, 2 h 5 min."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min" if minutes % 60 else f"{minutes // 60} h"
