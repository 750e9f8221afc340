"""The Codex backend (backends/codex/backend.py) through the real app, in process, over the fake
app-server (tests/support/fake_app_server.py, run through a `codex` wrapper script as the real
binary would be): Codex's server requests are all answered, a client that leaves interrupts
the Codex turn, a client tool call is answered by the client's next request in the same Codex
turn over either face, a crash fails the response and the next request gets a new process,
the model list and health of a codex upstream, and shutdown. No real Codex is needed; waits
are on events under a deadline."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shlex
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest

from codexgate.app import build_app
from codexgate.backends.base import Inbound
from codexgate.backends.codex.backend import CodexBackend, CodexTarget
from codexgate.config import load_settings
from codexgate.errors import Code
from codexgate.server.app import GatewayApp
from codexgate.translate import files
from codexgate.wire.app_server import (
    COMMAND_APPROVAL,
    FILE_CHANGE_APPROVAL,
    MCP_ELICITATION,
    PERMISSIONS_APPROVAL,
    TOOL_CALL,
    USER_INPUT_REQUEST,
    ErrorCode,
)
from codexgate.wire.responses import parse_request
from codexgate.wire.sse import SSEDecoder
from tests.support.asgi_client import StreamingASGITransport, asgi_lifespan
from tests.support.openresponses import validate_stream
from tests.support.pdfs import text_pdf
from tests.support.processes import wait_for_exit
from tests.support.tools import the_tool_call, with_tool_result

FAKE = Path(__file__).resolve().parents[2] / "support" / "fake_app_server.py"
JSON = dict[str, Any]
MODEL = "gpt-agent"  # the upstream model the route names
PARAMETERS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER_CHAT = {"type": "function", "function": {"name": "get_weather", "description": "Weather.",
                                                 "parameters": PARAMETERS}}  # fmt: skip
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather.", "parameters": PARAMETERS}
WEATHER_STEPS: list[JSON] = [
    {"usage": {"inputTokens": 10, "outputTokens": 2, "totalTokens": 12}},
    {"tool_call": {"callId": "call_w1", "tool": "get_weather", "arguments": {"city": "Oslo"}}},
    {"usage": {"inputTokens": 20, "outputTokens": 3, "totalTokens": 23}},
    {"text": "Oslo: {answer}."},
]
WEATHER_TURN = {"match": "weather", "steps": WEATHER_STEPS}
LONG_TURN = {"match": "long", "steps": [{"text": "Working"}, {"wait": "interrupt"}]}
CRASH_TURN = {
    "match": "crash",
    "steps": [{"text": "Half"}, {"die": 1, "stderr": ["fatal: the fake fell over"]}],
}
TURNS = [WEATHER_TURN, LONG_TURN, CRASH_TURN]


def codex_wrapper(tmp_path: Path) -> Path:
    """A `codex` executable that runs the fake app-server (`codex app-server` ignores its args)."""
    path = tmp_path / "bin" / "codex"
    path.parent.mkdir(exist_ok=True)
    path.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(FAKE))} "$@"\n')
    path.chmod(0o755)
    return path


def fake_environ(tmp_path: Path, turns: list[JSON], models: list[str] | None = None) -> dict[str, str]:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": turns, "models": models or ["gpt-agent", "gpt-agent-mini"]}))
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "FAKE_APP_SERVER_SCRIPT": str(script)}


@dataclass
class Gateway:
    app: GatewayApp
    http: httpx.AsyncClient
    sdk: openai.AsyncOpenAI
    backend: CodexBackend

    async def fake(self, method: str, params: JSON | None = None) -> Any:
        """A test command to the fake app-server the backend runs."""
        return await self.backend.app_server.request(method, params, timeout=10)

    async def seen(self, method: str, count: int = 1) -> None:
        """Until the fake app-server has received `count` messages of `method`."""
        await self.fake("wait_for", {"method": method, "count": count})

    async def received(self, method: str) -> list[JSON]:
        state = await self.fake("state")
        return [m["params"] for m in state["received"] if m["method"] == method]


@asynccontextmanager
async def gateway(
    tmp_path: Path, turns: list[JSON] = TURNS, *, routed: bool = True, **upstream: Any
) -> AsyncIterator[Gateway]:
    """codexgate in process, its one upstream a `kind = "codex"` running the fake app-server."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    table = {"name": "codex", "kind": "codex", "codex_bin": str(codex_wrapper(tmp_path)), "workdir": str(work),
             **upstream}  # fmt: skip
    flags: JSON = {"discover": False, "upstreams": [table]}
    if routed:
        flags["models"] = [{"name": "codex-agent", "upstream": "codex", "model": MODEL}]
    app = build_app(load_settings(flags, environ={}), environ=fake_environ(tmp_path, turns))
    async with asyncio.timeout(30), asgi_lifespan(app):
        transport = StreamingASGITransport(app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw/v1", timeout=20) as http:
            sdk = openai.AsyncOpenAI(api_key="x", base_url="http://gw/v1", http_client=http, max_retries=0)
            backend = app.router.backends["codex"]
            assert isinstance(backend, CodexBackend)
            yield Gateway(app, http, sdk, backend)


async def responses_stream(http: httpx.AsyncClient, body: JSON) -> list[JSON]:
    """A streamed /v1/responses answer's events, validated."""
    decoder = SSEDecoder()
    payloads: list[bytes] = []
    async with http.stream(
        "POST", "/responses", json={"model": "codex-agent", "stream": True, **body}
    ) as answer:
        assert answer.status_code == 200, await answer.aread()
        async for chunk in answer.aiter_bytes():
            payloads += decoder.feed(chunk)
    events = [orjson.loads(p) for p in payloads if p != b"[DONE]"]
    validate_stream(events)
    return events


def user(text: str) -> list[JSON]:
    return [{"role": "user", "content": text}]


# -- a plain turn, and conversations


async def test_a_chat_turn_is_the_agents_answer_in_a_new_thread_seeded_with_its_history(
    tmp_path: Path,
) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "earlier"},
                {"role": "assistant", "content": "Earlier answer."}, {"role": "user", "content": "hello"}]  # fmt: skip
    async with gateway(tmp_path) as gw:
        answer = await gw.sdk.chat.completions.create(
            model="codex-agent", messages=messages, tools=[WEATHER_CHAT]
        )
        [started] = await gw.received("thread/start")
        [injected] = await gw.received("thread/inject_items")
        [turn] = await gw.received("turn/start")
    assert answer.choices[0].message.content == "answer hello"
    assert answer.choices[0].finish_reason == "stop"
    assert started["model"] == MODEL and started["developerInstructions"] == "Be brief."
    assert started["ephemeral"] is True and started["approvalPolicy"] == "never"
    assert [t["name"] for t in started["dynamicTools"]] == ["get_weather"]
    assert [item["role"] for item in injected["items"]] == ["user", "assistant"]
    assert turn["input"] == [{"type": "text", "text": "hello", "text_elements": []}]


