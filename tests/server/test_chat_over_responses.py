"""End to end over loopback, with the official `openai` SDK as the client: Chat Completions in,
through codexgate to a Responses upstream (a second codexgate's Responses face over a scripted
chat model), and back. History over several turns, streaming, a tool call and its result."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.support.fake_upstream import FakeUpstream, text_reply, tool_calls_reply
from tests.support.gateways import responses_chain
from tests.support.tools import WEATHER, the_tool_call

JSON = dict[str, Any]


def model(body: JSON) -> Any:
    """The scripted model at the end of the chain: it reads the whole conversation."""
    messages = body["messages"]
    last = messages[-1]
    if last["role"] == "tool":
        return text_reply(f"It is {last['content']} in Oslo.")
    text = str(last.get("content"))
    if "weather" in text:
        return tool_calls_reply([("get_weather", json.dumps({"city": "Oslo"}))], text="Let me look.")
    said = [m["content"] for m in messages if m["role"] == "user"]
    return text_reply(f"You said: {' / '.join(map(str, said))}", reasoning="Counting what was said.")


@asynccontextmanager
async def chain(tmp_path: Path) -> AsyncIterator[tuple[openai.AsyncOpenAI, FakeUpstream]]:
    fake = FakeUpstream(model)
    async with responses_chain(tmp_path, fake) as client:
        yield client, fake


async def test_a_streamed_conversation_keeps_its_history(tmp_path: Path) -> None:
    async with chain(tmp_path) as (client, fake):
        messages: list[Any] = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "one"}]
        for word in ("two", "three"):
            stream = await client.chat.completions.create(
                model="m", messages=messages, stream=True, stream_options={"include_usage": True}
            )
            chunks = [chunk async for chunk in stream]
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            thinking = "".join(
                getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks if c.choices
            )
            assert thinking == "Counting what was said."
            assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens > 0
            messages += [{"role": "assistant", "content": text}, {"role": "user", "content": word}]
        final = await client.chat.completions.create(model="m", messages=messages)
    assert final.choices[0].message.content == "You said: one / two / three"
    upstream = fake.requests[-1].body["messages"]
    assert upstream[0] == {"role": "system", "content": "Be brief."}
    assert [m["role"] for m in upstream[1:]] == ["user", "assistant", "user", "assistant", "user"]


@pytest.mark.parametrize("stream", [True, False])
async def test_a_tool_call_and_its_result_cross_both_gateways(tmp_path: Path, stream: bool) -> None:
    async with chain(tmp_path) as (client, fake):
        messages: list[Any] = [{"role": "user", "content": "what is the weather?"}]
        if stream:
            chunks = [c async for c in await client.chat.completions.create(
                model="m", messages=messages, tools=[WEATHER], stream=True)]  # fmt: skip
            calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
            call_id, name = calls[0].id, calls[0].function.name  # type: ignore[union-attr]
            arguments = "".join(tc.function.arguments or "" for tc in calls)  # type: ignore[union-attr]
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
            assert finish == ["tool_calls"]
            assistant = {"role": "assistant", "content": text,
                         "tool_calls": [{"id": call_id, "type": "function",
                                         "function": {"name": name, "arguments": arguments}}]}  # fmt: skip
        else:
            first = await client.chat.completions.create(model="m", messages=messages, tools=[WEATHER])
            call = the_tool_call(first)
            call_id, name, arguments = call.id, call.function.name, call.function.arguments
            assistant = first.choices[0].message.model_dump(exclude_none=True)
        assert (name, json.loads(arguments)) == ("get_weather", {"city": "Oslo"})
        messages += [assistant, {"role": "tool", "tool_call_id": call_id, "content": "sunny"}]
        second = await client.chat.completions.create(model="m", messages=messages, tools=[WEATHER])
    assert second.choices[0].message.content == "It is sunny in Oslo."
    sent = fake.requests[-1].body["messages"]
    assert sent[-2]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert sent[-1] == {"role": "tool", "tool_call_id": sent[-2]["tool_calls"][0]["id"], "content": "sunny"}
