"""What the readers of an upstream's stream of JSON events share (Responses events:
translate/responses_upstream/stream.py; Anthropic's: translate/messages_upstream/stream.py):
each payload decoded by orjson, fed in order up to the end of the turn. Pure."""

from __future__ import annotations

from typing import Any

import orjson

from codexgate.translate.turn import Turn

__all__ = ["EventReader"]


class EventReader:
    """A reader of one upstream answer's events into `turn` (backends/http/backend.py
    `StreamReader`); a dialect's reader says what `feed` does with each event."""

    turn: Turn

    @property
    def done(self) -> bool:
        """The turn has ended."""
        return self.turn.done

    @staticmethod
    def decode(payload: bytes) -> Any:
        """One event-stream payload decoded (raises orjson.JSONDecodeError)."""
        return orjson.loads(payload)

    @staticmethod
    def decode_all(payloads: list[bytes]) -> list[Any]:
        """`decode` for each payload, in order."""
        return list(map(orjson.loads, payloads))

    def feed_all(self, events: list[Any]) -> None:
        """`feed` for each event in order, up to the end of the turn."""
        for event in events:
            self.feed(event)
            if self.turn.done:
                return

    def feed(self, event: Any) -> None:
        raise NotImplementedError
