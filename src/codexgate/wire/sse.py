"""Server-Sent Events: an incremental decoder (bytes in any split) and an encoder. No I/O."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final, get_args

import orjson

from codexgate.wire.responses_events import EventType

_CR = b"\r"
_LF = b"\n"
MAX_EVENT_BYTES = 16 * 1024 * 1024


class SSEEventTooLarge(ValueError):
    """A line or an event is longer than the decoder's limit."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"an event-stream line or event is larger than {limit} bytes")
        self.limit = limit


class SSEDecoder:
    """Turns a byte stream into the `data` payloads of complete events.

    Accepts `\\n`, `\\r\\n` and `\\r` line endings, chunks split anywhere (including between
    `\\r` and `\\n`), multi-line data, comments and the `event:`/`id:`/`retry:` fields, which
    neither Chat Completions nor Codex use and are therefore dropped.

    Buffering is linear: the pieces of an unfinished line are kept in a list and joined once,
    when the line ends. A line, or an event's data, longer than `max_event_bytes` raises
    SSEEventTooLarge (then the decoder is spent): an upstream cannot make the gateway hold an
    unbounded line.
    """

    __slots__ = ("_tail", "_tail_size", "_data", "_data_size", "_max")

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._tail: list[bytes] = []  # pieces of the line not finished yet
        self._tail_size = 0
        self._data: list[bytes] = []
        self._data_size = 0
        self._max = max_event_bytes

    def feed(self, chunk: bytes) -> list[bytes]:
        """Raises SSEEventTooLarge."""
        if not self._tail and not self._data and chunk.endswith(b"\n\n") and _CR not in chunk:
            whole = self._whole_events(chunk)
            if whole is not None:
                return whole
        held = self._tail and self._tail[-1].endswith(_CR)  # a \r that may pair with a \n
        if _LF not in chunk and _CR not in chunk and not held:  # the middle of a line: no copy
            if chunk:
                self._hold(chunk)
            return []
        buf = b"".join(self._tail) + chunk if self._tail else chunk
        self._tail.clear()
        self._tail_size = 0
        held_cr = b""
        if _CR in buf:
            if buf.endswith(_CR):  # may be the first half of a \r\n split across chunks
                buf, held_cr = buf[:-1], _CR
            buf = buf.replace(b"\r\n", b"\n").replace(_CR, b"\n")
        lines = buf.split(b"\n")
        rest = lines.pop() + held_cr
        if rest:
            self._hold(rest)
        return self._take(lines) if lines else []

    def _whole_events(self, chunk: bytes) -> list[bytes] | None:
        """The payloads when `chunk` is nothing but whole one-line `data:` events, as chat
        servers send them (one per read when paced, several when not); None when any part
        is something else, left to the general path. Nothing is held, so nothing changes."""
        if len(chunk) > self._max or not chunk.startswith(b"data: "):
            return None
        events = chunk[6:-2].split(b"\n\ndata: ")
        # A payload never holds a newline: one left in a piece is another field, a comment,
        # `data:` without its space, or a multi-line event, for the general path. (One search
        # of the joined pieces is several times cheaper than counting the chunk's newlines.)
        if b"\n" in b"".join(events):
            return None
        return events

    def _hold(self, piece: bytes) -> None:
        self._tail.append(piece)
        self._tail_size += len(piece)
        if self._tail_size > self._max:
            raise SSEEventTooLarge(self._max)

    def finish(self) -> list[bytes]:
        """Flush at end of stream; an event not closed by a blank line is still delivered,
        as browsers' EventSource does not, but upstreams that omit the last blank line exist."""
        lines = [b"".join(self._tail).rstrip(b"\r")] if self._tail else []
        self._tail.clear()
        self._tail_size = 0
        lines.append(b"")
        return self._take(lines)

    def _take(self, lines: list[bytes]) -> list[bytes]:
        events: list[bytes] = []
        data = self._data
        for line in lines:
            if not line:
                if data:
                    events.append(data[0] if len(data) == 1 else b"\n".join(data))
                    data.clear()
                    self._data_size = 0
            elif line.startswith(b"data:"):
                value = line[5:]
                self._data_size += len(value)
                if self._data_size > self._max:
                    raise SSEEventTooLarge(self._max)
                data.append(value[1:] if value.startswith(b" ") else value)
            elif len(line) > self._max:
                raise SSEEventTooLarge(self._max)
            # comments (":...") and other fields are ignored
        return events


def _head(kind: str) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: "


# The `event:` line and `data: ` of each event the gateway makes, encoded once rather than per
# event. (EventType is a union of Literals: the names are the arguments of its arguments.)
_HEADS: Final[Mapping[str, bytes]] = MappingProxyType(
    {kind: _head(kind) for literal in get_args(EventType) for kind in get_args(literal)}
)


def encode_event(event: dict[str, Any]) -> bytes:
    """One Responses streaming event as an SSE frame (`event:` + `data:`)."""
    kind = event["type"]
    return (_HEADS.get(kind) or _head(kind)) + orjson.dumps(event) + b"\n\n"


def encode_events(events: list[dict[str, Any]]) -> bytes:
    """Several events in one write: fewer syscalls when a chunk yields more than one.

    Each frame is made whole at once: orjson's result holds a 4 KB buffer however short the
    JSON, so keeping every event's JSON until the join (200 events of a fast upstream's read:
    800 KB) cost seven times the encoding itself."""
    if len(events) == 1:
        return encode_event(events[0])
    heads, dumps = _HEADS, orjson.dumps
    # The blank line that ends each frame is the join's separator: one copy less per event.
    frames = [(heads.get(event["type"]) or _head(event["type"])) + dumps(event) for event in events]
    return b"\n\n".join(frames) + b"\n\n" if frames else b""
