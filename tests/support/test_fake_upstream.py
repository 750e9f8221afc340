"""Tests for the test infrastructure in tests/support: every other test and the benchmarks rely
on it, so its wire shapes, streaming and disconnect behaviour are pinned here."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx
import openai
import orjson
import pytest

from codexgate.backends.transport import AiohttpTransport
from codexgate.errors import UpstreamConnectError, UpstreamTimeout
from tests.support._exchange import Receive, Scope, Send
from tests.support.asgi_client import StreamingASGITransport, asgi_lifespan
from tests.support.asgi_upstream import ASGIUpstreamResponse, ASGIUpstreamTransport
from tests.support.fake_upstream import (
    FakeUpstream,
    Reply,
    ToolCall,
    Usage,
    cut_reply,
    error_reply,
    openai_error,
    raw_reply,
    stall_reply,
    text_reply,
    tool_calls_reply,
)
from tests.support.servers import arun_asgi_server, run_asgi_server

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
        "POST", UPSTREAM, headers or {"Content-Type": "application/json"}, orjson.dumps(body), 5.0
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


# -- fake upstream, streamed ---------------------------------------------------------------------


async def test_text_reply_streams_openai_shaped_chunks() -> None:
    upstream, response, pieces = await chat([text_reply("Hello, world!")], chat_body())
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/event-stream")
    assert len(pieces) > 1  # delivered as sent, not as one buffer
    chunks, done = chunks_of(b"".join(pieces))
    assert done
    ids = {c["id"] for c in chunks}
    assert len(ids) == 1 and ids.pop().startswith("chatcmpl-")
    for c in chunks:
        assert c["object"] == "chat.completion.chunk"
        assert isinstance(c["created"], int)
        assert c["model"] == "test-model"
    *choice_chunks, usage_chunk = chunks
    for c in choice_chunks:
        (choice,) = c["choices"]
        assert set(choice) >= {"index", "delta", "finish_reason"} and choice["index"] == 0
        assert c["usage"] is None  # OpenAI sends usage: null until the last chunk
    deltas = choice_deltas(choice_chunks)
    assert deltas[0]["role"] == "assistant" and deltas[0]["content"] == ""
    assert "".join(d.get("content") or "" for d in deltas) == "Hello, world!"
    assert [d.get("content") for d in deltas[1:-1]] == ["Hell", "o, w", "orld", "!"]
    assert [c["choices"][0]["finish_reason"] for c in choice_chunks[:-1]] == [None] * 5
    assert choice_chunks[-1]["choices"][0] == {
        "index": 0,
        "delta": {},
        "logprobs": None,
        "finish_reason": "stop",
    }
    assert usage_chunk["choices"] == []
    usage = usage_chunk["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0
    assert usage["completion_tokens_details"]["reasoning_tokens"] == 0
    assert upstream.completed == 1 and upstream.disconnects == 0


async def test_no_usage_chunk_unless_requested_or_when_disabled() -> None:
    _, _, pieces = await chat([text_reply("abc")], chat_body(include_usage=False))
    chunks, done = chunks_of(b"".join(pieces))
    assert done and all(c["choices"] for c in chunks) and all("usage" not in c for c in chunks)

    _, _, pieces = await chat([text_reply("abc", usage=False)], chat_body())
    chunks, done = chunks_of(b"".join(pieces))
    assert done and all(c["choices"] for c in chunks)


async def test_explicit_usage_model_and_finish_reason() -> None:
    usage = Usage(prompt_tokens=100, completion_tokens=7, cached_tokens=64, reasoning_tokens=3)
    reply = text_reply("cut short", usage=usage, finish_reason="length", model="resolved-model")
    _, _, pieces = await chat([reply], chat_body())
    chunks, _ = chunks_of(b"".join(pieces))
    assert {c["model"] for c in chunks} == {"resolved-model"}
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["usage"] == {
        "prompt_tokens": 100,
        "completion_tokens": 7,
        "total_tokens": 107,
        "prompt_tokens_details": {"cached_tokens": 64, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 3,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


async def test_reasoning_is_streamed_before_text() -> None:
    reply = text_reply("Answer.", reasoning="Let me think.", chunk_chars=5)
    _, _, pieces = await chat([reply], chat_body())
    chunks, _ = chunks_of(b"".join(pieces))
    deltas = choice_deltas(chunks)[1:-1]
    kinds = ["reasoning" if "reasoning_content" in d else "text" for d in deltas]
    assert kinds == ["reasoning"] * 3 + ["text"] * 2
    assert "".join(d.get("reasoning_content", "") for d in deltas) == "Let me think."
    assert "".join(d.get("content", "") for d in deltas) == "Answer."
    assert chunks[-1]["usage"]["completion_tokens_details"]["reasoning_tokens"] == 4


async def test_parallel_tool_calls_stream_like_openai() -> None:
    args0, args1 = '{"command": ["ls", "-la"]}', '{"path": "README.md"}'
    reply = tool_calls_reply([("shell", args0), ("read_file", args1, "call_fixed")])
    _, _, pieces = await chat([reply], chat_body())
    chunks, done = chunks_of(b"".join(pieces))
    assert done
    deltas = choice_deltas(chunks)
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert deltas[-1] == {}
    # No text: the role rides on the first tool-call delta, with content null.
    assert deltas[0]["role"] == "assistant" and deltas[0]["content"] is None
    calls = [tc for d in deltas[:-1] for tc in d["tool_calls"]]
    assert all(len(d["tool_calls"]) == 1 for d in deltas[:-1])
    headers = [tc for tc in calls if "id" in tc]
    assert [h["index"] for h in headers] == [0, 1]
    for h, name in zip(headers, ["shell", "read_file"], strict=True):
        assert h["type"] == "function"
        assert h["function"] == {"name": name, "arguments": ""}
        assert h["id"].startswith("call_")
    assert headers[1]["id"] == "call_fixed"
    fragments = {0: "", 1: ""}
    for tc in calls:
        if "id" not in tc:
            assert set(tc) == {"index", "function"} and set(tc["function"]) == {"arguments"}
            assert len(tc["function"]["arguments"]) <= 8
            fragments[tc["index"]] += tc["function"]["arguments"]
    assert fragments == {0: args0, 1: args1}
    # Call 0 is streamed completely before call 1 starts.
    order = [tc["index"] for tc in calls]
    assert order == sorted(order)


async def test_tool_calls_after_text() -> None:
    reply = tool_calls_reply([ToolCall("shell", "{}", id="call_1")], text="Running it.")
    _, _, pieces = await chat([reply], chat_body())
    chunks, _ = chunks_of(b"".join(pieces))
    deltas = choice_deltas(chunks)
    assert deltas[0] == {"role": "assistant", "content": "", "refusal": None}
    assert sum(1 for d in deltas if "role" in d) == 1
    text = "".join(d.get("content") or "" for d in deltas)
    first_call = next(i for i, d in enumerate(deltas) if "tool_calls" in d)
    assert text == "Running it." and all("content" not in d for d in deltas[first_call:])
    assert deltas[first_call]["tool_calls"][0]["id"] == "call_1"


# -- fake upstream, non-streamed and errors ------------------------------------------------------


async def test_non_streamed_completion() -> None:
    for stream_field in ({}, {"stream": False}):
        body = {**chat_body(stream=False), **stream_field}
        _, response, pieces = await chat([text_reply("Hi there", reasoning="hmm")], body)
        assert response.headers["content-type"] == "application/json"
        payload = orjson.loads(b"".join(pieces))
        assert int(response.headers["content-length"]) == len(b"".join(pieces))
        assert payload["object"] == "chat.completion"
        assert payload["id"].startswith("chatcmpl-") and payload["model"] == "test-model"
        (choice,) = payload["choices"]
        assert choice["finish_reason"] == "stop"
        assert choice["message"]["role"] == "assistant"
        assert choice["message"]["content"] == "Hi there"
        assert choice["message"]["reasoning_content"] == "hmm"
        assert payload["usage"]["total_tokens"] > 0


async def test_non_streamed_tool_calls() -> None:
    reply = tool_calls_reply([("shell", '{"cmd": "ls"}', "call_a"), ("shell", "{}", "call_b")])
    _, response, pieces = await chat([reply], chat_body(stream=False))
    message = orjson.loads(b"".join(pieces))["choices"][0]["message"]
    assert message["content"] is None
    assert message["tool_calls"] == [
        {"id": "call_a", "type": "function", "function": {"name": "shell", "arguments": '{"cmd": "ls"}'}},
        {"id": "call_b", "type": "function", "function": {"name": "shell", "arguments": "{}"}},
    ]


async def test_error_replies() -> None:
    body = openai_error("Rate limit reached", error_type="rate_limit_error", code="rate_limit")
    upstream, response, pieces = await chat(
        [error_reply(429, body, {"Retry-After": "2"})], chat_body()
    )
    assert response.status == 429
    assert response.headers["retry-after"] == "2"
    assert response.headers["content-type"] == "application/json"
    assert orjson.loads(b"".join(pieces)) == body
    assert upstream.completed == 1

    _, response, pieces = await chat([error_reply(502, b"<html>Bad gateway</html>")], chat_body())
    assert response.status == 502 and b"".join(pieces) == b"<html>Bad gateway</html>"


async def test_raw_reply_sends_exact_bytes() -> None:
    raw = [b"data: {\"partial\":", b" true}\n\n", b": keep-alive\n\n", b"data: [DONE]\n\n"]
    _, response, pieces = await chat([raw_reply(raw, headers={"x-custom": "1"})], chat_body())
    assert pieces == raw
    assert response.headers["X-Custom"] == "1" and "content-type" not in response.headers


async def test_unparseable_body_and_unknown_paths() -> None:
    upstream = FakeUpstream([text_reply("unused")])
    transport = ASGIUpstreamTransport(upstream)
    async with asyncio.timeout(TIMEOUT):
        response = await transport.open("POST", UPSTREAM, {}, b"{not json", 5.0)
        assert response.status == 400
        assert "parse" in orjson.loads(await response.read())["error"]["message"]
        response = await transport.open("POST", "http://upstream.test/v1/nope", {}, b"{}", 5.0)
        assert response.status == 404
        response = await transport.open("GET", UPSTREAM, {}, None, 5.0)
        assert response.status == 405
    assert upstream.requests == [] and upstream.remaining == 1


async def test_models_endpoint() -> None:
    upstream = FakeUpstream(models=["alpha", "beta"])
    transport = ASGIUpstreamTransport(upstream)
    async with asyncio.timeout(TIMEOUT):
        response = await transport.open("GET", "http://upstream.test/v1/models", {}, None, 5.0)
        payload = orjson.loads(await response.read())
    assert payload["object"] == "list"
    assert [(m["id"], m["object"], m["owned_by"]) for m in payload["data"]] == [
        ("alpha", "model", "fake"),
        ("beta", "model", "fake"),
    ]
    assert upstream.model_list_requests == 1


# -- scripting and recording -------------------------------------------------------------------


async def test_requests_are_recorded_with_lowercased_headers() -> None:
    upstream = FakeUpstream([text_reply("one"), text_reply("two")])
    transport = ASGIUpstreamTransport(upstream)
    async with asyncio.timeout(TIMEOUT):
        for n in (1, 2):
            body = chat_body(n=n)
            headers = {"Authorization": "Bearer sk-test", "X-Trace": str(n)}
            response = await open_chat(transport, body, headers)
            await response.read()
    assert [r.body["n"] for r in upstream.requests] == [1, 2]
    first = upstream.requests[0]
    assert first.method == "POST" and first.path == "/v1/chat/completions"
    assert first.headers["authorization"] == "Bearer sk-test"
    assert first.headers["x-trace"] == "1" and first.headers["host"] == "upstream.test"
    assert first.body == chat_body(n=1) and not first.disconnected
    assert upstream.remaining == 0


async def test_callable_script_answers_by_conversation() -> None:
    def agent(body: dict[str, Any]) -> Reply:
        if body["messages"][-1]["role"] == "tool":
            return text_reply("done: " + body["messages"][-1]["content"])
        return tool_calls_reply([("shell", '{"cmd":"ls"}', "call_ls")])

    upstream = FakeUpstream(agent)
    transport = ASGIUpstreamTransport(upstream)
    async with asyncio.timeout(TIMEOUT):
        first = await (await open_chat(transport, chat_body(stream=False))).read()
        call = orjson.loads(first)["choices"][0]["message"]["tool_calls"][0]
        messages = [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": "README.md"},
        ]
        second = await (
            await open_chat(transport, chat_body(stream=False, messages=messages))
        ).read()
    assert orjson.loads(second)["choices"][0]["message"]["content"] == "done: README.md"
    with pytest.raises(TypeError):
        upstream.add(text_reply("x"))


async def test_exhausted_or_failing_script_answers_500_loudly() -> None:
    upstream = FakeUpstream([text_reply("only one")])
    transport = ASGIUpstreamTransport(upstream)
    async with asyncio.timeout(TIMEOUT):
        await (await open_chat(transport, chat_body())).read()
        response = await open_chat(transport, chat_body())
        assert response.status == 500
        error = orjson.loads(await response.read())["error"]
    assert "script exhausted" in error["message"] and upstream.errors == [error["message"]]
    upstream.add(text_reply("more"))
    async with asyncio.timeout(TIMEOUT):
        assert (await open_chat(transport, chat_body())).status == 200

    def broken(body: dict[str, Any]) -> Reply:
        raise KeyError("messages")

    upstream = FakeUpstream(broken)
    async with asyncio.timeout(TIMEOUT):
        response = await open_chat(ASGIUpstreamTransport(upstream), chat_body())
        assert response.status == 500
        assert "KeyError" in orjson.loads(await response.read())["error"]["message"]


# -- cuts, stalls, delays ------------------------------------------------------------------------


async def test_cut_reply_breaks_the_connection() -> None:
    upstream = FakeUpstream([cut_reply("partial answer")])
    transport = ASGIUpstreamTransport(upstream)
    received: list[bytes] = []
    async with asyncio.timeout(TIMEOUT):
        response = await open_chat(transport, chat_body())
        with pytest.raises(UpstreamConnectError):
            async for piece in response.iter_chunks():
                received.append(piece)
        await response.aclose()
    chunks, done = chunks_of(b"".join(received))
    assert not done
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks)
    assert "".join(d.get("content") or "" for d in choice_deltas(chunks)) == "partial answer"
    assert upstream.disconnects == 0


async def test_cut_non_streamed_reply_truncates_the_body() -> None:
    upstream = FakeUpstream([cut_reply("partial answer")])
    async with asyncio.timeout(TIMEOUT):
        response = await open_chat(ASGIUpstreamTransport(upstream), chat_body(stream=False))
        with pytest.raises(UpstreamConnectError):
            await response.read()


async def test_raw_reply_cut() -> None:
    upstream = FakeUpstream([raw_reply([b"data: {}\n\n"], cut=True)])
    async with asyncio.timeout(TIMEOUT):
        response = await open_chat(ASGIUpstreamTransport(upstream), chat_body())
        with pytest.raises(UpstreamConnectError):
            await response.read()


async def timed_pieces(response: ASGIUpstreamResponse) -> list[tuple[float, bytes]]:
    return [(time.monotonic(), piece) async for piece in response.iter_chunks()]


async def test_stall_reply_goes_silent_then_finishes() -> None:
    stall = 0.3
    upstream = FakeUpstream([stall_reply("Hello world", stall)])
    async with asyncio.timeout(TIMEOUT):
        response = await open_chat(ASGIUpstreamTransport(upstream), chat_body())
        pieces = await timed_pieces(response)
    chunks, done = chunks_of(b"".join(p for _, p in pieces))
    assert done and "".join(d.get("content") or "" for d in choice_deltas(chunks)) == "Hello world"
    gaps = [b[0] - a[0] for a, b in zip(pieces, pieces[1:], strict=False)]
    # The silence falls after the role chunk and the first text fragment, and only there.
    assert gaps[1] >= stall * 0.9
    assert sum(gaps) - gaps[1] < stall


async def test_delay_between_chunks_paces_the_stream() -> None:
    delay = 0.02
    reply = text_reply("x" * 10, chunk_chars=1, delay_between_chunks=delay)  # 14 events
    upstream = FakeUpstream([reply])
    async with asyncio.timeout(TIMEOUT):
        response = await open_chat(ASGIUpstreamTransport(upstream), chat_body())
        pieces = await timed_pieces(response)
    assert len(pieces) == 14
    assert pieces[-1][0] - pieces[0][0] >= 13 * delay * 0.9


# -- disconnects --------------------------------------------------------------------------------


async def test_early_aclose_is_seen_as_a_disconnect() -> None:
    upstream = FakeUpstream([stall_reply("Hello world", stall_seconds=60)])
    transport = ASGIUpstreamTransport(upstream)
    async with asyncio.timeout(TIMEOUT):
        response = await open_chat(transport, chat_body())
        first = await anext(aiter(response.iter_chunks()))
        assert b'"role":"assistant"' in first
        assert upstream.in_flight == 1
        await response.aclose()
        await response.aclose()  # idempotent
    assert upstream.disconnects == 1 and upstream.completed == 0 and upstream.in_flight == 0
    assert upstream.requests[0].disconnected
    assert response.closed and response.disconnected and not response.app_running
    assert not response.forced_cancel  # the app noticed the disconnect by itself


async def test_early_aclose_of_a_fast_stream_is_a_disconnect() -> None:
    upstream = FakeUpstream([text_reply("x" * 2000, chunk_chars=1)])
    async with asyncio.timeout(TIMEOUT):
        response = await open_chat(ASGIUpstreamTransport(upstream), chat_body())
        await anext(aiter(response.iter_chunks()))
        await response.aclose()
    assert upstream.disconnects == 1 and upstream.completed == 0


async def test_closing_after_the_end_is_not_a_disconnect() -> None:
    upstream, response, _ = await chat([text_reply("short")], chat_body())
    assert upstream.disconnects == 0 and upstream.completed == 1
    assert not response.disconnected and not response.app_running


async def test_aclose_from_another_task_wakes_a_blocked_reader() -> None:
    """A gateway may close the upstream response from its disconnect watcher while its relay
    task is waiting for the next chunk: the reader must fail at once, not hang."""
    upstream = FakeUpstream([stall_reply("Hello world", stall_seconds=60)])
    async with asyncio.timeout(TIMEOUT):
        response = await open_chat(ASGIUpstreamTransport(upstream), chat_body())
        first_two = asyncio.Event()

        async def read_all() -> None:
            count = 0
            async for _ in response.iter_chunks():
                count += 1
                if count == 2:
                    first_two.set()

        reader = asyncio.create_task(read_all())
        await first_two.wait()  # the reader is now blocked in the stall
        await response.aclose()
        with pytest.raises(UpstreamConnectError):
            await reader
    assert upstream.disconnects == 1


async def test_transport_aclose_aborts_open_responses() -> None:
    upstream = FakeUpstream([stall_reply("a", 60), stall_reply("b", 60)])
    transport = ASGIUpstreamTransport(upstream)
    async with asyncio.timeout(TIMEOUT):
        for _ in range(2):
            await open_chat(transport, chat_body())
        await transport.aclose()
    assert upstream.disconnects == 2
    assert all(r.closed and not r.app_running for r in transport.responses)


async def test_send_raising_is_a_disconnect_too() -> None:
    """Servers that raise from send() instead of reporting http.disconnect."""
    upstream = FakeUpstream([text_reply("x" * 100, chunk_chars=1)])
    request_sent = False
    body_messages = 0

    async def receive() -> dict[str, Any]:
        nonlocal request_sent
        if not request_sent:
            request_sent = True
            return {"type": "http.request", "body": orjson.dumps(chat_body()), "more_body": False}
        await asyncio.Event().wait()  # never reports the disconnect
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        nonlocal body_messages
        if message["type"] == "http.response.body":
            body_messages += 1
            if body_messages > 3:
                raise ConnectionResetError("peer gone")

    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []}
    async with asyncio.timeout(TIMEOUT):
        await upstream(scope, receive, send)  # type: ignore[arg-type]
    assert upstream.disconnects == 1 and upstream.requests[0].disconnected
    assert upstream.in_flight == 0 and body_messages == 4


# -- ASGIUpstreamTransport specifics ---------------------------------------------------------------


async def test_simulated_connect_failures() -> None:
    with pytest.raises(UpstreamConnectError):
        await ASGIUpstreamTransport(None).open("POST", UPSTREAM, {}, b"{}", 1.0)

    upstream = FakeUpstream([text_reply("after recovery")])
    transport = ASGIUpstreamTransport(upstream, fail_connect=True)
    with pytest.raises(UpstreamConnectError):
        await open_chat(transport, chat_body())
    transport.fail_connect = False
    async with asyncio.timeout(TIMEOUT):
        assert (await open_chat(transport, chat_body())).status == 200
    assert transport.opened == 1

    transport = ASGIUpstreamTransport(upstream, connect_delay=10.0)
    async with asyncio.timeout(TIMEOUT):
        with pytest.raises(UpstreamTimeout):
            await transport.open("POST", UPSTREAM, {}, b"{}", 0.01)


async def test_app_crash_before_headers_is_a_connect_error() -> None:
    async def crashing(scope: Scope, receive: Receive, send: Send) -> None:
        raise ValueError("boom")

    async with asyncio.timeout(TIMEOUT):
        with pytest.raises(UpstreamConnectError) as caught:
            await ASGIUpstreamTransport(crashing).open("GET", UPSTREAM, {}, None, 1.0)
    assert isinstance(caught.value.__cause__, ValueError)


async def test_slow_reader_back_pressures_the_app() -> None:
    sent = 0
    finished = asyncio.Event()

    async def firehose(scope: Scope, receive: Receive, send: Send) -> None:
        nonlocal sent
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for _ in range(100):
            await send({"type": "http.response.body", "body": b"x", "more_body": True})
            sent += 1
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        finished.set()

    transport = ASGIUpstreamTransport(firehose, buffer_chunks=4)
    async with asyncio.timeout(TIMEOUT):
        response = await transport.open("GET", UPSTREAM, {}, None, 1.0)
        for _ in range(50):
            await asyncio.sleep(0)
        assert sent <= 5 and not finished.is_set()
        assert len(await response.read()) == 100
        await finished.wait()


# -- StreamingASGITransport --------------------------------------------------------------------------


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
    async with asyncio.timeout(TIMEOUT), httpx.AsyncClient(
        transport=transport, base_url="http://gw"
    ) as client:
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
        response = await upstream_transport.open("POST", UPSTREAM, {}, body, 5.0)
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

    transport = StreamingASGITransport(deaf, disconnect_grace=0.05)
    async with asyncio.timeout(TIMEOUT), httpx.AsyncClient(transport=transport) as client:
        async with client.stream("GET", "http://gw/") as response:
            await anext(aiter(response.aiter_raw()))
    assert cancelled.is_set() and transport.forced_cancellations == 1


async def test_streaming_client_passes_the_request_through() -> None:
    seen: dict[str, Any] = {}

    async def echo(scope: Scope, receive: Receive, send: Send) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        seen.update(scope=scope, body=body)
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": body})

    async def upload() -> AsyncIterator[bytes]:
        for part in (b"streamed ", b"request ", b"body"):
            yield part

    async with asyncio.timeout(TIMEOUT), httpx.AsyncClient(
        transport=StreamingASGITransport(echo), base_url="http://gw:8080"
    ) as client:
        response = await client.post(
            "/v1/a%20b?x=1&y=2", content=upload(), headers={"X-Mixed-Case": "v"}
        )
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


# -- the openai SDK against the fake upstream (realism check of both) -----------------------------


def sdk_client(app: FakeUpstream) -> openai.AsyncOpenAI:
    http_client = httpx.AsyncClient(transport=StreamingASGITransport(app))
    # openai>=3 is typed for httpx2 clients but accepts (legacy) httpx ones at run time.
    return openai.AsyncOpenAI(
        base_url="http://gw/v1",
        api_key="x",
        http_client=http_client,  # type: ignore[arg-type]
    )


async def test_openai_sdk_reads_streamed_text_and_usage() -> None:
    upstream = FakeUpstream([text_reply("Hello from the fake", usage=Usage(10, 5))])
    async with asyncio.timeout(TIMEOUT), sdk_client(upstream) as client:
        stream = await client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        text, usage = "", None
        async for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
            if chunk.usage:
                usage = chunk.usage
    assert text == "Hello from the fake"
    assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (10, 5)
    assert upstream.requests[0].headers["authorization"] == "Bearer x"


async def test_openai_sdk_reads_tool_calls_and_non_streamed_replies() -> None:
    upstream = FakeUpstream(
        [
            tool_calls_reply([("shell", '{"command": "ls"}'), ("shell", '{"command": "pwd"}')]),
            text_reply("plain", reasoning="thought"),
        ]
    )
    async with asyncio.timeout(TIMEOUT), sdk_client(upstream) as client:
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        calls: dict[int, dict[str, str]] = {}
        finish = None
        async for chunk in stream:
            choice = chunk.choices[0]
            finish = choice.finish_reason or finish
            for tc in choice.delta.tool_calls or []:
                call = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                call["id"] += tc.id or ""
                call["name"] += (tc.function and tc.function.name) or ""
                call["arguments"] += (tc.function and tc.function.arguments) or ""
        completion = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "again"}]
        )
        models = [m.id async for m in client.models.list()]
    assert finish == "tool_calls"
    assert [(c["name"], c["arguments"]) for c in calls.values()] == [
        ("shell", '{"command": "ls"}'),
        ("shell", '{"command": "pwd"}'),
    ]
    assert all(c["id"].startswith("call_") for c in calls.values())
    assert completion.choices[0].message.content == "plain"
    assert models == ["fake-model"]


# -- real servers ---------------------------------------------------------------------------------


def test_run_asgi_server_serves_over_tcp() -> None:
    upstream = FakeUpstream([text_reply("over tcp")], models=["m1"])
    with run_asgi_server(upstream) as base_url:
        assert base_url.startswith("http://127.0.0.1:")
        with httpx.Client(base_url=base_url, timeout=TIMEOUT) as client:
            response = client.post("/v1/chat/completions", json=chat_body())
            models = client.get("/v1/models").json()
    chunks, done = chunks_of(response.content)
    assert done and "".join(d.get("content") or "" for d in choice_deltas(chunks)) == "over tcp"
    assert models["data"][0]["id"] == "m1"
    assert response.headers["transfer-encoding"] == "chunked"
    with pytest.raises(httpx.ConnectError):  # shut down: nobody listens any more
        httpx.get(base_url + "/v1/models", timeout=TIMEOUT)


async def test_aiohttp_streams_from_a_served_fake_upstream() -> None:
    upstream = FakeUpstream([text_reply("streamed", delay_between_chunks=0.01)])
    async with arun_asgi_server(upstream) as base_url, aiohttp.ClientSession() as session:
        async with asyncio.timeout(TIMEOUT), session.post(
            base_url + "/v1/chat/completions", json=chat_body()
        ) as response:
            pieces = [piece async for piece in response.content.iter_any()]
    assert len(pieces) > 1
    chunks, done = chunks_of(b"".join(pieces))
    assert done and "".join(d.get("content") or "" for d in choice_deltas(chunks)) == "streamed"


async def test_production_transport_sees_the_same_cuts_and_disconnects() -> None:
    """The in-process semantics must match what AiohttpTransport meets over real TCP."""
    upstream = FakeUpstream([cut_reply("partial"), stall_reply("slow", 60)])
    transport = AiohttpTransport()
    try:
        async with arun_asgi_server(upstream) as base_url, asyncio.timeout(TIMEOUT):
            url = base_url + "/v1/chat/completions"
            body = orjson.dumps(chat_body())
            response = await transport.open("POST", url, {}, body, 5.0)
            with pytest.raises(UpstreamConnectError):
                await response.read()
            await response.aclose()

            response = await transport.open("POST", url, {}, body, 5.0)
            await anext(aiter(response.iter_chunks()))
            await response.aclose()
            await upstream.wait_for_disconnects(1)
            assert upstream.requests[1].disconnected and upstream.disconnects == 1
    finally:
        await transport.aclose()


async def test_arun_asgi_server_in_the_callers_loop() -> None:
    loop_of_app: list[asyncio.AbstractEventLoop] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # no lifespan support: tolerated with lifespan="auto"
        loop_of_app.append(asyncio.get_running_loop())
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"same loop"})

    async with arun_asgi_server(app, same_loop=True) as base_url:
        async with httpx.AsyncClient(timeout=TIMEOUT) as client:
            assert (await client.get(base_url)).text == "same loop"
    assert loop_of_app == [asyncio.get_running_loop()]


def test_run_asgi_server_fails_clearly_when_startup_fails() -> None:
    async def broken(scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "lifespan"
        await receive()
        await send({"type": "lifespan.startup.failed", "message": "no config"})

    started = time.monotonic()
    with pytest.raises(RuntimeError, match="startup"), run_asgi_server(broken):
        pass
    assert time.monotonic() - started < TIMEOUT