async def test_a_conversation_continues_its_thread_whichever_face_it_speaks(tmp_path: Path) -> None:
    async with gateway(tmp_path) as gw:
        messages: list[Any] = [{"role": "system", "content": "Be brief."}, *user("one")]
        first = await gw.sdk.chat.completions.create(model="codex-agent", messages=messages)
        said = first.choices[0].message.content
        assert said == "answer one"
        items = [*user("one"), {"role": "assistant", "content": said}, *user("two")]
        second = await gw.sdk.responses.create(model="codex-agent", instructions="Be brief.", input=items)
        assert second.output_text == "answer two"
        messages += [{"role": "assistant", "content": said}, *user("two"),
                     {"role": "assistant", "content": second.output_text}, *user("three")]  # fmt: skip
        third = await gw.sdk.chat.completions.create(model="codex-agent", messages=messages)
        assert third.choices[0].message.content == "answer three"
        assert len(await gw.received("thread/start")) == 1  # one Codex thread for the conversation
        assert [t["input"][0]["text"] for t in await gw.received("turn/start")] == ["one", "two", "three"]
        assert await gw.received("thread/inject_items") == []  # Codex holds the history itself
        assert len(gw.backend.threads) == 1


# -- the client's own tools


async def test_a_client_tool_call_over_the_chat_face_is_answered_in_the_same_codex_turn(
    tmp_path: Path,
) -> None:
    async with gateway(tmp_path) as gw:
        messages: list[Any] = user("what is the weather in Oslo?")
        first = await gw.sdk.chat.completions.create(
            model="codex-agent", messages=messages, tools=[WEATHER_CHAT]
        )
        call = the_tool_call(first)
        assert (call.id, call.function.name, json.loads(call.function.arguments)) == (
            "call_w1",
            "get_weather",
            {"city": "Oslo"},
        )
        assert first.usage is not None and first.usage.total_tokens == 12
        messages += with_tool_result(first, "sunny")
        second = await gw.sdk.chat.completions.create(
            model="codex-agent", messages=messages, tools=[WEATHER_CHAT]
        )
        assert second.choices[0].message.content == "Oslo: sunny."
        assert second.usage is not None and second.usage.total_tokens == 23  # what this response cost
        assert len(await gw.received("turn/start")) == 1  # the same Codex turn went on
        state = await gw.fake("state")
    assert [r["result"] for r in state["replies"] if r["method"] == TOOL_CALL] == [
        {"contentItems": [{"type": "inputText", "text": "sunny"}], "success": True}
    ]


