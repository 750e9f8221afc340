"""Spot a model stuck repeating itself. Pure and synchronous.

Small and heavily quantised models fall into loops ("I'm sure you'll find them all to your
liking." until the context is full): on a CPU that is minutes of generation Codex waits for,
ending in an incomplete response anyway. The guard watches the text the model streams (answer
and reasoning, never tool-call arguments, where repetition can be legitimate data) and says
when its tail is one unit repeated many times over, so the gateway can stop the generation
and say why. The thresholds are set so that prose, code and tables do not trip them: the
same unit at least `min_repeats` times back to back, over at least `min_chars` characters.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

_KEY = 24  # characters matched to find the candidate period


@dataclass(frozen=True, slots=True)
class Loop:
    unit: str  # the repeated text
    repeats: int  # how many times it repeats at the end of the output (at least)


class RepetitionGuard:
    def __init__(
        self, *, min_repeats: int = 8, min_chars: int = 1200, max_period: int = 400, check_every: int = 200
    ) -> None:
        self._min_repeats = min_repeats
        self._min_chars = min_chars
        self._max_period = max_period
        self._check_every = check_every
        self._keep = max(min_chars, min_repeats * max_period) + _KEY
        self._tail = ""
        self._pending: list[str] = []  # fed since the last check; joined only then (cheap per delta)
        self._unchecked = 0

    def feed(self, text: str) -> Loop | None:
        """The next streamed text; a Loop once the output's tail is a loop."""
        self._pending.append(text)
        self._unchecked += len(text)
        if self._unchecked < self._check_every:
            return None
        self._tail = (self._tail + "".join(self._pending))[-self._keep :]
        self._pending.clear()
        self._unchecked = 0
        return self._loop_in(self._tail)

    def take(self, text: str) -> bool:
        """`feed(text)` when it would not check (and so return None): True. False, having
        done nothing, when `text` brings a check due; then `feed` must run."""
        unchecked = self._unchecked + len(text)
        if unchecked >= self._check_every:
            return False
        self._pending.append(text)
        self._unchecked = unchecked
        return True

    def take_all(self, texts: Sequence[str], end: int) -> int:
        """`feed` for `texts[:end]` in order, as far as it returns None: how many were taken.
        A text that brings a check due is checked here, as `feed` would; the first whose
        check finds a loop is left, untouched, for `feed` (which finds it again). So a long
        run of deltas goes on past its checks in one call (the running sums and the search
        for the next check due are C loops)."""
        run = texts[:end]
        sums = list(accumulate(map(len, run), initial=self._unchecked))  # unchecked after each
        limit = self._check_every
        taken = base = held_from = 0  # base: sums[] where the last check was; held_from: not yet held
        while taken < end:
            due = bisect_left(sums, base + limit, taken + 1) - 1  # the next text bringing a check
            if due >= end:
                taken = end
                break
            tail = (self._tail + "".join(self._pending) + "".join(run[held_from : due + 1]))[-self._keep :]
            if self._loop_in(tail) is not None:
                taken = due
                break
            self._tail = tail
            self._pending.clear()
            taken = held_from = due + 1
            base = sums[taken]
        self._pending.extend(run[held_from:taken])
        self._unchecked = sums[taken] - base
        return taken

    def _loop_in(self, tail: str) -> Loop | None:
        """The loop `tail`, the output's last characters, ends with; None when it ends with none."""
        if len(tail) < self._min_chars:
            return None
        # The nearest earlier occurrence of the last few characters gives the shortest period
        # the tail could have; then one slice comparison says whether it really is periodic.
        key_at = len(tail) - _KEY
        previous = tail.rfind(tail[key_at:], max(0, key_at - self._max_period), len(tail) - 1)
        if previous < 0:
            return None
        period = key_at - previous
        span = max(self._min_chars, self._min_repeats * period)
        if period <= 0 or span > len(tail):
            return None
        window = tail[-span:]
        if window[period:] != window[:-period]:
            return None
        return Loop(unit=_readable(tail[-period:]), repeats=span // period)


def _readable(unit: str) -> str:
    """The same cycle, rotated to start where a line or sentence starts when it has one."""
    doubled = unit + unit
    for boundary in ("\n", ". "):
        at = doubled.find(boundary)
        while 0 <= at < len(unit):
            start = at + len(boundary)
            if not doubled[start].isspace():
                return doubled[start : start + len(unit)]
            at = doubled.find(boundary, start)
    return unit
