"""Tools seen lately, shared by the requests that send the same: every Codex session of one
version and configuration sends the same ~10 KB of tools, each session perhaps with its own
MCP tools besides. No I/O, no clock.

wire/responses.py keeps the tools it checked lately (`CheckedTools`): a request's tool equal
to one of them (one comparison, C code) is not checked again, and the request holds the tool
checked before. What is made of a tool later (its catalogue entry, its chat function, its echo
in the response) is then found by that object's identity (`SameObject`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, TypeVar

V = TypeVar("V")

_LIMIT = 1024  # tools remembered at most (a few Codex versions and many MCP servers' tools)


class CheckedTools:
    """Tools checked lately, by type and name. Held as given: the gateway does not change a
    decoded request's tools, and every use of them reads only."""

    def __init__(self, limit: int = _LIMIT) -> None:
        self._limit = limit
        self._by_name: dict[tuple[str, str | None], dict[str, Any]] = {}

    def find(self, tool: Any) -> dict[str, Any] | None:
        """The tool checked lately that equals `tool`, or None."""
        key = _key(tool)
        known = self._by_name.get(key) if key is not None else None
        return known if known is not None and (known is tool or known == tool) else None

    def add(self, tool: dict[str, Any]) -> None:
        """`tool` passed every check."""
        key = _key(tool)
        if key is None:
            return
        if len(self._by_name) >= self._limit:
            self._by_name.clear()  # a client sending ever new tools: start again
        self._by_name[key] = tool


def _key(tool: Any) -> tuple[str, str | None] | None:
    """A tool's type and name when it is a tool with a type (anything else is never known)."""
    if type(tool) is not dict:
        return None
    kind, name = tool.get("type"), tool.get("name")
    if type(kind) is not str:
        return None
    return kind, name if type(name) is str else None


class SameObject(Generic[V]):
    """Values made from objects, found by the object's identity. The object is held with its
    value, so its id cannot be another object's while it is here."""

    def __init__(self, limit: int = _LIMIT) -> None:
        self._limit = limit
        self._by_id: dict[int, tuple[Any, V]] = {}

    def get(self, obj: Any) -> V | None:
        found = self._by_id.get(id(obj))
        return found[1] if found is not None and found[0] is obj else None

    def put(self, obj: Any, value: V) -> V:
        if len(self._by_id) >= self._limit:
            self._by_id.clear()
        self._by_id[id(obj)] = (obj, value)
        return value


class SameObjects(Generic[V]):
    """Values made from sequences of objects (a request's tools, each the one checked lately),
    found by the objects' identities: one lookup, no comparison. The objects are held with
    the value, so their ids cannot be other objects' while it is here."""

    def __init__(self, limit: int = _LIMIT) -> None:
        self._limit = limit
        self._by_ids: dict[tuple[int, ...], tuple[tuple[Any, ...], V]] = {}

    def get(self, objects: Sequence[Any]) -> V | None:
        found = self._by_ids.get(tuple(map(id, objects)))
        return found[1] if found is not None else None

    def put(self, objects: Sequence[Any], value: V) -> V:
        if len(self._by_ids) >= self._limit:
            self._by_ids.clear()
        held = tuple(objects)
        self._by_ids[tuple(map(id, held))] = (held, value)
        return value