async def test_a_client_tool_call_over_the_responses_face_is_answered_in_the_same_codex_turn(
    tmp_path: Path,
) -> None:
    async with gateway(tmp_path) as gw:
        ask = user("weather, please")
        events = await responses_stream(gw.http, {"input": ask, "tools": [WEATHER]})
        output = events[-1]["response"]["output"]
        [call] = [item for item in output if item["type"] == "function_call"]
        assert (call["call_id"], call["name"], call["arguments"]) == (
            "call_w1",
            "get_weather",
            '{"city":"Oslo"}',
        )
        result = {"type": "function_call_output", "call_id": "call_w1", "output": "rainy"}
        events = await responses_stream(gw.http, {"input": [*ask, *output, result], "tools": [WEATHER]})
        assert events[-1]["type"] == "response.completed"
        assert [e["delta"] for e in events if e["type"] == "response.output_text.delta"] == ["Oslo: rainy."]
        assert len(await gw.received("thread/start")) == 1 and len(await gw.received("turn/start")) == 1


async def test_a_result_sent_as_soon_as_the_terminal_event_arrives_continues_the_same_turn(
    tmp_path: Path,
) -> None:
    """The thread is filed for the conversation's next request before the terminal event goes
    out: a client may send the tool's result as soon as it reads that event, while the first
    response's events are not closed yet (the gateway still ends its run)."""
    async with gateway(tmp_path) as gw:
        ask = user("weather, please")
        req = parse_request({"model": "codex-agent", "input": ask, "tools": [WEATHER], "stream": True})
        first = gw.backend.call(req, MODEL, Inbound())
        await first.open()
        events = first.events()
        async for batch in events:  # up to the terminal batch; the run goes on no further
            if batch[-1]["type"] == "response.completed":
                output = batch[-1]["response"]["output"]
                break
        result = {"type": "function_call_output", "call_id": "call_w1", "output": "rainy"}
        body = {"model": "codex-agent", "input": [*ask, *output, result], "tools": [WEATHER], "stream": True}
        second = gw.backend.call(parse_request(body), MODEL, Inbound())
        await second.open()
        texts = [
            event["delta"]
            async for batch in second.events()
            for event in batch
            if event["type"] == "response.output_text.delta"
        ]
        await events.aclose()
        assert texts == ["Oslo: rainy."]
        assert len(await gw.received("thread/start")) == 1 and len(await gw.received("turn/start")) == 1


