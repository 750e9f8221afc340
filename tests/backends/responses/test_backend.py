"""The Responses backend through the real app, in process: codexgate's Responses face ->
ResponsesBackend -> another codexgate's Responses face over a scripted chat upstream, with the
official `openai` SDK as the client; and -> a raw scripted Responses server for the faults
(retries, errors before and after the first byte, cuts, the idle timeout, the output cap)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import httpx
import openai
import orjson
import pytest

from codexgate.app import build_app
from codexgate.backends.http.transport import HttpRequest
from codexgate.config import load_settings
from codexgate.errors import UpstreamConnectError
from codexgate.translate.responses_upstream.request import unwrap_reasoning
from tests.support.asgi_client import StreamingASGITransport
from tests.support.asgi_upstream import ASGIUpstreamResponse, ASGIUpstreamTransport
from tests.support.codex_requests import APPLY_PATCH, EXEC_COMMAND, MULTI_AGENT, WEB_SEARCH, codex_body
from tests.support.fake_responses import (
    Answer,
    ErrorAnswer,
    ScriptedResponses,
    json_reply,
    response_resource,
    sse,
    sse_reply,
    text_events,
    usage,
)
from tests.support.fake_upstream import FakeUpstream, text_reply, tool_calls_reply
from tests.support.openresponses import validate_response, validate_stream
from tests.support.sse import leave_at_the_first_delta, sse_events, stream_events

Event = dict[str, Any]
INNER = "http://inner.test/v1"  # the second codexgate, a Responses server
CHAT = "http://chat.test/v1"  # its chat upstream
RAW = "http://raw.test/v1"  # a scripted Responses server
TOOLS = [EXEC_COMMAND, APPLY_PATCH, MULTI_AGENT]
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hi\n*** End Patch\n"


def responses_upstream(name: str, base_url: str, **settings: Any) -> dict[str, Any]:
    return {"name": name, "kind": "responses", "base_url": base_url, **settings}


@asynccontextmanager
async def chain(
    script: Any, *, tool_format: str = "functions", inner_chat: Mapping[str, Any] | None = None
) -> AsyncIterator[tuple[openai.AsyncOpenAI, FakeUpstream]]:
    """The SDK -> codexgate -> (responses) -> codexgate -> (chat) -> FakeUpstream."""
    fake = FakeUpstream(script)
    inner_flags = {
        "discover": False,
        "retry_backoff": 0.01,
        "upstreams": [{"name": "chat", "base_url": CHAT, **(inner_chat or {})}],
    }
    inner = build_app(
        load_settings(inner_flags, environ={}), transport=ASGIUpstreamTransport(fake), environ={}
    )
    outer_flags = {
        "discover": False,
        "retry_backoff": 0.01,
        "upstreams": [responses_upstream("inner", INNER, tool_format=tool_format)],
    }
    outer = build_app(
        load_settings(outer_flags, environ={}), transport=ASGIUpstreamTransport(inner), environ={}
    )
    async with httpx.AsyncClient(
        transport=StreamingASGITransport(outer), base_url="http://gw", timeout=10
    ) as http:
        sdk = openai.AsyncOpenAI(base_url="http://gw/v1", api_key="unused", http_client=http, max_retries=0)
        yield sdk, fake


def as_input(items: Any) -> list[dict[str, Any]]:
    """Output items of the SDK as the client sends them back (Codex echoes them)."""
    return [item.model_dump(mode="json", exclude_none=True, by_alias=True) for item in items]


async def streamed(sdk: openai.AsyncOpenAI, **request: Any) -> dict[str, Any]:
    """A streamed answer as the SDK parses it: its final response, once it checked that the
    stream began with `response.created` and ended with one terminal event."""
    stream = await sdk.responses.create(stream=True, **request)
    kinds, final = [], None
    async for event in stream:
        kinds.append(event.type)
        if event.type in ("response.completed", "response.failed", "response.incomplete"):
            final = event.response
    assert kinds[0] == "response.created" and final is not None
    assert sum(kind == kinds[-1] for kind in kinds) == 1 and kinds[-1].endswith(final.status)
    return final.model_dump(mode="json", exclude_none=True, by_alias=True)


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


# -- through a second codexgate


@pytest.mark.parametrize("tool_format", ["functions", "native"])
async def test_a_conversation_over_several_turns_with_a_call_and_its_output(tool_format: str) -> None:
    script = [
        tool_calls_reply(
            [("exec_command", '{"cmd":"uv run pytest -q"}', "call_run1")], reasoning="Run the tests."
        ),
        text_reply("All 42 tests pass."),
        text_reply("You're welcome."),
    ]
    async with chain(script, tool_format=tool_format) as (sdk, fake):
        first = await sdk.responses.create(model="m", input=[user("Fix the test.")], tools=TOOLS)
        reasoning, call = first.output
        assert (call.type, call.name, call.call_id) == ("function_call", "exec_command", "call_run1")
        own = unwrap_reasoning("inner", reasoning.model_dump()["encrypted_content"])
        assert own is not None and own.blob.startswith("cgr2:")  # the inner codexgate's blob, wrapped
        history = [user("Fix the test."), *as_input(first.output)]
        history.append({"type": "function_call_output", "call_id": "call_run1", "output": "42 passed"})
        second = await sdk.responses.create(model="m", input=history, tools=TOOLS)
        assert second.output_text == "All 42 tests pass."
        history += [*as_input(second.output), user("Thanks!")]
        third = await sdk.responses.create(model="m", input=history, tools=TOOLS)
        assert third.output_text == "You're welcome."
    messages = fake.requests[2].body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "user"]
    assistant = messages[1]
    assert assistant["tool_calls"][0]["id"] == "call_run1"
    assert assistant["tool_calls"][0]["function"]["name"] == "exec_command"
    assert assistant["reasoning_content"] == "Run the tests."  # the blob went back to its owner
    assert messages[2] == {"role": "tool", "tool_call_id": "call_run1", "content": "42 passed"}
    assert messages[3]["content"] == "All 42 tests pass."


@pytest.mark.parametrize("tool_format", ["functions", "native"])
async def test_a_namespaced_call_and_a_custom_call_reach_the_client_as_it_knows_them(
    tool_format: str,
) -> None:
    calls = [
        ("multi_agent_v1__spawn_agent", '{"message":"review app.py"}', "call_spawn"),
        ("apply_patch", orjson.dumps({"input": PATCH}).decode(), "call_patch"),
    ]
    script = [tool_calls_reply(calls), text_reply("done")]
    async with chain(script, tool_format=tool_format) as (sdk, fake):
        final = await streamed(sdk, model="m", input=[user("go")], tools=TOOLS)
        spawn, patch = final["output"]
        assert (spawn["type"], spawn["namespace"], spawn["name"]) == (
            "function_call",
            "multi_agent_v1",
            "spawn_agent",
        )
        assert spawn["arguments"] == '{"message":"review app.py"}'
        assert (patch["type"], patch["name"], patch["input"]) == ("custom_tool_call", "apply_patch", PATCH)
        history = [
            user("go"),
            spawn,
            {"type": "function_call_output", "call_id": "call_spawn", "output": "agent 7 started"},
            patch,
            {"type": "custom_tool_call_output", "call_id": "call_patch", "output": "Success."},
        ]
        await sdk.responses.create(model="m", input=history, tools=TOOLS)
    # Each output right after its call, as Codex sends them; the chat upstream sees its own names.
    messages = fake.requests[1].body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "tool"]
    spawned, patched = messages[1]["tool_calls"][0], messages[3]["tool_calls"][0]
    assert (spawned["id"], spawned["function"]["name"]) == ("call_spawn", "multi_agent_v1__spawn_agent")
    assert (patched["id"], patched["function"]["name"]) == ("call_patch", "apply_patch")
    assert orjson.loads(patched["function"]["arguments"]) == {"input": PATCH}
    assert [messages[2]["content"], messages[4]["content"]] == ["agent 7 started", "Success."]


async def test_an_open_models_think_tags_and_text_tool_calls_are_fixed_by_the_stages() -> None:
    answer = (
        "<think>The user wants a listing.</think>Let me look.\n"
        '<tool_call>\n{"name": "exec_command", "arguments": {"cmd": "ls -la"}}\n</tool_call>'
    )
    # The inner codexgate passes the model's text on as it is; this one's stages fix it.
    plain = {"think_tags": "off", "text_tool_calls": "off", "loop_guard": False}
    async with chain([text_reply(answer)], inner_chat=plain) as (sdk, _):
        final = await streamed(sdk, model="m", input=[user("list files")], tools=[EXEC_COMMAND])
    reasoning, message, call = final["output"]
    assert reasoning["summary"][0]["text"] == "The user wants a listing."
    assert message["content"][0]["text"].strip() == "Let me look."
    assert (call["type"], call["name"], orjson.loads(call["arguments"])) == (
        "function_call",
        "exec_command",
        {"cmd": "ls -la"},
    )


async def test_a_codex_turn_streamed_and_not() -> None:
    async with chain([text_reply("streamed"), text_reply("folded")]) as (sdk, fake):
        raw = await sdk.post("/responses", body=codex_body(), cast_to=httpx.Response)  # Codex's own body
        events = sse_events(raw.content)
        validate_stream(events)
        assert events[-1]["response"]["output"][0]["content"][0]["text"] == "streamed"
        folded = await sdk.post("/responses", body={"model": "m", "input": "hi"}, cast_to=httpx.Response)
        validate_response(folded.json())
        assert folded.json()["output"][0]["content"][0]["text"] == "folded"
    # The history reached the chat upstream: developer prompt, the calls, their outputs.
    roles = [m["role"] for m in fake.requests[0].body["messages"]]
    assert roles.count("tool") == 4 and roles[0] == "system"


# -- a scripted Responses server: the request, and every fault


@asynccontextmanager
async def gateway(
    script: Any = (), *, transport: Any = None, models: Any = None, **upstream: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, ScriptedResponses, Any]]:
    server = ScriptedResponses(script)
    transport = transport or ASGIUpstreamTransport(server)
    flags: dict[str, Any] = {
        "discover": False,
        "retry_backoff": 0.01,
        "upstreams": [responses_upstream("raw", RAW, **upstream)],
    }
    if models is not None:
        flags["models"] = models
    app = build_app(load_settings(flags, environ={}), transport=transport, environ={})
    async with httpx.AsyncClient(
        transport=StreamingASGITransport(app), base_url="http://gw", timeout=10
    ) as client:
        yield client, server, transport


async def test_the_upstream_gets_a_streamed_unstored_request_without_codexs_own_fields() -> None:
    async with gateway([sse_reply(text_events("ok"))], tool_format="native") as (client, server, _):
        events = await stream_events(client, codex_body(temperature=0.3))
    assert events[-1]["type"] == "response.completed"
    [sent] = server.requests
    assert server.paths == ["/v1/responses"]
    assert sent["stream"] is True and sent["store"] is False and sent["model"] == "gpt-5.5"
    assert sent["temperature"] == 0.3 and sent["tools"][-1] == WEB_SEARCH
    assert "client_metadata" not in sent and "seed" not in sent
    assert all("internal_chat_message_metadata_passthrough" not in item for item in sent["input"])


async def test_a_field_the_responses_api_cannot_carry_is_refused_before_anything_is_sent() -> None:
    async with gateway() as (client, server, _):
        response = await client.post("/v1/responses", json={"model": "m", "input": "x", "seed": 3})
    assert response.status_code == 400 and response.json()["error"]["param"] == "seed"
    assert server.requests == []


async def test_5xx_before_the_first_byte_is_retried_then_succeeds() -> None:
    script = [
        ErrorAnswer(502, b"bad gateway"),
        ErrorAnswer(503, {"error": {"message": "Loading model"}}),
        sse_reply(text_events("ok")),
    ]
    async with gateway(script, max_retries=2) as (client, server, _):
        events = await stream_events(client, {"model": "m", "input": "x"})
    assert events[-1]["type"] == "response.completed" and len(server.requests) == 3


class FlakyTransport:
    """Refuses the first `failures` connections, then hands over to `inner`."""

    def __init__(self, inner: ASGIUpstreamTransport, failures: int) -> None:
        self.inner, self.failures = inner, failures

    async def open(self, request: HttpRequest) -> ASGIUpstreamResponse:
        if self.failures and request.url.endswith("/responses"):
            self.failures -= 1
            raise UpstreamConnectError(f"cannot reach upstream {request.url}: connection refused (simulated)")
        return await self.inner.open(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_connect_errors_are_retried_before_the_first_byte() -> None:
    server = ScriptedResponses([sse_reply(text_events("ok"))])
    flaky = FlakyTransport(ASGIUpstreamTransport(server), failures=2)
    async with gateway(transport=flaky, max_retries=2) as (client, _, _):
        events = await stream_events(client, {"model": "m", "input": "x"})
    assert events[-1]["type"] == "response.completed" and flaky.failures == 0
    async with gateway(max_retries=1) as (client, _, transport):
        transport.fail_connect = True
        response = await client.post("/v1/responses", json={"model": "m", "input": "x", "stream": True})
    assert response.status_code == 502 and response.json()["error"]["code"] == "upstream_unreachable"


async def test_a_rate_limit_passes_retry_after_and_the_phrase_codex_reads() -> None:
    limited = {"error": {"message": "Rate limit reached.", "type": "requests", "code": "rate_limit_exceeded"}}
    async with gateway([ErrorAnswer(429, limited, {"retry-after": "7"})]) as (client, server, _):
        response = await client.post("/v1/responses", json={"model": "m", "input": "x", "stream": True})
    assert response.status_code == 429 and response.headers["retry-after"] == "7"
    error = response.json()["error"]
    assert error["code"] == "rate_limit_exceeded" and "try again in 7s" in error["message"]
    assert len(server.requests) == 1  # Codex retries a 429 itself


async def test_a_context_overflow_is_final() -> None:
    overflow = {"error": {"message": "Your input exceeds the context window of this model.",
                          "type": "invalid_request_error", "param": "input", "code": "context_length_exceeded"}}  # fmt: skip
    async with gateway([ErrorAnswer(400, overflow)], max_retries=2) as (client, server, _):
        response = await client.post("/v1/responses", json={"model": "m", "input": "x", "stream": True})
    assert response.status_code == 400 and response.json()["error"]["code"] == "context_length_exceeded"
    assert len(server.requests) == 1


async def test_a_200_with_a_json_error_body_fails_with_its_code() -> None:
    body = {"error": {"message": "The server is overloaded.", "code": "server_is_overloaded"}}
    async with gateway([json_reply(body)]) as (client, _, _):
        events = await stream_events(client, {"model": "m", "input": "x"})
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"]["code"] == "server_is_overloaded"


async def test_a_whole_response_object_is_read_like_a_stream() -> None:
    message = {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": "not streamed", "annotations": []}]}  # fmt: skip
    whole = response_resource("completed", [message], usage(30, 4))
    async with gateway([json_reply(whole), json_reply(whole)]) as (client, _, _):
        events = await stream_events(client, {"model": "m", "input": "x"})
        folded = (await client.post("/v1/responses", json={"model": "m", "input": "x"})).json()
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "not streamed"
    assert events[-1]["response"]["usage"]["total_tokens"] == 34
    validate_response(folded)
    assert folded["status"] == "completed" and folded["output"][0]["content"][0]["text"] == "not streamed"


async def test_a_stream_cut_mid_answer_fails_and_marks_what_was_said() -> None:
    cut = Answer(sse(text_events("partial ", "answer", end=None)[:-1]), cut=True)
    async with gateway([cut]) as (client, _, _):
        events = await stream_events(client, {"model": "m", "input": "x"})
    last = events[-1]
    assert last["type"] == "response.failed" and last["response"]["error"]["code"] == "upstream_stream_cut"
    message, marker = last["response"]["output"]
    assert message["content"][0]["text"] == "partial answer" and message["status"] == "incomplete"
    assert marker["type"] == "reasoning" and marker["encrypted_content"].startswith("cgcut1:")


async def test_response_failed_mid_stream_keeps_the_upstreams_code() -> None:
    failed = {"type": "response.failed", "response": response_resource(
        "failed", [], error={"code": "server_error", "message": "An error occurred while processing your request."})}  # fmt: skip
    stream = [*text_events("I'll start", end=None), failed]
    async with gateway([sse_reply(stream), sse_reply(stream)]) as (client, _, _):
        events = await stream_events(client, {"model": "m", "input": "x"})
        folded = await client.post("/v1/responses", json={"model": "m", "input": "x"})
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"]["code"] == "server_error"
    assert folded.status_code >= 500 and folded.json()["error"]["code"] == "server_error"


async def test_an_upstream_that_goes_silent_fails_after_the_idle_timeout() -> None:
    silent = Answer(sse(text_events("slow", " answer")), hang_after=3)
    async with gateway([silent], idle_timeout=0.2) as (client, server, _):
        events = await stream_events(client, {"model": "m", "input": "x"})
        async with asyncio.timeout(5):
            await server.left.wait()  # the upstream request was closed
    last = events[-1]
    assert last["type"] == "response.failed" and last["response"]["error"]["code"] == "upstream_timeout"


async def test_output_past_the_cap_ends_incomplete_and_stops_the_upstream() -> None:
    endless = Answer(sse(text_events(*["word "] * 400, end=None)), hang_after=10_000)
    async with gateway([endless], max_output_bytes=200) as (client, server, _):
        events = await stream_events(client, {"model": "m", "input": "x"})
        async with asyncio.timeout(5):
            await server.left.wait()
    last = events[-1]
    assert last["type"] == "response.incomplete"
    assert last["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert 200 <= len(last["response"]["output"][0]["content"][0]["text"]) < 400


async def test_a_client_that_leaves_cancels_the_upstream_request() -> None:
    async with gateway([Answer(sse(text_events("one", " two", end=None)), hang_after=4)]) as (
        client,
        server,
        _,
    ):
        await leave_at_the_first_delta(client, {"model": "m", "input": "x"})
        async with asyncio.timeout(5):
            await server.left.wait()
    assert server.disconnects == 1


async def test_models_and_health_come_from_the_upstreams_model_list() -> None:
    async with gateway() as (client, server, _):
        server.models = ["gpt-5.5", "gpt-5.1-codex-mini"]
        models = (await client.get("/v1/models")).json()
        health = await client.get("/healthz")
    assert [m["id"] for m in models["data"]] == ["gpt-5.5", "gpt-5.1-codex-mini"]
    assert health.status_code == 200
    raw = health.json()["upstreams"]["raw"]
    assert raw["reachable"] and raw["usable"] and raw["models"] == 2
    assert "raw" not in health.json()["context_windows"]


async def test_a_model_route_of_a_responses_upstream_renames_the_model_and_adds_its_settings() -> None:
    route = [{"name": "fast", "upstream": "raw", "model": "gpt-5.1-codex-mini", "extra_body": {"temperature": 0.3},
              "think_tags": "off"}]  # fmt: skip
    async with gateway([sse_reply(text_events("<think>kept</think>"))], models=route) as (client, server, _):
        events = await stream_events(client, {"model": "fast", "input": "x"})
    assert server.requests[0]["model"] == "gpt-5.1-codex-mini" and server.requests[0]["temperature"] == 0.3
    assert (
        events[-1]["response"]["output"][0]["content"][0]["text"] == "<think>kept</think>"
    )  # the route's setting


async def test_a_terminal_event_sent_as_one_json_body_is_read() -> None:
    message = {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": "one event", "annotations": []}]}  # fmt: skip
    event = {"type": "response.completed", "response": response_resource("completed", [message], usage(3, 2))}
    async with gateway([json_reply(event)]) as (client, _, _):
        events = await stream_events(client, {"model": "m", "input": "x"})
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "one event"


async def test_foreign_reasoning_left_out_is_counted() -> None:
    foreign = {"type": "reasoning", "id": "rs_x", "summary": [], "encrypted_content": "gAAAAABsomeone-else"}
    async with gateway([sse_reply(text_events("ok"))]) as (client, server, _):
        await stream_events(client, {"model": "m", "input": [foreign, user("hi")]})
        health = (await client.get("/healthz")).json()
    assert [item["type"] for item in server.requests[0]["input"]] == ["message"]
    assert health["counts"]["raw"]["request.reasoning_left_out"] == 1
