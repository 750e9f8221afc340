"""StreamingASGITransport and asgi_lifespan (tests/support/asgi_client.py): httpx talking to an
ASGI app in-process, chunks delivered as sent, disconnects delivered to the app, failures
surfaced, lifespan state passed on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from codexgate.backends.http.transport import HttpRequest
from codexgate.server.asgi import Receive, Scope, Send
from tests.support._exchange import ExchangeOptions, read_body
from tests.support.asgi_client import StreamingASGITransport, asgi_lifespan
from tests.support.asgi_upstream import ASGIUpstreamTransport
from tests.support.chat_calls import TIMEOUT, UPSTREAM, chat_body
from tests.support.fake_upstream import FakeUpstream, cut_reply, text_reply

# -- StreamingASGITransport ------------------------------------------------------------------------


async def test_streaming_client_delivers_chunks_before_the_app_finishes() -> None:
    release = asyncio.Event()
    app_finished = False

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        nonlocal app_finished
        await send({"type": "http.response.start", "status": 200, "headers": [(b"x-a", b"1")]})
        await send({"type": "http.response.body", "body": b"data: first\n\n", "more_body": True})
        await release.wait()  # only the client can set this, after it saw the first chunk
        await send({"type": "http.response.body", "body": b"data: second\n\n"})
        app_finished = True

    transport = StreamingASGITransport(app)
    async with (
        asyncio.timeout(TIMEOUT),
        httpx.AsyncClient(transport=transport, base_url="http://gw") as client,
    ):
        async with client.stream("GET", "/events") as response:
            assert response.status_code == 200 and response.headers["X-A"] == "1"
            chunks = aiter(response.aiter_raw())
            assert await anext(chunks) == b"data: first\n\n"
            assert not app_finished
            release.set()
            assert await anext(chunks) == b"data: second\n\n"
            with pytest.raises(StopAsyncIteration):
                await anext(chunks)
    assert app_finished and transport.app_errors == [] and transport.forced_cancellations == 0


async def test_streaming_client_early_close_delivers_disconnect() -> None:
    saw_disconnect = asyncio.Event()
    app_exited = asyncio.Event()

    async def endless(scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await receive()  # the request body

            async def produce() -> None:
                await send({"type": "http.response.start", "status": 200, "headers": []})
                while True:
                    await send({"type": "http.response.body", "body": b"tick", "more_body": True})
                    await asyncio.sleep(0)

            producer = asyncio.create_task(produce())
            message = await receive()
            if message["type"] == "http.disconnect":
                saw_disconnect.set()
            producer.cancel()
            await asyncio.wait({producer})
        finally:
            app_exited.set()

    transport = StreamingASGITransport(endless)
    async with asyncio.timeout(TIMEOUT):
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            async with client.stream("POST", "/v1/responses", json={}) as response:
                assert await anext(aiter(response.aiter_raw())) == b"tick"
            # Leaving the block closed the response: the app must already be gone.
            assert saw_disconnect.is_set() and app_exited.is_set()
    assert transport.forced_cancellations == 0 and transport.app_errors == []


async def test_client_disconnect_propagates_through_a_proxy_to_the_upstream() -> None:
    """The chain every gateway test uses: httpx -> app -> ASGIUpstreamTransport -> FakeUpstream.
    Closing the client response must reach the fake upstream before `stream()` exits."""
    upstream = FakeUpstream([text_reply("y" * 500, chunk_chars=1, delay_between_chunks=0.001)])
    upstream_transport = ASGIUpstreamTransport(upstream)

    async def proxy(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        body = orjson.dumps(chat_body())
        response = await upstream_transport.open(HttpRequest("POST", UPSTREAM, {}, body, 5.0))
        try:
            await send({"type": "http.response.start", "status": 200, "headers": []})

            async def relay() -> None:
                async for chunk in response.iter_chunks():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b""})

            relaying = asyncio.create_task(relay())
            watching = asyncio.create_task(receive())
            await asyncio.wait({relaying, watching}, return_when=asyncio.FIRST_COMPLETED)
            for task in (relaying, watching):
                task.cancel()
            await asyncio.wait({relaying, watching})
        finally:
            await response.aclose()

    transport = StreamingASGITransport(proxy)
    async with asyncio.timeout(TIMEOUT), httpx.AsyncClient(transport=transport) as client:
        async with client.stream("POST", "http://gw/v1/responses", json={}) as response:
            assert (await anext(aiter(response.aiter_raw()))).startswith(b"data: ")
        assert upstream.disconnects == 1 and upstream.in_flight == 0
    assert transport.forced_cancellations == 0 and transport.app_errors == []
    assert all(r.closed for r in upstream_transport.responses)


async def test_streaming_client_cancels_an_app_that_ignores_disconnect() -> None:
    cancelled = asyncio.Event()

    async def deaf(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"one", "more_body": True})
        try:
            await asyncio.Event().wait()  # never watches receive()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    transport = StreamingASGITransport(deaf, options=ExchangeOptions(disconnect_grace=0.05))
    async with asyncio.timeout(TIMEOUT), httpx.AsyncClient(transport=transport) as client:
        async with client.stream("GET", "http://gw/") as response:
            await anext(aiter(response.aiter_raw()))
    assert cancelled.is_set() and transport.forced_cancellations == 1


async def test_streaming_client_passes_the_request_through() -> None:
    seen: dict[str, Any] = {}

    async def echo(scope: Scope, receive: Receive, send: Send) -> None:
        body = await read_body(receive) or b""
        seen.update(scope=scope, body=body)
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": body})

    async def upload() -> AsyncIterator[bytes]:
        for part in (b"streamed ", b"request ", b"body"):
            yield part

    async with (
        asyncio.timeout(TIMEOUT),
        httpx.AsyncClient(transport=StreamingASGITransport(echo), base_url="http://gw:8080") as client,
    ):
        response = await client.post("/v1/a%20b?x=1&y=2", content=upload(), headers={"X-Mixed-Case": "v"})
    assert response.status_code == 201 and response.content == b"streamed request body"
    scope = seen["scope"]
    assert scope["method"] == "POST" and scope["path"] == "/v1/a b"
    assert scope["raw_path"] == b"/v1/a%20b" and scope["query_string"] == b"x=1&y=2"
    assert scope["server"] == ("gw", 8080)
    assert (b"x-mixed-case", b"v") in scope["headers"]


async def test_streaming_client_surfaces_app_failures() -> None:
    async def fails_before(scope: Scope, receive: Receive, send: Send) -> None:
        raise LookupError("before headers")

    async def fails_during(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"partial", "more_body": True})
        raise LookupError("mid body")

    async with asyncio.timeout(TIMEOUT):
        async with httpx.AsyncClient(transport=StreamingASGITransport(fails_before)) as client:
            with pytest.raises(LookupError):
                await client.get("http://gw/")
        async with httpx.AsyncClient(transport=StreamingASGITransport(fails_during)) as client:
            with pytest.raises(LookupError):
                await client.get("http://gw/")

        quiet = StreamingASGITransport(fails_before, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=quiet) as client:
            assert (await client.get("http://gw/")).status_code == 500
        quiet = StreamingASGITransport(fails_during, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=quiet) as client:
            with pytest.raises(httpx.RemoteProtocolError):
                await client.get("http://gw/")
        assert [type(e) for e in quiet.app_errors] == [LookupError]


async def test_streaming_client_with_cut_upstream_is_a_protocol_error() -> None:
    transport = StreamingASGITransport(FakeUpstream([cut_reply("abc")]))
    async with asyncio.timeout(TIMEOUT), httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(httpx.RemoteProtocolError):
            await client.post("http://gw/v1/chat/completions", json=chat_body())


async def test_asgi_lifespan_state_reaches_requests() -> None:
    events: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                events.append(message["type"])
                if message["type"] == "lifespan.startup":
                    scope["state"]["pool"] = "ready"
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": scope["state"]["pool"].encode()})

    async with asyncio.timeout(TIMEOUT), asgi_lifespan(app) as state:
        transport = StreamingASGITransport(app, state=state)
        async with httpx.AsyncClient(transport=transport) as client:
            assert (await client.get("http://gw/")).text == "ready"
    assert events == ["lifespan.startup", "lifespan.shutdown"]


async def test_asgi_lifespan_tolerates_apps_without_lifespan() -> None:
    async def plain(scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http", "no lifespan here"

    async with asyncio.timeout(TIMEOUT), asgi_lifespan(plain) as state:
        assert state == {}