async def test_parallel_client_tool_calls_are_one_response_and_their_results_one_request(
    tmp_path: Path,
) -> None:
    cities = [
        {"callId": f"call_{c}", "tool": "get_weather", "arguments": {"city": c}} for c in ("Oslo", "Bergen")
    ]
    parallel = {"match": "both", "steps": [{"tool_calls": cities}, {"text": "{answer}"}]}
    async with gateway(tmp_path, [parallel]) as gw:
        messages: list[Any] = user("weather in both cities?")
        first = await gw.sdk.chat.completions.create(
            model="codex-agent", messages=messages, tools=[WEATHER_CHAT]
        )
        calls = first.choices[0].message.tool_calls or []
        assert [call.id for call in calls] == ["call_Oslo", "call_Bergen"]
        messages.append(first.choices[0].message.model_dump(exclude_none=True))
        messages += [
            {"role": "tool", "tool_call_id": c.id, "content": f"{c.id}: fine"} for c in reversed(calls)
        ]
        second = await gw.sdk.chat.completions.create(
            model="codex-agent", messages=messages, tools=[WEATHER_CHAT]
        )
        assert second.choices[0].message.content == "call_Oslo: fine / call_Bergen: fine"
        assert len(await gw.received("turn/start")) == 1


async def test_a_client_that_moves_on_without_a_result_does_not_leave_the_turn_waiting(
    tmp_path: Path,
) -> None:
    """A user message after a call the client did not answer: the waiting call is failed at
    once (the model is told) rather than holding the turn until tool_result_timeout."""
    async with gateway(tmp_path, tool_result_timeout=60) as gw:
        ask = user("weather, please")
        events = await responses_stream(gw.http, {"input": ask, "tools": [WEATHER]})
        output = events[-1]["response"]["output"]
        async with asyncio.timeout(10):
            events = await responses_stream(
                gw.http, {"input": [*ask, *output, *user("never mind that")], "tools": [WEATHER]}
            )
        assert events[-1]["type"] == "response.completed"
        [reply] = [r for r in (await gw.fake("state"))["replies"] if r["method"] == TOOL_CALL]
        assert reply["result"]["success"] is False
        assert len(await gw.received("thread/start")) == 1


def pdf_part(text: str) -> JSON:
    data = base64.b64encode(text_pdf([[text]])).decode()
    return {"type": "input_file", "filename": "a.pdf", "file_data": f"data:application/pdf;base64,{data}"}


