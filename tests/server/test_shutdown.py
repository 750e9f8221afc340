"""Stopping the gateway: Ctrl-C and SIGTERM sent to `codexgate serve` as a subprocess (real
signals, sockets and uvicorn), and the pieces in-process: a stream ended early writes a
well-formed failed response, a stopping app refuses new responses.

SIGINT: one line, no traceback, exit 130, also when it comes twice (`uv run` forwards a
terminal's Ctrl-C to the process a second time). SIGTERM: the open responses get the grace
period; one still open after it ends with `response.failed` `server_shutting_down` (the chat
face: its error chunk; a WebSocket: the event, then close 1001) and the process exits soon
after."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractContextManager, asynccontextmanager
from typing import Any

import httpx
import orjson
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect as ws_connect

from codexgate.app import build_app
from codexgate.config import load_settings
from codexgate.errors import GatewayError
from codexgate.server.app import GatewayApp
from codexgate.server.stopping import SHUTTING_DOWN
from codexgate.translate.interrupt import Interrupt
from codexgate.wire.sse import SSEDecoder
from tests.support.asgi_client import StreamingASGITransport
from tests.support.asgi_upstream import ASGIUpstreamTransport
from tests.support.fake_upstream import FakeUpstream, stall_reply
from tests.support.openresponses import validate_stream
from tests.support.processes import ServedGateway, serve_process
from tests.support.servers import run_asgi_server
from tests.support.sse import iter_sse_events

JSON = dict[str, Any]
STALL = 60.0  # the upstream's silence mid-answer: longer than any test waits
HI = {"model": "m", "input": "hi", "stream": True}


def gateway_process(*args: str) -> AbstractContextManager[ServedGateway]:
    return serve_process("--no-discover", *args)


def stream_signalling(
    gw: ServedGateway, path: str, body: JSON, sig: int, when: Callable[[list[JSON]], bool]
) -> tuple[list[JSON], float]:
    """Stream `body` from the gateway's `path`, sending it `sig` whenever `when(the events so far)`
    holds; the events, and when `sig` was last sent."""
    sent = 0.0
    events: list[JSON] = []
    with httpx.stream("POST", gw.base + path, json=body, timeout=30) as response:
        for event in iter_sse_events(response.iter_bytes()):
            events.append(event)
            if when(events):
                sent = gw.signal(sig)
    return events, sent


def at_a_delta(events: list[JSON]) -> bool:
    return bool(events[-1]["type"] == "response.output_text.delta")


# -- Ctrl-C


@pytest.mark.parametrize("signals", [1, 2], ids=["once", "twice"])
def test_ctrl_c_prints_one_line_and_no_traceback(signals: int) -> None:
    with gateway_process("--upstream", "http://127.0.0.1:9/v1") as gw:
        for _ in range(signals):
            gw.signal(signal.SIGINT)
            time.sleep(0.2)  # as `uv run` forwards it, after the terminal sent it
        status = gw.wait(20)
    text = "\n".join(gw.output)
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    assert gw.output.count("stopping...") == 1, text
    assert status == 130


def test_ctrl_c_ends_an_open_stream_at_once() -> None:
    fake = FakeUpstream([stall_reply("never finished", STALL)])
    with run_asgi_server(fake) as upstream, gateway_process("--upstream", upstream + "/v1") as gw:
        events, _ = stream_signalling(gw, "/v1/responses", HI, signal.SIGINT, at_a_delta)
        assert gw.wait(20) == 130
    validate_stream(events)
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"]["code"] == SHUTTING_DOWN


# -- SIGTERM


def test_sigterm_ends_a_stream_still_open_after_the_grace() -> None:
    grace = 1.0
    fake = FakeUpstream([stall_reply("the start of an answer", STALL)])
    with (
        run_asgi_server(fake) as upstream,
        gateway_process("--upstream", upstream + "/v1", "--shutdown-grace", str(grace)) as gw,
    ):
        events, sent = stream_signalling(gw, "/v1/responses", HI, signal.SIGTERM, at_a_delta)
        ended = time.monotonic() - sent
        status = gw.wait(20)
        exited = time.monotonic() - sent
    validate_stream(events)  # every open item closed before the terminal event
    failed = events[-1]
    assert failed["type"] == "response.failed"
    assert failed["response"]["error"]["code"] == SHUTTING_DOWN
    assert grace <= ended < grace + 3
    assert exited < grace + 5
    assert status == 0
    assert "Traceback" not in "\n".join(gw.output)


def test_sigterm_lets_a_stream_finish_within_the_grace() -> None:
    fake = FakeUpstream([stall_reply("an answer that pauses, then ends", 1.0)])
    with (
        run_asgi_server(fake) as upstream,
        gateway_process("--upstream", upstream + "/v1", "--shutdown-grace", "20") as gw,
    ):
        events, sent = stream_signalling(
            gw, "/v1/responses", HI, signal.SIGTERM, lambda events: at_a_delta(events) and len(events) < 6
        )
        status = gw.wait(20)
        exited = time.monotonic() - sent
    validate_stream(events)
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["output"][-1]["content"][0]["text"] == "an answer that pauses, then ends"
    assert exited < 10  # it did not wait out the grace once the stream had finished
    assert status == 0


def test_sigterm_ends_a_chat_stream_with_its_error_chunk() -> None:
    fake = FakeUpstream([stall_reply("a chat answer", STALL)])
    with (
        run_asgi_server(fake) as upstream,
        gateway_process("--upstream", upstream + "/v1", "--shutdown-grace", "0.5") as gw,
    ):
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        chunks, _ = stream_signalling(
            gw, "/v1/chat/completions", body, signal.SIGTERM, lambda chunks: len(chunks) == 1
        )
        assert gw.wait(20) == 0
    assert chunks[-1]["error"]["code"] == SHUTTING_DOWN


def test_sigterm_ends_a_websocket_response_then_closes_going_away() -> None:
    fake = FakeUpstream([stall_reply("over a websocket", STALL)])
    with (
        run_asgi_server(fake) as upstream,
        gateway_process("--upstream", upstream + "/v1", "--shutdown-grace", "0.5") as gw,
    ):
        with ws_connect(gw.base.replace("http", "ws") + "/v1/responses", open_timeout=10) as ws:
            ws.send(orjson.dumps({"type": "response.create", "model": "m", "input": "hi"}).decode())
            frames: list[JSON] = []
            with pytest.raises(ConnectionClosed) as closed:
                while True:
                    frames.append(orjson.loads(ws.recv(timeout=20)))
                    if frames[-1]["type"] == "response.output_text.delta":
                        gw.signal(signal.SIGTERM)
        assert gw.wait(20) == 0
    validate_stream(frames)
    assert frames[-1]["type"] == "response.failed"
    assert frames[-1]["response"]["error"]["code"] == SHUTTING_DOWN
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001


def test_sigterm_closes_an_idle_websocket_at_once() -> None:
    with gateway_process("--upstream", "http://127.0.0.1:9/v1") as gw:
        with ws_connect(gw.base.replace("http", "ws") + "/v1/responses", open_timeout=10) as ws:
            gw.signal(signal.SIGTERM)
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=10)
        assert gw.wait(20) == 0
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001


# -- in-process


@asynccontextmanager
async def in_process(fake: FakeUpstream) -> AsyncIterator[tuple[httpx.AsyncClient, GatewayApp]]:
    settings = load_settings({"upstream": "http://upstream.test/v1", "discover": False}, environ={})
    app = build_app(settings, transport=ASGIUpstreamTransport(fake), environ={})
    transport = StreamingASGITransport(app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw", timeout=10) as client:
        yield client, app
    assert not transport.app_errors


async def test_an_ended_stream_closes_its_items_before_failing() -> None:
    async with in_process(FakeUpstream([stall_reply("cut short by the stop", STALL)])) as (client, app):
        events: list[JSON] = []
        body = {"model": "m", "input": "hi", "stream": True}
        async with client.stream("POST", "/v1/responses", json=body) as response:
            decoder = SSEDecoder()
            async for chunk in response.aiter_bytes():
                events += [orjson.loads(d) for d in decoder.feed(chunk)]
                if any(e["type"] == "response.output_text.delta" for e in events) and len(app.streams):
                    app.streams.end()
    validate_stream(events)
    failed = events[-1]
    assert failed["type"] == "response.failed"
    assert failed["response"]["error"]["code"] == SHUTTING_DOWN
    message = failed["response"]["output"][0]  # what was said before the stop, closed
    assert message["type"] == "message" and "cut short by the stop".startswith(message["content"][0]["text"])


async def test_a_stopping_gateway_refuses_new_responses_with_a_retryable_503() -> None:
    fake = FakeUpstream([])
    async with in_process(fake) as (client, app):
        app.streams.begin()
        response = await client.post("/v1/responses", json={"model": "m", "input": "hi"})
    assert response.status_code == 503
    assert response.json()["error"]["code"] == SHUTTING_DOWN
    assert fake.requests == []


async def test_an_interrupt_cuts_a_wait_short_and_leaves_other_cancellations_alone() -> None:
    error = GatewayError("stop", code=SHUTTING_DOWN, status=503)

    async def waiting(started: asyncio.Event, interrupt_box: list[Interrupt]) -> None:
        interrupt = Interrupt()
        interrupt_box.append(interrupt)
        started.set()
        await interrupt.wait(asyncio.sleep(STALL))

    started, box = asyncio.Event(), []
    task = asyncio.ensure_future(waiting(started, box))
    await started.wait()
    box[0].end(error)
    with pytest.raises(GatewayError) as raised:
        await task
    assert raised.value is error and not task.cancelled()

    started, box = asyncio.Event(), []
    task = asyncio.ensure_future(waiting(started, box))
    await started.wait()
    task.cancel()  # not the interrupt: the cancellation goes on
    with pytest.raises(asyncio.CancelledError):
        await task

    late = Interrupt()
    late.end(error)  # ended before the wait: it never starts
    with pytest.raises(GatewayError):
        await late.wait(asyncio.sleep(STALL))
