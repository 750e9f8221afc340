"""Log helpers for backends: client- and upstream-chosen strings in log lines, and messages
logged once."""

from __future__ import annotations

import logging
from collections import OrderedDict

log = logging.getLogger("codexgate.backend")

_LOGGED_CHARS = 80  # of a client- or upstream-chosen string in a log message


def clip(value: object, limit: int = _LOGGED_CHARS) -> str:
    """A client- or upstream-chosen string for a log message: repr-escaped (no control
    characters reach the log) and cut to `limit` characters."""
    text = value if isinstance(value, str) else str(value)
    shown = repr(text[:limit])
    return shown if len(text) <= limit else shown + f"...({len(text)} chars)"


class OnceLog:
    """Logs each distinct message once (for dropped tool kinds and the like). Remembers the
    last `max_entries` messages: clients choose parts of them, so memory must stay bounded;
    a forgotten message may be logged again, which costs one bounded line."""

    def __init__(self, max_entries: int = 256) -> None:
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._max = max_entries

    def warning(self, message: str) -> None:
        if self._first(message):
            log.warning(message)

    def info(self, message: str) -> None:
        if self._first(message):
            log.info(message)

    def _first(self, message: str) -> bool:
        if message in self._seen:
            self._seen.move_to_end(message)
            return False
        self._seen[message] = None
        if len(self._seen) > self._max:
            self._seen.popitem(last=False)
        return True
