"""Server-Sent Events: an incremental decoder (bytes in any split) and an encoder. No I/O."""

from __future__ import annotations

from typing import Any

import orjson

_CR = b"\r"


class SSEDecoder:
    """Turns a byte stream into the `data` payloads of complete events.

    Accepts `\\n`, `\\r\\n` and `\\r` line endings, chunks split anywhere (including between
    `\\r` and `\\n`), multi-line data, comments and the `event:`/`id:`/`retry:` fields, which
    neither Chat Completions nor Codex use and are therefore dropped.
    """

    __slots__ = ("_tail", "_data")

    def __init__(self) -> None:
        self._tail = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        buf = self._tail + chunk if self._tail else chunk
        held_cr = b""
        if _CR in buf:
            if buf.endswith(_CR):  # may be the first half of a \r\n split across chunks
                buf, held_cr = buf[:-1], _CR
            buf = buf.replace(b"\r\n", b"\n").replace(_CR, b"\n")
        lines = buf.split(b"\n")
        self._tail = lines.pop() + held_cr
        return self._take(lines) if lines else []

    def finish(self) -> list[bytes]:
        """Flush at end of stream; an event not closed by a blank line is still delivered,
        as browsers' EventSource does not, but upstreams that omit the last blank line exist."""
        lines = [self._tail.rstrip(b"\r")] if self._tail else []
        self._tail = b""
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
            elif line.startswith(b"data:"):
                value = line[5:]
                data.append(value[1:] if value.startswith(b" ") else value)
            # comments (":...") and other fields are ignored
        return events


def encode_event(event: dict[str, Any]) -> bytes:
    """One Responses streaming event as an SSE frame (`event:` + `data:`)."""
    return b"event: %s\ndata: %s\n\n" % (event["type"].encode(), orjson.dumps(event))


def encode_events(events: list[dict[str, Any]]) -> bytes:
    """Several events in one write: fewer syscalls when a chunk yields more than one."""
    if len(events) == 1:
        return encode_event(events[0])
    return b"".join([encode_event(e) for e in events])
