"""How each upstream is doing, as the pools see it (routing/pool.py): the requests in flight and
waiting (an upstream may cap what it takes at once, `max_concurrent`), and whether it is usable
or cooling down after failing.

Passive health: a member that fails before the client's first byte (it cannot be reached, it
timed out before answering, a 5xx, a 429 without a short Retry-After) cools down, 1 s after its
first failure in a row, doubling up to 30 s. When that time is up it is half-open: one request
may try it (or the background probe, which asks its `/models` every second, finds it answering),
and the first success makes it usable again; a failure cools it down for twice as long.

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

__all__ = ["COOLDOWN_FIRST", "COOLDOWN_MAX", "QUEUE_PER_SLOT", "HealthBoard", "MemberHealth", "Slot"]

log = logging.getLogger("codexgate.routing")

State = Literal["usable", "cooling", "probing"]

COOLDOWN_FIRST = 1.0  # seconds a member cools down after its first failure in a row
COOLDOWN_MAX = 30.0
QUEUE_PER_SLOT = 4  # a caller's line on a full member holds up to max_concurrent x this requests
PROBE_EVERY = 1.0  # seconds between background probes of members that are not usable


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
        self._queue = _FairQueue()

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
        if self.failures:
            log.info("upstream %s answers again: usable", self.name)
        self.failures, self.last_error = 0, None

    def failed(self, error: str) -> float:
        """It failed a request before its first byte: cool down. Returns the seconds."""
        self.failures += 1
        seconds = min(COOLDOWN_MAX, COOLDOWN_FIRST * 2.0 ** (self.failures - 1))
        self.cooling_until = time.monotonic() + seconds
        self.last_error = error
        return seconds

    def describe(self) -> dict[str, object]:
        """For /healthz."""
        left = max(0.0, self.cooling_until - time.monotonic()) if self.failures else 0.0
        return {
            "state": self.state,
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
        self._probes: dict[str, Callable[[], Awaitable[bool]]] = {}
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

    def describe(self, name: str) -> dict[str, object]:
        """The upstream's state for /healthz; {} when no pool uses it."""
        member = self.members.get(name)
        return member.describe() if member is not None else {}

    def watch(self, name: str, answers: Callable[[], Awaitable[bool]]) -> None:
        """`answers()` says whether the upstream answers (its `/models`), for the probe."""
        self._probes[name] = answers

    def failed(self, member: MemberHealth, error: str) -> None:
        seconds = member.failed(error)
        self.cooldowns[member.name] += 1
        log.warning("upstream %s failed (%s): cooling down for %.0f s", member.name, error, seconds)

    def start(self) -> None:
        """Probe the members that are not usable in the background (in the running loop)."""
        if self._task is None and self._probes:
            self._task = asyncio.get_running_loop().create_task(self._probing(), name="codexgate-health")

    async def _probing(self) -> None:
        while True:
            await asyncio.sleep(PROBE_EVERY)
            for name, answers in self._probes.items():
                member = self.members.get(name)
                if member is None or member.state != "probing" or member.in_flight:
                    continue
                try:
                    ok = await answers()
                except Exception:  # the probe of one upstream must not stop the others'
                    log.debug("health probe of %s failed", name, exc_info=True)
                    ok = False
                if ok:
                    member.succeeded()
                elif member.state == "probing":
                    self.failed(member, "its health probe got no answer")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
