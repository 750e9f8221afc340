"""Which member of a pool a request goes to first, and which after it if that one fails.

A conversation (the request's `prompt_cache_key`, else the root of its `previous_response_id`
chain, else its WebSocket connection) stays on one member while that member is usable, so the
model server's prefix cache still holds its history (llama.cpp's slots, vLLM's prefix cache,
SGLang's radix cache): a re-sent 7k-100k token history is then not read again. The member is
chosen by rendezvous hashing: each member scores hash(conversation, member) and the highest
wins, so every gateway replica picks the same one without sharing anything, and adding or losing
a member moves only the conversations of that member. If it fails, the next highest takes over,
on every replica alike, and the conversation stays there (routing/pool.py, `Pool.settled`).

Stickiness yields to load when the conversation's member is far busier than the idlest one:
by at least YIELD_ABS requests (in flight and waiting) and at least YIELD_REL times the idlest's
load plus one (the absolute and relative thresholds of the cache-aware routers of vLLM and
SGLang). On a CPU model server a cache miss costs a whole prefill (a minute for Codex's first
prompt on 2 cores), so the thresholds are high: a busy member is waited for rather than left.

Without a conversation, or with `sticky = false`, the route's `balance` orders the members:
`least_busy` (fewest requests in flight and waiting; ties in turn), `round_robin`, or `weighted`
(smooth weighted round robin over `weights`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Protocol, TypeVar

from codexgate.config import Balance

__all__ = ["YIELD_ABS", "YIELD_REL", "Chooser", "rendezvous", "yields"]

YIELD_ABS = 4
YIELD_REL = 2.0


class Loaded(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def load(self) -> int: ...


M = TypeVar("M", bound=Loaded)


def _score(key: str, name: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{key}\x00{name}".encode(), digest_size=8).digest(), "big")


def rendezvous(key: str, members: Sequence[M]) -> list[M]:
    """`members` from the conversation's first choice to its last."""
    return sorted(members, key=lambda member: _score(key, member.name), reverse=True)


def yields(preferred: int, idlest: int) -> bool:
    """Whether a conversation's member, with `preferred` requests on it, is so much busier than
    the idlest (`idlest`) that the conversation goes there instead."""
    return preferred - idlest >= YIELD_ABS and preferred >= YIELD_REL * (idlest + 1)


class Chooser:
    """The order of one pool's members for a request without a sticky first choice."""

    def __init__(self, balance: Balance, weights: Sequence[float] = ()) -> None:
        self.balance = balance
        self._weights = list(weights)
        self._current = [0.0] * len(self._weights)
        self._next = 0  # round robin: who is first next time

    def order(self, members: Sequence[M], positions: Sequence[int]) -> list[M]:
        """`members` (at `positions` in the pool's list, for the weights) best first."""
        if not members:
            return []
        self._next += 1
        turn = self._next % len(members)
        rotated = [*members[turn:], *members[:turn]]
        if self.balance == "round_robin":
            return rotated
        if self.balance == "weighted":
            first = self._weighted(positions)
            chosen = members[positions.index(first)]
            return [chosen, *(member for member in rotated if member is not chosen)]
        return sorted(rotated, key=lambda member: member.load)  # least_busy; ties in turn

    def _weighted(self, positions: Sequence[int]) -> int:
        """Smooth weighted round robin (nginx's) over the members at `positions`."""
        total = sum(self._weights[i] for i in positions)
        for i in positions:
            self._current[i] += self._weights[i]
        best = max(positions, key=lambda i: self._current[i])
        self._current[best] -= total
        return best
