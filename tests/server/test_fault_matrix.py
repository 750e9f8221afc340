"""Every upstream fault x streaming/non-streaming: the right HTTP status, exactly one terminal
event with the right code, no task left behind and the upstream connection released."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import pytest

from codexgate.app import build_app
from codexgate.config import load_settings
from codexgate.server.asgi import Scope
from tests.support._exchange import ExchangeOptions
from tests.support.asgi_client import StreamingASGITransport
from tests.support.asgi_upstream import ASGIUpstreamTransport
from tests.support.fake_upstream import FakeUpstream, cut_reply, error_reply, openai_error, raw_reply
from tests.support.sse import sse_events

UPSTREAM = "http://upstream.test/v1"
TERMINAL = ("response.completed", "response.failed", "response.incomplete")


def sse(payload: Any) -> bytes:
    return b"data: " + (payload if isinstance(payload, bytes) else orjson.dumps(payload)) + b"\n\n"


def text_chunk(text: str) -> bytes:
    return sse({"choices": [{"index": 0, "delta": {"content": text}}]})


FINISH = sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
DONE = sse(b"[DONE]")


class Endless:
    """An upstream that answers a chat request with `head`, then `piece` forever (until the
    gateway leaves); other paths get a 404."""

    def __init__(
        self, piece: bytes | Callable[[int], bytes], *, status: int = 200, head: bytes = b""
    ) -> None:
        self.piece, self.status, self.head = piece, status, head
        self.sent = 0

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        if not scope["path"].endswith("/chat/completions"):
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": b"{}"})
            return
        kind = b"text/event-stream" if self.status == 200 else b"text/plain"
        await send(
            {"type": "http.response.start", "status": self.status, "headers": [(b"content-type", kind)]}
        )
        try:
            if self.head:
                await send({"type": "http.response.body", "body": self.head, "more_body": True})
            for n in itertools.count():
                piece = self.piece(n) if callable(self.piece) else self.piece
                await send({"type": "http.response.body", "body": piece, "more_body": True})
                self.sent += len(piece)
                await asyncio.sleep(0)  # a real upstream's bytes take loop turns to arrive
        except OSError:
            return  # the gateway closed the connection


@dataclass
class Fault:
    name: str
    upstream: Callable[[], Any]  # -> an ASGI app
    stream: tuple[int, str | None, str | None]  # HTTP status, terminal event, error code
    json: tuple[int, str | None, str | None]  # HTTP status, response status, error code
    settings: dict[str, Any] | None = None
    check: Callable[[dict[str, Any], Any], None] | None = None  # (final response, upstream)


def _fake(*replies: Any) -> Callable[[], FakeUpstream]:
    return lambda: FakeUpstream(list(replies))


COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "whole answer"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
}


def _text_is(expected: str) -> Callable[[dict[str, Any], Any], None]:
    def check(response: dict[str, Any], _: Any) -> None:
        [message] = response["output"]
        assert message["content"][0]["text"] == expected

    return check


def _message_has(fragment: str) -> Callable[[dict[str, Any], Any], None]:
    def check(response: dict[str, Any], _: Any) -> None:
        assert fragment in response["error"]["message"]

    return check


FAULTS = [
    Fault(
        "connect refused",
        lambda: None,
        (502, None, "upstream_unreachable"),
        (502, None, "upstream_unreachable"),
    ),
    Fault(
        "500 before the stream",
        _fake(error_reply(500, openai_error("boom", error_type="server_error"))),
        (502, None, "upstream_error"),
        (502, None, "upstream_error"),
    ),
    Fault(
        "200 with an error JSON body",
        _fake(
            raw_reply(
                [b'{"error":{"message":"the model crashed","type":"server_error"}}'],
                headers={"content-type": "application/json"},
            )
        ),
        (200, "response.failed", "upstream_error"),
        (502, "failed", "upstream_error"),
        check=_message_has("the model crashed"),
    ),
    Fault(
        "plain JSON completion to a stream",
        _fake(raw_reply([b"\n" + orjson.dumps(COMPLETION)], headers={"content-type": "text/event-stream"})),
        (200, "response.completed", None),
        (200, "completed", None),
        check=_text_is("whole answer"),
    ),
    Fault(
        "cut mid-stream",
        _fake(cut_reply("partial answer")),
        (200, "response.failed", "upstream_stream_cut"),
        (502, "failed", "upstream_stream_cut"),
    ),
    Fault(
        "non-numeric usage",
        _fake(
            raw_reply(
                [text_chunk("fine"), FINISH, sse({"choices": [], "usage": {"prompt_tokens": "abc"}}), DONE]
            )
        ),
        (200, "response.completed", None),
        (200, "completed", None),
        check=_text_is("fine"),
    ),
    Fault(
        "malformed chunk",
        _fake(raw_reply([text_chunk("Hel"), sse({"choices": 5}), text_chunk("lo"), FINISH, DONE])),
        (200, "response.completed", None),
        (200, "completed", None),
        check=_text_is("Hello"),
    ),
    Fault(
        "string delta",
        _fake(
            raw_reply(
                [text_chunk("Hel"), sse({"choices": [{"index": 0, "delta": "x"}]}), text_chunk("lo"), FINISH]
            )
        ),
        (200, "response.completed", None),
        (200, "completed", None),
        check=_text_is("Hello"),
    ),
    Fault(
        "endless keep-alive comments",
        lambda: Endless(b": keepalive\n\n"),
        (200, "response.failed", "upstream_timeout"),
        (504, "failed", "upstream_timeout"),
        settings={"max_request_seconds": 0.2},
        check=_message_has("total budget of 0.2 seconds"),
    ),
    Fault(
        "endless text",
        lambda: Endless(lambda n: text_chunk(f"{n * 7919 % 10007} ")),  # never repeats: no loop
        (200, "response.incomplete", None),
        (200, "incomplete", None),
        settings={"max_output_bytes": 20_000},
    ),
    Fault(
        "oversized SSE line",
        lambda: Endless(b"x" * 65536, head=b"data: "),
        (200, "response.failed", "upstream_response_too_large"),
        (502, "failed", "upstream_response_too_large"),
    ),
    Fault(
        "huge error body",
        lambda: Endless(b'{"error":' + b" " * 65536, status=500),
        (502, None, "upstream_error"),
        (502, None, "upstream_error"),
    ),
]


@asynccontextmanager
async def gateway(
    upstream: Any, **settings: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, ASGIUpstreamTransport]]:
    transport = ASGIUpstreamTransport(upstream, options=ExchangeOptions(raise_on_send_after_disconnect=True))
    flags = {"discover": False, "upstream": UPSTREAM, "max_retries": 0, **settings}
    app = build_app(load_settings(flags, environ={}), transport=transport, environ={})
    async with httpx.AsyncClient(
        transport=StreamingASGITransport(app), base_url="http://gw", timeout=10
    ) as client:
        yield client, transport


async def _settled(before: set[asyncio.Task[Any]]) -> set[asyncio.Task[Any]]:
    """Tasks started since `before` that are still alive, after letting them finish."""
    me = asyncio.current_task()
    async with asyncio.timeout(5):
        while left := {t for t in asyncio.all_tasks() if t not in before and t is not me and not t.done()}:
            await asyncio.wait(left, timeout=1)
    return left


@pytest.mark.parametrize("mode", ["stream", "json"])
@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
async def test_upstream_fault(fault: Fault, mode: str) -> None:
    before = asyncio.all_tasks()
    upstream = fault.upstream()
    async with gateway(upstream, **(fault.settings or {})) as (client, transport):
        async with asyncio.timeout(20):
            response = await client.post(
                "/v1/responses", json={"model": "m", "input": "hi", "stream": mode == "stream"}
            )
        health = (await client.get("/healthz")).json()
    status, outcome, code = getattr(fault, mode)
    assert response.status_code == status, response.text
    final: dict[str, Any] | None = None
    if mode == "stream" and status == 200:
        events = sse_events(response.content)
        terminals = [e for e in events if e["type"] in TERMINAL]
        assert len(terminals) == 1 and events[-1] is terminals[0]
        assert terminals[0]["type"] == outcome
        final = terminals[0]["response"]
    elif response.status_code == 200:
        final = response.json()
        assert final["status"] == outcome
    else:
        assert response.json()["error"]["code"] == code
    if final is not None:
        assert (final["error"] or {}).get("code") == code
        if outcome in ("incomplete", "response.incomplete"):
            assert final["incomplete_details"] == {"reason": "max_output_tokens"}
        if fault.check is not None:
            fault.check(final, upstream)
    if fault.name in ("malformed chunk", "string delta"):
        assert health["counts"]["default"]["upstream.malformed_chunks"] == 1
    # The upstream connection is released (and an endless one was not read to its end).
    assert all(r.closed for r in transport.responses)
    assert not any(r.app_running for r in transport.responses)
    assert not await _settled(before)


async def test_huge_error_body_is_read_only_up_to_the_cap() -> None:
    upstream = Endless(b"x" * 65536, status=500)
    async with gateway(upstream) as (client, _):
        response = await client.post("/v1/responses", json={"model": "m", "input": "hi"})
    assert response.status_code == 502
    assert upstream.sent <= 16 * 65536  # the cap (64 KB) plus what the transport buffers


async def test_usage_that_is_not_a_number_counts_as_zero_and_the_stream_still_ends() -> None:
    chunks = [
        text_chunk("ok"),
        FINISH,
        sse({"choices": [], "usage": {"prompt_tokens": "abc", "completion_tokens": [1]}}),
    ]
    async with gateway(FakeUpstream([raw_reply(chunks)])) as (client, _):
        response = await client.post("/v1/responses", json={"model": "m", "input": "hi"})
    usage = response.json()["usage"]
    assert response.status_code == 200 and usage["input_tokens"] == 0 and usage["output_tokens"] == 0
