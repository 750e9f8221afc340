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
from tests.support.codex_requests import APPLY_PATCH, EXEC_COMMAND, MULTI_AGENT, codex_body
from tests.support.fake_messages_upstream import (
    FakeMessagesUpstream,
    MessageReply,
    Text,
    Thinking,
    ToolUse,
    anthropic_error,
    message_reply,
    overloaded,
    prompt_too_long,
    rate_limited,
    sign,
)
from tests.support.fake_upstream import FakeUpstream, text_reply
from tests.support.openresponses import validate_stream
from tests.support.sse import sse_events

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


async def test_custom_and_namespace_calls_round_trip_with_the_grammar_check() -> None:
    fenced = "```\n" + PATCH + "```"  # a model's slip the grammar check repairs, as on the chat path
    script = [
        message_reply(
            ToolUse("apply_patch", {"input": fenced}, id="toolu_p"),
            ToolUse("multi_agent_v1__spawn_agent", {"message": "review app.py"}, id="toolu_s"),
        ),
        message_reply(Text("done")),
    ]
    async with claude(script) as (sdk, fake):
        final = await streamed(sdk, model="claude-sonnet-4-5", input=[user("go")], tools=TOOLS)
        patch, spawn = final["output"]
        assert (patch["type"], patch["name"], patch["input"]) == ("custom_tool_call", "apply_patch", PATCH)
        assert (spawn["namespace"], spawn["name"], spawn["arguments"]) == (
            "multi_agent_v1",
            "spawn_agent",
            '{"message":"review app.py"}',
        )
        history = [
            user("go"),
            patch,
            {"type": "custom_tool_call_output", "call_id": "toolu_p", "output": "Success."},
            spawn,
            {"type": "function_call_output", "call_id": "toolu_s", "output": "agent 7"},
        ]
        await sdk.responses.create(model="claude-sonnet-4-5", input=history, tools=TOOLS)
    assert fake.refusals == []
    messages = fake.bodies[1]["messages"]
    assert messages[1]["content"][0] == {
        "type": "tool_use", "id": "toolu_p", "name": "apply_patch", "input": {"input": PATCH},
    }  # fmt: skip
    assert messages[3]["content"][0]["name"] == "multi_agent_v1__spawn_agent"


async def test_usage_carries_the_cache_reads_and_writes() -> None:
    long = "Follow the house rules. " * 300  # past the 1,024-token minimum
    script = [message_reply(Text("one")), message_reply(Text("two"))]
    async with claude(script) as (sdk, fake):
        first = await sdk.responses.create(model="claude-sonnet-4-5", instructions=long, input=[user("Hi.")])
        history = [user("Hi."), *as_input(first.output), user("Again.")]
        second = await sdk.responses.create(model="claude-sonnet-4-5", instructions=long, input=history)
    assert first.usage is not None and second.usage is not None
    written = fake.requests[0].usage
    assert written is not None and written["cache_creation_input_tokens"] > 1024
    details = second.usage.model_dump()["input_tokens_details"]
    read = fake.requests[1].usage
    assert (
        read is not None
        and details["cached_tokens"] == read["cache_read_input_tokens"] == first.usage.input_tokens
    )
    assert details["cache_creation_tokens"] == read["cache_creation_input_tokens"] > 0
    assert second.usage.input_tokens == sum(read.values())


async def test_the_betas_and_version_go_with_every_request() -> None:
    async with claude(
        [message_reply(Text("ok"))], betas=["interleaved-thinking-2025-05-14"], anthropic_version="2023-06-01"
    ) as (sdk, fake):
        await sdk.responses.create(model="claude-sonnet-4-5", input=[user("Hi.")])
    assert fake.requests[0].headers["anthropic-beta"] == "interleaved-thinking-2025-05-14"
    assert fake.requests[0].path == "/v1/messages"


# -- errors


async def test_an_overloaded_upstream_is_retried_before_the_first_byte() -> None:
    async with claude([overloaded(), message_reply(Text("fine now"))]) as (sdk, fake):
        response = await sdk.responses.create(model="claude-sonnet-4-5", input=[user("Hi.")])
    assert response.output_text == "fine now" and len(fake.requests) == 2


async def test_a_rate_limit_with_retry_after_is_waited_out_and_retried() -> None:
    async with claude([rate_limited(0.05), message_reply(Text("fine now"))]) as (sdk, fake):
        response = await sdk.responses.create(model="claude-sonnet-4-5", input=[user("Hi.")])
    assert response.output_text == "fine now" and len(fake.requests) == 2


@pytest.mark.parametrize(
    "reply,status,code,words",
    [
        (prompt_too_long(), 400, "context_length_exceeded", "prompt is too long"),
        (anthropic_error(401, "authentication_error", "invalid x-api-key"), 502, "upstream_authentication_failed",
         "refused the gateway's credentials"),
        (anthropic_error(404, "not_found_error", "model: claude-nope"), 404, "model_not_found", "model: claude-nope"),
        (anthropic_error(400, "invalid_request_error", "messages.0: bad"), 400, "invalid_request_error", "messages.0"),
    ],
)  # fmt: skip
async def test_errors_before_the_first_byte_are_the_gateway_s(
    reply: Any, status: int, code: str, words: str
) -> None:
    async with claude([reply]) as (sdk, _):
        with pytest.raises(openai.APIStatusError) as caught:
            await sdk.responses.create(model="claude-sonnet-4-5", input=[user("Hi.")])
    error = caught.value
    assert error.status_code == status
    assert isinstance(error.body, dict) and error.body["code"] == code and words in error.body["message"]


