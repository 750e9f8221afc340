"""`POST /v1/chat/completions` through the real app in-process, with the official `openai` SDK
as the client, over the chat backend and a scripted upstream (no network)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import openai
import pytest

from codexgate.app import build_app
from codexgate.config import load_settings
from tests.support.asgi_client import StreamingASGITransport
from tests.support.asgi_upstream import ASGIUpstreamTransport
from tests.support.fake_upstream import (
    FakeUpstream,
    cut_reply,
    error_reply,
    openai_error,
    text_reply,
    tool_calls_reply,
)
from tests.support.tools import WEATHER, the_tool_call, with_tool_result

UPSTREAM = "http://upstream.test/v1"
IMAGE = "data:image/png;base64,iVBORw0KGgo="


@asynccontextmanager
async def chat_client(script: Any) -> AsyncIterator[tuple[openai.AsyncOpenAI, FakeUpstream]]:
    fake = FakeUpstream(script)
    settings = load_settings({"upstream": UPSTREAM, "discover": False, "retry_backoff": 0.01}, environ={})
    app = build_app(settings, transport=ASGIUpstreamTransport(fake), environ={})
    http = httpx.AsyncClient(transport=StreamingASGITransport(app), base_url="http://gw/v1", timeout=10)
    async with http:
        yield (
            openai.AsyncOpenAI(api_key="unused", base_url="http://gw/v1", http_client=http, max_retries=0),
            fake,
        )


async def test_a_streamed_answer_reads_as_the_sdk_expects() -> None:
    async with chat_client([text_reply("Hello there!", reasoning="The user greets me.")]) as (client, fake):
        stream = await client.chat.completions.create(
            model="qwen",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    reasoning = "".join(
        getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks if c.choices
    )
    assert (text, reasoning) == ("Hello there!", "The user greets me.")
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0
    assert len({c.id for c in chunks}) == 1 and chunks[0].id.startswith("chatcmpl-")
    sent = fake.requests[0].body
    assert sent["messages"] == [{"role": "user", "content": "hi"}] and sent["model"] == "qwen"


async def test_a_tool_call_and_its_result_make_a_conversation() -> None:
    calls = [("get_weather", '{"city": "Oslo"}', "call_w1")]
    script = [tool_calls_reply(calls, text="Let me check."), text_reply("Sunny in Oslo.")]
    async with chat_client(script) as (client, fake):
        messages: list[Any] = [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Weather?"},
                                         {"type": "image_url", "image_url": {"url": IMAGE}}]},
        ]  # fmt: skip
        first = await client.chat.completions.create(model="qwen", messages=messages, tools=[WEATHER])
        call = the_tool_call(first)
        assert first.choices[0].message.content == "Let me check."
        assert (call.id, call.function.name, call.function.arguments) == (
            "call_w1",
            "get_weather",
            '{"city": "Oslo"}',
        )
        messages += with_tool_result(first, "21 C, sunny")
        second = await client.chat.completions.create(model="qwen", messages=messages, tools=[WEATHER])
    assert second.choices[0].message.content == "Sunny in Oslo."
    upstream = fake.requests[1].body["messages"]
    assert upstream[0] == {"role": "system", "content": "Be brief."}
    assert upstream[1]["content"][1] == {"type": "image_url", "image_url": {"url": IMAGE, "detail": "auto"}}
    assert upstream[2]["tool_calls"][0]["id"] == "call_w1"
    assert upstream[3] == {"role": "tool", "tool_call_id": "call_w1", "content": "21 C, sunny"}
    assert fake.requests[1].body["tools"][0]["function"]["name"] == "get_weather"


async def test_sampling_stop_seed_and_penalties_reach_a_chat_upstream() -> None:
    async with chat_client([text_reply("ok")]) as (client, fake):
        await client.chat.completions.create(
            model="qwen",
            messages=[{"role": "user", "content": "hi"}],
            temperature=0.2,
            top_p=0.9,
            seed=7,
            stop=["END"],
            max_tokens=50,
            frequency_penalty=0.5,
            presence_penalty=0.1,
            response_format={"type": "json_object"},
        )
    sent = fake.requests[0].body
    assert (sent["temperature"], sent["top_p"], sent["seed"], sent["stop"]) == (0.2, 0.9, 7, ["END"])
    assert (sent["max_tokens"], sent["frequency_penalty"], sent["presence_penalty"]) == (50, 0.5, 0.1)
    assert sent["response_format"] == {"type": "json_object"}


async def test_a_tool_call_an_open_model_wrote_as_text_reaches_the_client_as_a_tool_call() -> None:
    written = 'Checking.<tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}</tool_call>'
    async with chat_client([text_reply(written)]) as (client, _):
        answer = await client.chat.completions.create(
            model="qwen", messages=[{"role": "user", "content": "Rome?"}], tools=[WEATHER]
        )
    message = answer.choices[0].message
    assert message.content == "Checking." and answer.choices[0].finish_reason == "tool_calls"
    assert [(c.function.name, c.function.arguments) for c in message.tool_calls or []] == [
        ("get_weather", '{"city":"Rome"}')
    ]


@pytest.mark.parametrize(
    ("extra", "param"),
    [({"n": 2}, "n"), ({"logprobs": True}, "logprobs"), ({"modalities": ["text", "audio"]}, "modalities")],
)
async def test_what_cannot_be_honoured_is_a_400_naming_the_field(extra: dict[str, Any], param: str) -> None:
    async with chat_client([]) as (client, fake):
        with pytest.raises(openai.BadRequestError) as info:
            await client.chat.completions.create(
                model="qwen", messages=[{"role": "user", "content": "hi"}], **extra
            )
    assert info.value.body["param"] == param and fake.requests == []  # type: ignore[index]


async def test_an_upstream_error_before_the_stream_is_an_http_error_the_sdk_raises() -> None:
    overflow = error_reply(
        400, openai_error("maximum context length is 10 tokens", code="context_length_exceeded")
    )
    async with chat_client([overflow]) as (client, _):
        with pytest.raises(openai.BadRequestError) as info:
            await client.chat.completions.create(
                model="qwen", messages=[{"role": "user", "content": "hi"}], stream=True
            )
    assert info.value.code == "context_length_exceeded"


async def test_a_failure_after_the_first_byte_is_an_error_the_sdk_raises() -> None:
    async with chat_client([cut_reply("partial answer")]) as (client, _):
        stream = await client.chat.completions.create(
            model="qwen", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        seen = []
        with pytest.raises(openai.APIError) as info:
            async for chunk in stream:
                seen.append(chunk)
    assert "partial" in "".join(c.choices[0].delta.content or "" for c in seen if c.choices)
    assert info.value.code == "upstream_stream_cut"


async def test_a_failed_non_streamed_answer_is_a_502_with_the_code() -> None:
    async with chat_client([cut_reply("partial answer")]) as (client, _):
        with pytest.raises(openai.InternalServerError) as info:
            await client.chat.completions.create(model="qwen", messages=[{"role": "user", "content": "hi"}])
    assert info.value.status_code == 502 and info.value.code == "upstream_stream_cut"


async def test_get_is_405_and_a_bad_body_is_a_400() -> None:
    async with chat_client([]) as (client, _):
        http = client._client
        wrong_method = await http.get("http://gw/v1/chat/completions")
        assert wrong_method.status_code == 405
        missing = await http.post("http://gw/v1/chat/completions", json={"model": "qwen"})
        assert missing.status_code == 400 and missing.json()["error"]["param"] == "messages"
