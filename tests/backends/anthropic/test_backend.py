"""The anthropic backend through the real app, in process: the official `openai` SDK -> the
Responses face (and the Chat face) -> AnthropicBackend -> a scripted Messages server that holds
the requests to Anthropic's rules (tests/support/fake_messages_upstream.py): a thinking tool
turn whose signed blocks come back, custom and namespace tools, usage with the cache, the
errors before and after the first byte, retries, failover in a pool with a chat member."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import openai
import orjson
import pytest

from codexgate.app import build_app
from codexgate.config import load_settings
from codexgate.translate.reasoning import decode_thinking
from tests.support.asgi_client import StreamingASGITransport
from tests.support.asgi_upstream import ASGIUpstreamTransport
from tests.support.codex_requests import APPLY_PATCH, EXEC_COMMAND, MULTI_AGENT
from tests.support.fake_messages_upstream import (
    FakeMessagesUpstream,
    Text,
    Thinking,
    ToolUse,
    message_reply,
    sign,
)

JSON = dict[str, Any]
BASE = "http://claude.test/v1"
TOOLS = [EXEC_COMMAND, APPLY_PATCH, MULTI_AGENT]
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hi\n*** End Patch\n"


class _Routed:
    """An upstream transport that sends each request to the app of its host."""

    def __init__(self, apps: dict[str, Any]) -> None:
        self._transports = {host: ASGIUpstreamTransport(app) for host, app in apps.items()}

    async def open(self, request: Any) -> Any:
        host = httpx.URL(request.url).host
        return await self._transports[host].open(request)

    async def aclose(self) -> None:
        for transport in self._transports.values():
            await transport.aclose()


def anthropic(name: str = "claude", base_url: str = BASE, **settings: Any) -> JSON:
    return {"name": name, "kind": "anthropic", "base_url": base_url, "api_key_env": "CLAUDE_KEY", **settings}


@asynccontextmanager
async def gateway(
    apps: dict[str, Any], upstreams: list[JSON], models: list[JSON] | None = None, **flags: Any
) -> AsyncIterator[tuple[openai.AsyncOpenAI, httpx.AsyncClient]]:
    """The SDK (and a raw client) -> codexgate over `upstreams`, each host answered by its app."""
    environ = {"CLAUDE_KEY": "sk-ant-test"}
    settings = load_settings(
        {"discover": False, "retry_backoff": 0.01, "upstreams": upstreams, "models": models or [], **flags},
        environ=environ,
    )
    app = build_app(settings, transport=_Routed(apps), environ=environ)
    async with httpx.AsyncClient(
        transport=StreamingASGITransport(app), base_url="http://gw", timeout=10
    ) as http:
        sdk = openai.AsyncOpenAI(base_url="http://gw/v1", api_key="unused", http_client=http, max_retries=0)
        yield sdk, http


@asynccontextmanager
async def claude(
    script: Any, **settings: Any
) -> AsyncIterator[tuple[openai.AsyncOpenAI, FakeMessagesUpstream]]:
    fake = FakeMessagesUpstream(script, api_key="sk-ant-test")
    async with gateway({"claude.test": fake}, [anthropic(**settings)]) as (sdk, _):
        yield sdk, fake


def as_input(items: Any) -> list[JSON]:
    return [item.model_dump(mode="json", exclude_none=True, by_alias=True) for item in items]


def user(text: str) -> JSON:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


async def streamed(sdk: openai.AsyncOpenAI, **request: Any) -> JSON:
    stream = await sdk.responses.create(stream=True, **request)
    final = None
    async for event in stream:
        if event.type in ("response.completed", "response.failed", "response.incomplete"):
            final = event.response
    assert final is not None
    return final.model_dump(mode="json", exclude_none=True, by_alias=True)


# -- a conversation


async def test_a_thinking_tool_turn_gives_its_signed_thinking_back_on_the_next_request() -> None:
    plan = "The tests fail; run them first."
    script = [
        message_reply(
            Thinking(plan),
            Text("Running the tests."),
            ToolUse("exec_command", {"cmd": "pytest -q"}, id="toolu_1"),
        ),
        message_reply(Thinking("All pass now."), Text("All 42 tests pass.")),
    ]
    async with claude(script) as (sdk, fake):
        first = await sdk.responses.create(
            model="claude-sonnet-4-5",
            input=[user("Fix the test.")],
            tools=TOOLS,
            reasoning={"effort": "medium"},
        )
        reasoning, message, call = first.output
        assert reasoning.type == "reasoning" and reasoning.summary[0].text == plan
        assert decode_thinking(reasoning.encrypted_content) == {
            "type": "thinking",
            "thinking": plan,
            "signature": sign(plan),
        }
        assert message.content[0].text == "Running the tests."
        assert (call.type, call.name, call.call_id, call.arguments) == (
            "function_call",
            "exec_command",
            "toolu_1",
            '{"cmd":"pytest -q"}',
        )
        history = [user("Fix the test."), *as_input(first.output)]
        history.append({"type": "function_call_output", "call_id": "toolu_1", "output": "42 passed"})
        second = await sdk.responses.create(
            model="claude-sonnet-4-5", input=history, tools=TOOLS, reasoning={"effort": "medium"}
        )
        assert second.output_text == "All 42 tests pass."
    assert fake.refusals == []
    sent = fake.bodies[1]
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 8192}
    assistant = sent["messages"][1]
    assert assistant["role"] == "assistant"
    assert assistant["content"][0] == {"type": "thinking", "thinking": plan, "signature": sign(plan)}
    assert [b["type"] for b in assistant["content"]] == ["thinking", "text", "tool_use"]
    results = sent["messages"][2]["content"]
    assert results[0]["type"] == "tool_result" and results[0]["tool_use_id"] == "toolu_1"
    headers = fake.requests[0].headers
    assert headers["x-api-key"] == "sk-ant-test" and headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in headers


async def test_an_altered_thinking_block_is_refused_by_anthropic_rules() -> None:
    # The fake holds the gateway to Anthropic's signature check: this is what a lost or
    # changed signature would meet.
    script = [message_reply(Text("ok"))]
    async with claude(script) as (sdk, fake):
        blob = "cgt1:" + orjson.dumps(["thinking", "changed text", sign("original text")]).decode()
        history = [
            user("go"),
            {"type": "reasoning", "summary": [], "encrypted_content": blob},
            {"type": "function_call", "call_id": "toolu_9", "name": "exec_command", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "toolu_9", "output": "done"},
        ]
        with pytest.raises(openai.BadRequestError):
            await sdk.responses.create(model="claude-sonnet-4-5", input=history, tools=TOOLS)
    assert "Invalid `signature`" in fake.refusals[0]
