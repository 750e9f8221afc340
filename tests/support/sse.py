"""Server-sent events as the tests read them: each `data:` payload decoded as JSON, from a whole
body or chunk by chunk as it arrives, and a streamed `/v1/responses` answer read and validated."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import httpx
import orjson

from codexgate.wire.sse import SSEDecoder
from tests.support.openresponses import validate_stream

JSON = dict[str, Any]


def sse_events(raw: bytes) -> list[JSON]:
    """Every event of a whole SSE body (a `[DONE]` in it fails: Responses streams send none)."""
    return [orjson.loads(data) for data in SSEDecoder().feed(raw)]


def iter_sse_events(chunks: Iterable[bytes]) -> Iterator[JSON]:
    """The events of an SSE stream as its chunks arrive; a chat stream's `[DONE]` is skipped."""
    decoder = SSEDecoder()
    for chunk in chunks:
        for data in decoder.feed(chunk):
            if data != b"[DONE]":
                yield orjson.loads(data)


async def stream_events(client: httpx.AsyncClient, body: JSON) -> list[JSON]:
    """`body` streamed from `/v1/responses`: a 200 event stream, whose events are valid."""
    response = await client.post("/v1/responses", json={**body, "stream": True})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse_events(response.content)
    validate_stream(events)
    return events


async def leave_at_the_first_delta(client: httpx.AsyncClient, body: JSON) -> None:
    """`body` streamed from `/v1/responses`, closed at the first text delta: a client that leaves."""
    async with client.stream("POST", "/v1/responses", json={**body, "stream": True}) as response:
        async for chunk in response.aiter_bytes():
            if b"output_text.delta" in chunk:
                break
