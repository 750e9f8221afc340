"""What values computed from an unhashable key (a tool list) became, for the last few distinct
keys, found by equality. No I/O, no clock."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

V = TypeVar("V")


class SameAsRecent(Generic[V]):
    """What a value computed from an unhashable key (a tool list) became, for the last few
    distinct keys, found by equality. Every Codex session of one version and configuration
    sends the same tools, so a new conversation's tools are almost always the ones just seen:
    comparing them (C code) costs a fraction of reading them again.

    Keys are held as given: callers must not change them afterwards (decoded request parts
    are not changed by the gateway). Values are shared between requests, so they must be
    treated as read-only."""

    def __init__(self, size: int = 4) -> None:  # a few Codex versions or configurations at once
        self._size = size
        self._recent: list[tuple[Any, V]] = []

    def find(self, key: Any) -> V | None:
        recent = self._recent
        for index, (known, value) in enumerate(recent):
            if known is key or known == key:
                if index:  # the most recent first: the next lookup is one comparison
                    recent.insert(0, recent.pop(index))
                return value
        return None

    def add(self, key: Any, value: V) -> V:
        self._recent.insert(0, (key, value))
        del self._recent[self._size :]
        return value
