"""FakeUpstream (tests/support/fake_upstream.py): the OpenAI wire shapes of its streamed and
non-streamed replies, its scripts and records, the cuts, stalls and delays it plays, the
disconnects it counts, and the openai SDK reading it. Every other test and the benchmarks rely on
it, so these are pinned here."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import openai
import orjson
import pytest

from codexgate.backends.http.transport import HttpRequest
from codexgate.errors import UpstreamConnectError
from tests.support.asgi_client import StreamingASGITransport
from tests.support.asgi_upstream import ASGIUpstreamResponse, ASGIUpstreamTransport
from tests.support.chat_calls import TIMEOUT, UPSTREAM, chat, chat_body, choice_deltas, chunks_of, open_chat
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

# -- fake upstream, streamed -----------------------------------------------------------------------


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


# -- fake upstream, non-streamed and errors --------------------------------------------------------


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
    upstream, response, pieces = await chat([error_reply(429, body, {"Retry-After": "2"})], chat_body())
    assert response.status == 429
    assert response.headers["retry-after"] == "2"
    assert response.headers["content-type"] == "application/json"
    assert orjson.loads(b"".join(pieces)) == body
    assert upstream.completed == 1

    _, response, pieces = await chat([error_reply(502, b"<html>Bad gateway</html>")], chat_body())
    assert response.status == 502 and b"".join(pieces) == b"<html>Bad gateway</html>"


async def test_raw_reply_sends_exact_bytes() -> None:
    raw = [b'data: {"partial":', b" true}\n\n", b": keep-alive\n\n", b"data: [DONE]\n\n"]
    _, response, pieces = await chat([raw_reply(raw, headers={"x-custom": "1"})], chat_body())
    assert pieces == raw
    assert response.headers["X-Custom"] == "1" and "content-type" not in response.headers


async def test_unparseable_body_and_unknown_paths() -> None:
    upstream = FakeUpstream([text_reply("unused")])
    transport = ASGIUpstreamTransport(upstream)
    async with asyncio.timeout(TIMEOUT):
        response = await transport.open(HttpRequest("POST", UPSTREAM, {}, b"{not json", 5.0))
        assert response.status == 400
        assert "parse" in orjson.loads(await response.read())["error"]["message"]
        response = await transport.open(HttpRequest("POST", "http://upstream.test/v1/nope", {}, b"{}", 5.0))
        assert response.status == 404
        response = await transport.open(HttpRequest("GET", UPSTREAM, {}, None, 5.0))
        assert response.status == 405
    assert upstream.requests == [] and upstream.remaining == 1


async def test_models_endpoint() -> None:
    upstream = FakeUpstream(models=["alpha", "beta"])
    transport = ASGIUpstreamTransport(upstream)
    async with asyncio.timeout(TIMEOUT):
        response = await transport.open(HttpRequest("GET", "http://upstream.test/v1/models", {}, None, 5.0))
        payload = orjson.loads(await response.read())
    assert payload["object"] == "list"
    assert [(m["id"], m["object"], m["owned_by"]) for m in payload["data"]] == [
        ("alpha", "model", "fake"),
        ("beta", "model", "fake"),
    ]
    assert upstream.model_list_requests == 1


# -- scripting and recording -----------------------------------------------------------------------


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
        second = await (await open_chat(transport, chat_body(stream=False, messages=messages))).read()
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


# -- cuts, stalls, delays --------------------------------------------------------------------------


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


# -- disconnects, as the fake counts them ----------------------------------------------------------


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


# -- the openai SDK against the fake upstream (realism check of both) ------------------------------


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