async def test_a_wrong_key_is_said_plainly() -> None:
    fake = FakeMessagesUpstream([message_reply(Text("x"))], api_key="the-right-key")
    async with gateway({"claude.test": fake}, [anthropic()]) as (sdk, _):
        with pytest.raises(openai.APIStatusError) as caught:
            await sdk.responses.create(model="claude-sonnet-4-5", input=[user("Hi.")])
    assert "refused the gateway's credentials (HTTP 401): invalid x-api-key" in str(caught.value)


async def test_an_error_event_after_the_first_byte_fails_the_response() -> None:
    script = [MessageReply([Text("Half")], error={"type": "overloaded_error", "message": "Overloaded"})]
    async with claude(script) as (sdk, _):
        final = await streamed(sdk, model="claude-sonnet-4-5", input=[user("Hi.")])
    assert final["status"] == "failed" and final["error"]["code"] == "server_is_overloaded"


# -- pools, fallbacks, the Chat face


def chat_member(name: str = "chat") -> JSON:
    return {"name": name, "base_url": f"http://{name}.test/v1"}


async def test_a_pool_of_an_anthropic_and_a_chat_member_fails_over_on_a_529() -> None:
    fake = FakeMessagesUpstream([overloaded()] * 4, api_key="sk-ant-test")
    chat = FakeUpstream(lambda body: text_reply("from chat"))
    route = {
        "name": "coder",
        "upstreams": ["claude", "chat"],
        "model": "claude-sonnet-4-5",
        "balance": "round_robin",
        "sticky": False,
    }
    async with gateway({"claude.test": fake, "chat.test": chat}, [anthropic(), chat_member()], [route]) as (
        sdk,
        http,
    ):
        answers = [
            (await sdk.responses.create(model="coder", input=[user("Hi.")])).output_text for _ in range(2)
        ]
        metrics = (await http.get("/metrics")).text
    assert answers == ["from chat", "from chat"]
    assert (
        len(fake.requests) == 1
    )  # asked once without retries (another member could answer), then cooled down
    assert 'codexgate_failovers_total{from_upstream="claude",route="coder",to_upstream="chat"}' in metrics


async def test_a_prompt_too_long_for_claude_is_answered_by_the_fallback_route() -> None:
    fake = FakeMessagesUpstream([prompt_too_long()], api_key="sk-ant-test")
    chat = FakeUpstream(lambda body: text_reply("from the big one"))
    routes = [
        {"name": "coder", "upstream": "claude", "model": "claude-sonnet-4-5", "fallbacks": ["big"]},
        {"name": "big", "upstream": "chat", "model": "m"},
    ]
    async with gateway({"claude.test": fake, "chat.test": chat}, [anthropic(), chat_member()], routes) as (
        sdk,
        _,
    ):
        response = await sdk.responses.create(model="coder", input=[user("Hi.")])
    assert response.output_text == "from the big one"


async def test_the_chat_face_over_an_anthropic_route_answers() -> None:
    script = [
        message_reply(Thinking("Hm."), Text("Hello from Claude.")),
        message_reply(Text("Streamed, too.")),
    ]
    fake = FakeMessagesUpstream(script, api_key="sk-ant-test")
    async with gateway({"claude.test": fake}, [anthropic()]) as (sdk, _):
        completion = await sdk.chat.completions.create(
            model="claude-sonnet-4-5",
            messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
            reasoning_effort="low",
        )
        chunks = [c async for c in await sdk.chat.completions.create(
            model="claude-sonnet-4-5", messages=[{"role": "user", "content": "Hi"}], stream=True,
        )]  # fmt: skip
    assert completion.choices[0].message.content == "Hello from Claude."
    assert (
        fake.bodies[0]["system"][0]["text"] == "Be brief."
        and fake.bodies[0]["thinking"]["budget_tokens"] == 4096
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Streamed, too."


async def test_a_codex_body_streams_as_the_responses_api_says() -> None:
    script = [
        message_reply(Thinking("Plan."), Text("Linting now."), ToolUse("exec_command", {"cmd": "ruff check"}))
    ]
    fake = FakeMessagesUpstream(script, api_key="sk-ant-test")
    async with gateway({"claude.test": fake}, [anthropic()]) as (_, http):
        raw = await http.post("/v1/responses", json=codex_body(model="claude-sonnet-4-5"))
    events = sse_events(raw.content)
    validate_stream(events)
    assert events[-1]["type"] == "response.completed" and fake.refusals == []


async def test_on_a_local_server_max_tokens_is_held_to_the_window_it_publishes() -> None:
    """vLLM's `/v1/models` says `max_model_len`: a route with no window of its own learns it, and
    `max_tokens` (8,192 for a model the table does not know) is lowered to what the window leaves
    beside the prompt, where vLLM would refuse the request."""
    listed = {"id": "qwen3-coder", "type": "model", "max_model_len": 8192}
    fake = FakeMessagesUpstream([message_reply(Text("a")), message_reply(Text("b"))], models=[listed])
    async with gateway({"claude.test": fake}, [anthropic()]) as (sdk, _):
        await streamed(sdk, model="qwen3-coder", input="word " * 3000)  # 15 KB: ~5,000 tokens at 3 bytes
        await streamed(sdk, model="qwen3-coder", input="hi")
    big, small = (body["max_tokens"] for body in fake.bodies)
    assert 1024 <= big <= 8192 - 5000
    assert 8192 - 100 < small < 8192  # the window less a short prompt
