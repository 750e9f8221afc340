"""Chat Completions calls to the fake upstream and the SSE bodies it answers, as the tests of
tests/support make and read them."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from codexgate.backends.http.transport import HttpRequest
from tests.support.asgi_upstream import ASGIUpstreamResponse, ASGIUpstreamTransport
from tests.support.fake_upstream import FakeUpstream, Reply

UPSTREAM = "http://upstream.test/v1/chat/completions"
TIMEOUT = 5.0


def chat_body(stream: bool = True, include_usage: bool = True, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "test-model",
        "messages": [{"role": "user", "content": "hi"}],
        **extra,
    }
    if stream:
        body["stream"] = True
        if include_usage:
            body["stream_options"] = {"include_usage": True}
    return body


def sse_data(raw: bytes) -> list[str]:
    """The `data:` payloads of an SSE byte stream, strictly framed as `data: ...\\n\\n`."""
    text = raw.decode()
    assert text.endswith("\n\n"), text[-50:]
    events = text[:-2].split("\n\n")
    assert all(e.startswith("data: ") for e in events), events
    return [e.removeprefix("data: ") for e in events]


def chunks_of(raw: bytes) -> tuple[list[dict[str, Any]], bool]:
    """Parsed chunks and whether the stream ended with [DONE]."""
    data = sse_data(raw)
    done = data[-1] == "[DONE]"
    assert "[DONE]" not in data[:-1]
    return [orjson.loads(d) for d in (data[:-1] if done else data)], done


async def open_chat(
    transport: ASGIUpstreamTransport, body: dict[str, Any], headers: dict[str, str] | None = None
) -> ASGIUpstreamResponse:
    return await transport.open(
        HttpRequest(
            "POST", UPSTREAM, headers or {"Content-Type": "application/json"}, orjson.dumps(body), 5.0
        )
    )


async def chat(
    replies: list[Reply], body: dict[str, Any]
) -> tuple[FakeUpstream, ASGIUpstreamResponse, list[bytes]]:
    upstream = FakeUpstream(replies)
    transport = ASGIUpstreamTransport(upstream)
    async with asyncio.timeout(TIMEOUT):
        response = await open_chat(transport, body)
        pieces = [piece async for piece in response.iter_chunks()]
        await response.aclose()
    return upstream, response, pieces


def choice_deltas(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c["choices"][0]["delta"] for c in chunks if c["choices"]]
