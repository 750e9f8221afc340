"""A bounded memory of recent values, for what the gateway remembers between a conversation's
turns: the Responses face's checked request (server/faces/responses.py) and the chat backend's
translated history (translate/chat_upstream/request.py).

Codex re-sends the whole conversation every turn, so the gateway keeps the last request of
each conversation to skip re-checking and re-translating the part it has seen. Clients choose
the keys and the sizes, so the memory is bounded twice: by entries and by weight (the bytes of
the request each entry came from), dropping the least recently used first. No I/O, no clock.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class Memo(Generic[V]):
    """Least-recently-used values under two bounds. A value heavier than the whole budget is
    not kept (and evicts nothing), nor one lighter than `min_weight`: what is cheap to make
    again is not worth the memory (putting one drops what the key held)."""

    def __init__(self, max_weight: int, max_entries: int = 4096, min_weight: int = 0) -> None:
        self.max_weight = max_weight
        self.max_entries = max_entries
        self.min_weight = min_weight
        self._entries: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._weight = 0
        self._seen: OrderedDict[Hashable, None] = OrderedDict()  # keys asked about lately

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def weight(self) -> int:
        return self._weight

    def get(self, key: Hashable) -> V | None:
        found = self._entries.get(key)
        if found is None:
            return None
        self._entries.move_to_end(key)
        return found[0]

    def returning(self, key: Hashable) -> bool:
        """Whether `key` was asked about (here) or kept among the last `max_entries` keys; notes
        it. A conversation is worth remembering from its second request: remembering every
        first one costs memory and time for nothing when more conversations than entries take
        turns (each is dropped before its next turn)."""
        if key in self._entries:
            return True
        seen = self._seen
        if key in seen:
            seen.move_to_end(key)
            return True
        seen[key] = None
        if len(seen) > self.max_entries:
            seen.popitem(last=False)
        return False

    def admits(self, weight: int | None) -> bool:
        """Whether a value of this weight would be kept (None: unknown, assumed so)."""
        return weight is None or self.min_weight <= weight <= self.max_weight

    def drop(self, key: Hashable) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self._weight -= old[1]

    def put(self, key: Hashable, value: V, weight: int) -> None:
        self.drop(key)
        if not self.admits(weight) or self.max_entries <= 0:
            return
        self._entries[key] = (value, weight)
        self._weight += weight
        while self._weight > self.max_weight or len(self._entries) > self.max_entries:
            _, (_, dropped) = self._entries.popitem(last=False)
            self._weight -= dropped