async def test_files_in_a_tool_result_and_a_message_reach_codex_read_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A result holding a PDF answers the waiting call, and a message that is only a PDF is the
    next turn of the same thread: each file read once, in a worker thread, then the request is
    translated."""
    read: list[tuple[threading.Thread, str]] = []
    block = files._block

    def recording(part: Any, data: str) -> str:
        text = block(part, data)
        read.append((threading.current_thread(), text.splitlines()[2]))
        return text

    monkeypatch.setattr(files, "_block", recording)
    async with gateway(tmp_path) as gw:
        ask = user("weather, please")
        events = await responses_stream(gw.http, {"input": ask, "tools": [WEATHER]})
        output = events[-1]["response"]["output"]
        result = {"type": "function_call_output", "call_id": "call_w1", "output": [pdf_part("Sunny in Oslo")]}
        events = await responses_stream(gw.http, {"input": [*ask, *output, result], "tools": [WEATHER]})
        history = [*ask, *output, result, *events[-1]["response"]["output"]]
        file_only = {"role": "user", "content": [pdf_part("A second file")]}
        events = await responses_stream(gw.http, {"input": [*history, file_only], "tools": [WEATHER]})
        assert events[-1]["type"] == "response.completed"
        [reply] = [r for r in (await gw.fake("state"))["replies"] if r["method"] == TOOL_CALL]
        turns = await gw.received("turn/start")
        assert len(await gw.received("thread/start")) == 1
    [answer] = reply["result"]["contentItems"]
    assert "[page 1]\nSunny in Oslo\n" in answer["text"]
    assert "[page 1]\nA second file\n" in turns[-1]["input"][0]["text"]
    assert [text for _, text in read] == ["Sunny in Oslo", "A second file"]
    assert threading.current_thread() not in [reader for reader, _ in read]


async def test_a_result_that_came_too_late_is_refused_naming_the_call(tmp_path: Path) -> None:
    async with gateway(tmp_path, tool_result_timeout=0.5) as gw:
        messages: list[Any] = user("weather?")
        first = await gw.sdk.chat.completions.create(
            model="codex-agent", messages=messages, tools=[WEATHER_CHAT]
        )
        [call] = first.choices[0].message.tool_calls or []
        await gw.seen("turn/interrupt")  # the client took too long: the turn was interrupted
        await gw.seen("thread/unsubscribe")
        assert len(gw.backend.threads) == 0
        messages += [first.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]  # fmt: skip
        with pytest.raises(openai.BadRequestError) as caught:
            await gw.sdk.chat.completions.create(model="codex-agent", messages=messages, tools=[WEATHER_CHAT])
    assert caught.value.code == Code.INVALID_REQUEST
    assert "call_w1" in caught.value.message


async def test_a_continuation_codex_refuses_gives_up_the_turn_it_already_answered(tmp_path: Path) -> None:
    """The result went to the waiting turn, then the message after it was refused: the turn
    must not run on with nobody to read it (the client's retry cannot continue it)."""
    unsteerable = {"match": "weather", "steer": "refuse", "steps": [*WEATHER_STEPS, {"wait": "interrupt"}]}
    async with gateway(tmp_path, [unsteerable]) as gw:
        ask = user("weather, please")
        events = await responses_stream(gw.http, {"input": ask, "tools": [WEATHER]})
        output = events[-1]["response"]["output"]
        result = {"type": "function_call_output", "call_id": "call_w1", "output": "rainy"}
        body = {
            "model": "codex-agent",
            "input": [*ask, *output, result, *user("and tomorrow?")],
            "tools": [WEATHER],
        }
        answer = await gw.http.post("/responses", json=body)
        assert answer.status_code == 502
        await gw.seen("turn/interrupt")
        await gw.seen("thread/unsubscribe")
        assert len(gw.backend.threads) == 0


async def test_the_gateways_output_cap_ends_the_response_and_interrupts_the_codex_turn(
    tmp_path: Path,
) -> None:
    async with gateway(tmp_path) as gw:
        events = await responses_stream(gw.http, {"input": "a long job", "max_output_tokens": 1})
        assert events[-1]["type"] == "response.incomplete"
        await gw.seen("turn/interrupt")
        await gw.seen("thread/unsubscribe")
        assert len(gw.backend.threads) == 0


# -- what Codex asks the gateway


APPROVALS = {
    "match": "approve",
    "steps": [
        {
            "request": COMMAND_APPROVAL,
            "params": {"command": "rm x", "cwd": "/w", "availableDecisions": ["accept"]},
        },
        {"request": FILE_CHANGE_APPROVAL, "params": {"reason": "edit"}},
        {"request": "execCommandApproval", "params": {"command": ["rm", "x"], "cwd": "/w"}},
        {"request": "applyPatchApproval", "params": {"fileChanges": {}}},
        {"request": MCP_ELICITATION, "params": {"serverName": "s", "message": "sign in?"}},
        {"request": USER_INPUT_REQUEST, "params": {"questions": []}},
        {"request": PERMISSIONS_APPROVAL, "params": {}},
        {"request": "account/chatgptAuthTokens/refresh", "params": {}},
        {"request": "future/request", "params": {}},
        {"text": "All answered."},
    ],
}


@pytest.mark.parametrize(("answer", "decision", "legacy"), [("accept", "accept", "approved"),
                                                          ("decline", "decline", "denied")])  # fmt: skip
async def test_every_server_request_is_answered_approvals_by_the_configured_answer(
    tmp_path: Path, answer: str, decision: str, legacy: str
) -> None:
    async with gateway(tmp_path, [APPROVALS], approval="on-request", approval_answer=answer) as gw:
        reply = await gw.sdk.chat.completions.create(model="codex-agent", messages=user("approve it"))
        assert reply.choices[0].message.content == "All answered."  # the turn waited on none in vain
        replies = {r["method"]: r for r in (await gw.fake("state"))["replies"]}
        [started] = await gw.received("thread/start")
    assert started["approvalPolicy"] == "on-request"
    assert replies[COMMAND_APPROVAL]["result"] == {"decision": decision}
    assert replies[FILE_CHANGE_APPROVAL]["result"] == {"decision": decision}
    assert replies["execCommandApproval"]["result"] == {"decision": legacy}
    assert replies["applyPatchApproval"]["result"] == {"decision": legacy}
    assert replies[MCP_ELICITATION]["result"] == {"action": "decline"}
    for method in (USER_INPUT_REQUEST, PERMISSIONS_APPROVAL, "account/chatgptAuthTokens/refresh"):
        assert replies[method]["error"]["code"] == ErrorCode.INTERNAL_ERROR  # nobody to ask: refused
    assert replies["future/request"]["error"]["code"] == ErrorCode.METHOD_NOT_FOUND


# -- a client that leaves, a process that dies


async def test_a_client_that_disconnects_mid_turn_interrupts_the_codex_turn(tmp_path: Path) -> None:
    async with gateway(tmp_path) as gw:
        body = {"model": "codex-agent", "stream": True, "input": "a long job"}
        async with gw.http.stream("POST", "/responses", json=body) as answer:
            async for line in answer.aiter_lines():
                if "response.output_text.delta" in line:
                    break  # the agent is at work: the client leaves
        await gw.seen("turn/interrupt")
        [started] = await gw.received("turn/start")
        [interrupt] = await gw.received("turn/interrupt")
        await gw.seen("thread/unsubscribe")
        assert interrupt["threadId"] == started["threadId"]
        assert len(gw.backend.threads) == 0
        again = await gw.sdk.responses.create(model="codex-agent", input="hello")  # the backend serves on
        assert again.output_text == "answer hello"


async def test_a_response_closed_right_after_it_was_created_interrupts_the_codex_turn(tmp_path: Path) -> None:
    """The earliest a client can leave: its response created, nothing read from Codex yet."""
    work = tmp_path / "work"
    work.mkdir()
    target = CodexTarget(name="codex", codex_bin=str(codex_wrapper(tmp_path)), workdir=str(work))
    backend = CodexBackend(target, fake_environ(tmp_path, TURNS))
    try:
        async with asyncio.timeout(30):
            req = parse_request({"model": "codex-agent", "input": "a long job", "stream": True})
            call = backend.call(req, MODEL, Inbound())
            await call.open()
            events = call.events()
            first = await anext(events)
            assert first[0]["type"] == "response.created"
            await events.aclose()
            await backend.app_server.request("wait_for", {"method": "turn/interrupt"})
            await backend.app_server.request("wait_for", {"method": "thread/unsubscribe"})
            assert len(backend.threads) == 0
    finally:
        await backend.aclose()


async def test_the_app_server_crashing_mid_turn_fails_the_response_and_the_next_one_starts_it_anew(
    tmp_path: Path,
) -> None:
    async with gateway(tmp_path) as gw:
        events = await responses_stream(gw.http, {"input": "crash now"})
        end = events[-1]
        assert end["type"] == "response.failed"
        assert "app-server" in end["response"]["error"]["message"]
        assert "fatal: the fake fell over" in end["response"]["error"]["message"]  # its last words
        assert [e["delta"] for e in events if e["type"] == "response.output_text.delta"] == ["Half"]
        again = await gw.sdk.chat.completions.create(model="codex-agent", messages=user("hello"))
        assert again.choices[0].message.content == "answer hello"
        assert gw.backend.app_server.generation == 2
        assert len(gw.backend.threads) == 1  # the dead process's thread is forgotten


# -- what a newer release sends


# As `codex app-server` 0.171 writes them (docs/codex-versions.md): `mcpToolCall` items carry
# `environmentId`, agent messages `moderation`; `thread/search/partial` belongs to no thread.
MCP_CALL = {"type": "mcpToolCall", "id": "call_m1", "server": "notes", "environmentId": "remote-1",
            "tool": "lookup", "status": "inProgress", "arguments": {"key": "color"}, "appContext": None,
            "mcpAppUi": None, "pluginId": None, "readOnlyHint": None, "result": None, "error": None,
            "durationMs": None}  # fmt: skip
MCP_DONE = {**MCP_CALL, "status": "completed", "durationMs": 2,
            "result": {"content": [{"type": "text", "text": "value of color"}], "structuredContent": None}}  # fmt: skip
MESSAGE = {"type": "agentMessage", "id": "msg-n", "text": "", "phase": None, "memoryCitation": None,
           "delivery": None, "questions": None, "moderation": {"moderated": False, "display": None}}  # fmt: skip
RETRIED = {"message": "again", "codexErrorInfo": "bioPolicy"}  # a kind of error new in 0.171
NEWER_TURN = {
    "match": "newer",
    "steps": [
        {"notify": "thread/search/partial", "params": {"requestId": 7, "data": []}, "scoped": False},
        {"notify": "item/started", "params": {"item": MCP_CALL}},
        {"notify": "item/completed", "params": {"item": MCP_DONE}},
        {"notify": "error", "params": {"willRetry": True, "error": RETRIED}},
        {"notify": "thread/realtime/itemAdded", "params": {"item": {"type": "unheardOf"}}},  # unknown to us
        {"notify": "item/started", "params": {"item": MESSAGE}},
        {"text": "Notes: value of color", "item": "msg-n"},
        {"notify": "item/completed", "params": {"item": {**MESSAGE, "text": "Notes: value of color"}}},
    ],
}


async def test_what_codex_0_171_adds_to_a_turn_is_read_or_passed_over(tmp_path: Path) -> None:
    async with gateway(tmp_path, [NEWER_TURN]) as gw:
        events = await responses_stream(gw.http, {"input": "the newer release"})
        again = await gw.sdk.chat.completions.create(model="codex-agent", messages=user("hello"))
        generation = gw.backend.app_server.generation
    end = events[-1]
    assert end["type"] == "response.completed", end
    output = end["response"]["output"]
    assert [item["type"] for item in output] == ["reasoning", "message"]
    assert "[notes] lookup" in output[0]["summary"][0]["text"]  # the MCP call, shown as the agent's work
    assert output[1]["content"][0]["text"] == "Notes: value of color"
    assert again.choices[0].message.content == "answer hello"
    assert generation == 1  # the same app-server process served both: nothing fell over


# -- models, health, shutdown


async def test_models_and_health_of_a_codex_upstream_come_from_model_list(tmp_path: Path) -> None:
    async with gateway(tmp_path, routed=False) as gw:
        models = (await gw.http.get("/models")).json()
        health = await gw.http.get("/healthz")
    assert [m["id"] for m in models["data"]] == ["gpt-agent", "gpt-agent-mini"]
    assert health.status_code == 200
    upstream = health.json()["upstreams"]["codex"]
    assert upstream["reachable"] and upstream["usable"] and upstream["models"] == 2


async def test_a_codex_bin_that_does_not_exist_is_named_by_health_and_by_a_502(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "codex"
    async with gateway(tmp_path, codex_bin=str(missing)) as gw:
        health = await gw.http.get("/healthz")
        answer = await gw.http.post(
            "/chat/completions", json={"model": "codex-agent", "messages": user("hi")}
        )
    assert health.status_code == 503 and health.json()["status"] == "unavailable"
    problem = health.json()["upstreams"]["codex"]["problem"]
    assert str(missing) in problem
    assert answer.status_code == 502
    error = answer.json()["error"]
    assert error["code"] == Code.UPSTREAM_UNREACHABLE and str(missing) in error["message"]


async def test_shutdown_stops_the_app_server(tmp_path: Path) -> None:
    async with gateway(tmp_path) as gw:
        await gw.sdk.responses.create(model="codex-agent", input="hello")
        pid = gw.backend.app_server.pid
        assert pid is not None and gw.backend.app_server.running
    await wait_for_exit(pid)
    assert not gw.backend.app_server.running
