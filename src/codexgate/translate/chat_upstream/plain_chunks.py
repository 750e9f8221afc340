"""The commonest chunk of a chat stream, read from its bytes without decoding it.

Nearly every chunk of an answer is a text delta, and within one stream those chunks differ
only in the delta's text: `{"id":"chatcmpl-1",...,"choices":[{"index":0,"delta":{"content":`
then the text's JSON string, then the same closing bytes. Decoding each into four dicts and a
list, then checking that shape (stream.py `_plain_content`), cost a fast upstream's gateway
more CPU per event than anything else. So the first such chunk of a stream is learned as the
bytes before its text and the bytes after (`PlainChunks.learn`); a later chunk with exactly
those bytes around one JSON string is that text (`PlainChunks.text`).

The result is always what decoding the chunk whole and reading it gives. The learned template
is proven by decoding it around a probe string: that the probe comes back as the chunk's plain
text shows the text's bytes are the delta's content, at that place of that structure (a
`"content":` elsewhere, or an upstream escaping text otherwise than orjson, is never
learned). A chunk is then read only when it is the template's bytes around exactly one valid
JSON string, decoded by orjson (escapes, UTF-8 and control characters checked as in any
chunk), and not empty.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

__all__ = ["PlainChunks"]

_PROBE = "\x01probe"
_LEARNING = 8  # chunks decoded whole that may teach the template, since the last that did


class PlainChunks:
    """One stream's template of its plain text chunks, and the decoder that uses it."""

    __slots__ = ("_head", "_tail", "_learning", "_read")

    def __init__(self, read: Callable[[Any], str | None]) -> None:
        """`read`: a decoded chunk's plain text, or None when it is not a plain chunk."""
        self._read = read
        self._head = b""
        self._tail = b""
        self._learning = _LEARNING

    def decode(self, payload: bytes) -> Any:
        """The payload decoded: a plain chunk as its text (a str) when the template reads it
        or it teaches the template, else as orjson decodes it (stream.py reads either the
        same); a JSON string, which no chunk is, in a list (read as the other values that are
        not an object: malformed). Raises orjson.JSONDecodeError."""
        text = self.text(payload)
        if text is not None:
            return text
        chunk = orjson.loads(payload)
        kind = type(chunk)
        if kind is dict and self._learning:
            self._learning -= 1
            text = self._read(chunk)
            if text is not None:
                # A stream whose template changes (llama.cpp writes the second in each chunk)
                # may teach it again.
                if self.learn(payload, text):
                    self._learning = _LEARNING
                return text
        elif kind is str:
            return [chunk]
        return chunk

    def decode_all(self, payloads: list[bytes]) -> list[Any]:
        """`decode` for each payload, in order: one call for a read of many chunks, with the
        template's test written out in the loop (a method call per chunk cost as much as the
        test itself). Raises orjson.JSONDecodeError as `decode` does."""
        out: list[Any] = []
        append, loads = out.append, orjson.loads
        head, tail = self._head, self._tail
        start, stop = len(head), -len(tail)
        for payload in payloads:
            # `stop` is never 0: a learned chunk ends after its text (`}]}` at least).
            if start and payload[:start] == head and payload[stop:] == tail and len(payload) > start - stop:
                try:
                    text = loads(payload[start:stop])
                except orjson.JSONDecodeError:
                    text = None
                if type(text) is str and text:
                    append(text)
                    continue
            append(self.decode(payload))
            if head is not self._head:  # it taught the template: read on with the new one
                head, tail = self._head, self._tail
                start, stop = len(head), -len(tail)
        return out

    def text(self, payload: bytes) -> str | None:
        """The chunk's text if `payload` is the template around one JSON string; else None."""
        head, tail = self._head, self._tail
        if not head or not payload.startswith(head) or not payload.endswith(tail):
            return None
        end = len(payload) - len(tail)
        if end <= len(head):
            return None
        try:
            text = orjson.loads(payload[len(head) : end])
        except orjson.JSONDecodeError:
            return None
        return text if type(text) is str and text else None

    def learn(self, payload: bytes, text: str) -> bool:
        """Take `payload`, a chunk whose plain text is `text`, as the template if it proves one
        (see the module's doc); whether it did."""
        written = b'"content":' + orjson.dumps(text)
        at = payload.rfind(written)
        if at < 0:
            return False
        head = payload[: at + len(b'"content":')]
        tail = payload[at + len(written) :]
        try:
            probed = orjson.loads(head + orjson.dumps(_PROBE) + tail)
        except orjson.JSONDecodeError:
            return False
        if self._read(probed) != _PROBE:
            return False
        self._head, self._tail = head, tail
        return True
