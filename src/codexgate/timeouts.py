"""Timeouts for the per-request path: `asyncio.timeout`'s meaning, a fraction of its cost.

Every request passes through a few timeouts that almost never fire (its body's arrival, its
upstream's first byte, the drain after the terminal event). `asyncio.timeout` arms and cancels a
loop timer for each: some 4-6 us apiece on uvloop, against 1.5 us here. All the timeouts of a
loop share one timer, armed at the earliest deadline: a timeout that ends before it fires costs
a dict insert and delete. When the timer fires it expires what is due and re-arms at the next
deadline, so a timeout fires when `asyncio.timeout`'s would (each scan is O(open timeouts), and
runs about once per deadline, not per request).

A timeout is a plain `with` block inside a coroutine, not `async with`: entering and leaving it
awaits nothing. Like `asyncio.timeout`, it cancels the task when due and turns that cancellation
into `TimeoutError` as the block ends; a cancellation from anyone else goes on untouched.
"""

from __future__ import annotations

import asyncio
import math
import threading
from types import TracebackType

__all__ = ["timeout", "timeout_at"]

_CLOCK_STEP = 0.001


class _Timer:
    """One loop's open timeouts behind one timer armed at the earliest deadline (or none)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._open: dict[Timeout, None] = {}
        self._handle: asyncio.TimerHandle | None = None
        self._armed_at = math.inf

    def add(self, scope: Timeout) -> None:
        self._open[scope] = None
        if scope.when < self._armed_at:
            self._arm(scope.when)

    def discard(self, scope: Timeout) -> None:
        # The timer stays armed: cancelling and re-arming would cost what a fire costs, and a
        # fire with nothing due just re-arms at the next deadline.
        self._open.pop(scope, None)

    def _arm(self, when: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self.loop.call_at(when, self._fire)
        self._armed_at = when

    def _fire(self) -> None:
        self._handle, self._armed_at = None, math.inf
        # The loop's clock moves in steps (uvloop: 1 ms), so a timer may run up to a step early:
        # counted as due, like asyncio's own timeouts, rather than re-armed over and over.
        now = self.loop.time() + _CLOCK_STEP
        due = [scope for scope in self._open if scope.when <= now]
        for scope in due:
            del self._open[scope]
            scope.expire()
        earliest = min((scope.when for scope in self._open), default=math.inf)
        if earliest < math.inf:
            self._arm(earliest)


# This thread's timer, for the loop it runs. Another loop in this thread gets a timer of its
# own; a timer left behind keeps working for the timeouts it holds (its handle holds it).
_local = threading.local()


def _timer_of(loop: asyncio.AbstractEventLoop) -> _Timer:
    timer: _Timer | None = getattr(_local, "timer", None)
    if timer is None or timer.loop is not loop:
        timer = _local.timer = _Timer(loop)
    return timer


class Timeout:
    """A deadline over a block of the current task (see the module's docstring)."""

    __slots__ = ("when", "_task", "_timer", "_cancelling", "_expired")

    def __init__(self, when: float | None) -> None:
        self.when = math.inf if when is None else when
        self._expired = False

    def __enter__(self) -> Timeout:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a timeout is entered inside a task")
        self._task = task
        if self.when < math.inf:
            self._timer = _timer_of(task.get_loop())
            self._cancelling = task.cancelling()
            self._timer.add(self)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.when == math.inf:
            return
        self._timer.discard(self)
        # The cancellation is ours only when nobody else asked for one meanwhile (as asyncio's).
        if self._expired and self._task.uncancel() <= self._cancelling and kind is asyncio.CancelledError:
            raise TimeoutError from exc

    def expire(self) -> None:
        """The deadline came while the block was open (the timer calls it): cancel the task."""
        self._expired = True
        self._task.cancel()

    def expired(self) -> bool:
        """Whether this timeout fired (its block was cancelled by it)."""
        return self._expired


def timeout(delay: float | None) -> Timeout:
    """A block that must end within `delay` seconds (None: no limit), else TimeoutError."""
    if delay is None:
        return Timeout(None)
    return Timeout(asyncio.get_running_loop().time() + delay)


def timeout_at(when: float | None) -> Timeout:
    """A block that must end by the loop time `when` (None: no limit), else TimeoutError."""
    return Timeout(when)
