"""Against a real model server nobody here wrote: llama.cpp's llama-server with
SmolLM2-135M-Instruct (see tests/support/llama_server.py), 4096-token context.

What it shows: plain answers and usage through the gateway, the context window learned from
`/props`, an oversized prompt refused before it is sent and llama.cpp's own
`exceed_context_size_error` mapped to `context_length_exceeded`, Codex's tool kinds translated
into what llama.cpp accepts, `doctor` and `codex-setup` reading the real server, and the
Messages face (a Claude-Code-shaped request; llama.cpp's context error as "prompt is too long"),
and the same server as an `anthropic` upstream (its own `/v1/messages`: every face through it,
`doctor --kind anthropic` and `codex-setup` reading its window). SmolLM2 has no tool calling,
so tool scenarios stay on the scripted fakes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from codexgate.app import build_app
from codexgate.backends.http.transport import AiohttpTransport
from codexgate.cli import main
from codexgate.commands.codex_setup.command import model_specs
from codexgate.commands.doctor.probe import Doctor
from codexgate.config import load_settings
from codexgate.translate.upstream_errors import classify
from codexgate.wire.sse import SSEDecoder
from tests.support.asgi_client import StreamingASGITransport
from tests.support.llama_server import LlamaServer, run_llama_server
from tests.support.openresponses import validate_response, validate_stream
from tests.support.tools import BASH

N_CTX = 4096
APPLY_PATCH_GRAMMAR = 'start: "*** Begin Patch" LF "*** End Patch" LF?\nLF: /\\n/\n'
CODEX_TOOLS = [
    {
        "type": "function",
        "name": "exec_command",
        "description": "Runs a command.",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
        "strict": False,
    },
    {
        "type": "custom",
        "name": "apply_patch",
        "description": "Edit files.",
        "format": {"type": "grammar", "syntax": "lark", "definition": APPLY_PATCH_GRAMMAR},
    },
    {"type": "web_search", "external_web_access": False},
]


@pytest.fixture(scope="module")
def llama() -> Iterator[LlamaServer]:
    with run_llama_server(N_CTX, "--alias", "smollm2") as server:
        yield server


@asynccontextmanager
async def served(flags: dict[str, Any]) -> AsyncIterator[httpx.AsyncClient]:
    """The gateway with `flags` as its settings, in process, over the real network client."""
    settings = load_settings({"discover": False, **flags}, environ={})
    transport = AiohttpTransport()
    app = build_app(settings, transport=transport, environ={})
    try:
        async with httpx.AsyncClient(
            transport=StreamingASGITransport(app), base_url="http://gw", timeout=60
        ) as client:
            yield client
    finally:
        await transport.aclose()


@pytest.fixture
async def gateway(llama: LlamaServer) -> AsyncIterator[httpx.AsyncClient]:
    async with served({"upstream": llama.base_url}) as client:
        yield client


async def stream(gateway: httpx.AsyncClient, **fields: Any) -> list[dict[str, Any]]:
    """A streamed /v1/responses call to SmolLM2; its events, checked against the spec."""
    body = {"model": "smollm2", "temperature": 0, "stream": True, **fields}
    response = await gateway.post("/v1/responses", json=body)
    assert response.status_code == 200
    events = [orjson.loads(data) for data in SSEDecoder().feed(response.content)]
    validate_stream(events)
    assert events[-1]["type"] in ("response.completed", "response.incomplete")
    return events


async def test_a_plain_answer_streams_with_the_servers_usage(gateway: httpx.AsyncClient) -> None:
    events = await stream(
        gateway,
        instructions="You are a helpful assistant.",
        input="What is the capital of France? Answer in one sentence.",
        max_output_tokens=48,
    )
    final = events[-1]["response"]
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert "Paris" in text
    usage = final["usage"]
    # llama.cpp's own count (template included), not the gateway's estimate
    assert 20 < usage["input_tokens"] < 80 and 1 <= usage["output_tokens"] <= 48


async def test_a_non_streaming_answer(gateway: httpx.AsyncClient) -> None:
    body = {"model": "smollm2", "input": "Say hello.", "max_output_tokens": 16, "temperature": 0}
    response = await gateway.post("/v1/responses", json=body)
    assert response.status_code == 200
    resource = response.json()
    validate_response(resource)
    assert resource["output"][0]["content"][0]["text"].strip()
    assert resource["usage"]["output_tokens"] <= 16


async def test_a_prompt_far_over_the_learned_window_is_refused_before_it_is_sent(
    gateway: httpx.AsyncClient,
) -> None:
    body = {"model": "smollm2", "input": "hello " * 30_000, "stream": True}  # 180 kB
    response = await gateway.post("/v1/responses", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert f"context window of {N_CTX} tokens" in error["message"]  # the gateway's words, from /props


async def test_llama_cpps_own_context_error_becomes_context_length_exceeded(
    gateway: httpx.AsyncClient,
) -> None:
    # 10 kB of one-token words: under the gateway's conservative bound, over the real window.
    body = {"model": "smollm2", "input": "a " * 5000, "stream": True}
    response = await gateway.post("/v1/responses", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert "exceeds the available context size" in error["message"]  # llama.cpp's words


async def test_codex_tool_kinds_are_translated_into_what_llama_cpp_accepts(
    gateway: httpx.AsyncClient, llama: LlamaServer
) -> None:
    # Sent as they are, a custom tool is a 500 from llama.cpp (final, not worth a retry) ...
    direct = httpx.post(
        llama.base_url + "/chat/completions",
        json={
            "model": "smollm2",
            "max_tokens": 8,
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "custom", "name": "apply_patch"}],
        },
        timeout=30,
    )
    assert direct.status_code == 500
    error = classify(direct.status_code, direct.content)
    assert error.code == "invalid_request_error" and not error.retryable
    # ... through the gateway the custom tool becomes a function and web_search is left out.
    await stream(gateway, input="Reply with the word ok.", tools=CODEX_TOOLS, max_output_tokens=24)


async def test_doctor_reads_the_real_server(llama: LlamaServer) -> None:
    transport = AiohttpTransport()
    try:
        report = await Doctor(transport, llama.base_url, timeout=60).run()
    finally:
        await transport.aclose()
    findings = report.findings
    assert findings.server == "llama.cpp" and findings.model == "smollm2"
    assert findings.streams and findings.usage_in_stream
    assert findings.tool_calls != "rejected"  # llama.cpp takes function tools (jinja templates)
    assert findings.window is not None and findings.window.tokens == N_CTX
    assert findings.window.source == "llama.cpp /props n_ctx"
    assert findings.overflow == "rejected"
    statuses = {c.name: c.status for c in report.checks}
    assert statuses["reachable"] == "ok" and statuses["streaming"] == "ok" and statuses["errors"] == "ok"
    assert statuses["context window"] == "fail"  # 4096 cannot hold Codex's first prompt
    fixes = next(c.details for c in report.checks if c.name == "context window")
    assert any("trained for 8192 tokens" in line for line in fixes)  # -c 32768 would not help
    model = report.recommended["model"]
    assert model["context_window"] == N_CTX
    assert model["extra_body"] == {
        "temperature": 0.2,
        "top_p": 0.9,
        "repeat_penalty": 1.1,
        "max_tokens": 1024,
    }


def test_codex_setup_takes_the_window_from_props(
    llama: LlamaServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    [spec] = model_specs(load_settings({"upstream": llama.base_url}, environ={}), None, None)
    assert (spec.slug, spec.context_window, spec.window_source) == (
        "smollm2",
        N_CTX,
        "llama.cpp /props n_ctx",
    )
    monkeypatch.setenv("PATH", "/nonexistent")  # Codex's prompt is not needed here
    assert main(["codex-setup", "--upstream", llama.base_url, "--codex-home", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert "model smollm2: context window 4096 (llama.cpp /props n_ctx)" in out
    assert "too small for Codex" in err
    assert (
        json.loads((tmp_path / "codexgate-models.json").read_text())["models"][0]["context_window"] == N_CTX
    )


# -- the Messages face (Claude Code's API) over the real server


async def messages_events(gateway: httpx.AsyncClient, body: dict[str, Any]) -> list[dict[str, Any]]:
    headers = {"anthropic-version": "2023-06-01", "anthropic-beta": "claude-code-20250219,oauth-2025-04-20"}
    response = await gateway.post("/v1/messages?beta=true", json=body, headers=headers)
    assert response.status_code == 200, response.text
    return [orjson.loads(data) for data in SSEDecoder().feed(response.content)]


async def test_a_claude_code_shaped_request_is_answered_by_llama_cpp_through_the_messages_face(
    gateway: httpx.AsyncClient,
) -> None:
    """What Claude Code sends that a chat template may choke on: system blocks with cache marks,
    a `role: "system"` message after the user's (2.1.328+), a 2020-12 schema, thinking asked
    for. SmolLM2's template takes what the gateway makes of it, and the stream is Anthropic's."""
    body = {
        "model": "smollm2",
        "max_tokens": 32000,  # Claude Code's, whatever the model: lowered to what the window holds
        "stream": True,
        "temperature": 0,
        "system": [
            {"type": "text", "text": "You are a helpful assistant.", "cache_control": {"type": "ephemeral"}},
        ],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "What is the capital of France?"}]},
            {"role": "system", "content": "Answer in one short sentence."},
        ],
        "tools": [BASH],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "metadata": {"user_id": '{"device_id":"d","account_uuid":"","session_id":"s-1"}'},
    }
    events = await messages_events(gateway, body)
    kinds = [e["type"] for e in events if e["type"] != "ping"]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    starts = [e for e in events if e["type"] == "content_block_start"]
    stops = [e["index"] for e in events if e["type"] == "content_block_stop"]
    assert [e["index"] for e in starts] == stops == list(range(len(starts)))  # in order, none interleaved
    text = "".join(e["delta"].get("text", "") for e in events if e["type"] == "content_block_delta")
    assert "Paris" in text
    final = events[-2]
    assert final["delta"]["stop_reason"] in ("end_turn", "max_tokens")
    usage = {**events[0]["message"]["usage"], **final["usage"]}
    assert {"cache_creation_input_tokens", "cache_read_input_tokens"} <= set(usage)
    # llama.cpp's own count, of the whole prompt: cached or not, it is all counted
    prompt = usage["input_tokens"] + usage["cache_read_input_tokens"]
    assert 40 < prompt < 600 and usage["output_tokens"] >= 1


async def test_llama_cpps_context_error_is_the_prompt_is_too_long_claude_code_compacts_on(
    gateway: httpx.AsyncClient,
) -> None:
    body = {"model": "smollm2", "max_tokens": 64, "messages": [{"role": "user", "content": "a " * 5000}]}
    response = await gateway.post("/v1/messages", json=body, headers={"anthropic-version": "2023-06-01"})
    assert response.status_code == 400
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert error["error"]["message"].startswith("prompt is too long: ")
    assert error["error"]["message"].endswith(f" > {N_CTX} maximum"), error


# -- the same server as an `anthropic` upstream: llama.cpp's own /v1/messages, no key


@pytest.fixture
async def over_messages(llama: LlamaServer) -> AsyncIterator[httpx.AsyncClient]:
    upstream = {"name": "llama-messages", "kind": "anthropic", "base_url": llama.base_url}
    async with served({"upstreams": [upstream]}) as client:
        yield client


async def test_codex_and_chat_clients_are_answered_through_llama_cpps_messages_endpoint(
    over_messages: httpx.AsyncClient,
) -> None:
    events = await stream(
        over_messages,
        instructions="You are a helpful assistant.",
        input="What is the capital of France? Answer in one sentence.",
        tools=CODEX_TOOLS[:1],
        max_output_tokens=48,
    )
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    usage = events[-1]["response"]["usage"]
    assert "Paris" in text and usage["input_tokens"] > 20 and 1 <= usage["output_tokens"] <= 48
    chat = await over_messages.post(
        "/v1/chat/completions",
        json={"model": "smollm2", "max_tokens": 32, "temperature": 0, "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What is the capital of France? Answer in one sentence."},
        ]},
    )  # fmt: skip
    assert chat.status_code == 200, chat.text
    assert "Paris" in chat.json()["choices"][0]["message"]["content"]


async def test_a_claude_code_shaped_request_passes_through_to_llama_cpps_messages_endpoint(
    over_messages: httpx.AsyncClient,
) -> None:
    body = {
        "model": "smollm2",
        "max_tokens": 48,
        "stream": True,
        "temperature": 0,
        "system": [
            {"type": "text", "text": "You are a helpful assistant.", "cache_control": {"type": "ephemeral"}},
        ],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "What is the capital of France?"}]}
        ],
        "metadata": {"user_id": '{"device_id":"d","account_uuid":"","session_id":"s-2"}'},
    }
    events = await messages_events(over_messages, body)
    kinds = [e["type"] for e in events if e["type"] != "ping"]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    text = "".join(e["delta"].get("text", "") for e in events if e["type"] == "content_block_delta")
    assert "Paris" in text
    assert events[-2]["delta"]["stop_reason"] in ("end_turn", "max_tokens")


def test_doctor_reads_llama_cpps_messages_endpoint_and_its_window(
    llama: LlamaServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No key, llama.cpp's list without windows: the window is read from `/props`, as for a chat
    upstream, and the settings name the upstream for what it is."""
    written = tmp_path / "codexgate.toml"
    code = main(["doctor", "--kind", "anthropic", "--upstream", llama.base_url, "--write", str(written)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"smollm2: context window {N_CTX} (llama.cpp /props n_ctx)" in out
    assert "streaming: a streamed message" in out
    settings = load_settings({}, written, environ={})
    upstream, model = settings.upstreams[0], settings.models[0]
    assert (upstream.name, upstream.kind) == ("messages", "anthropic")
    assert (model.name, model.upstream, model.context_window) == ("smollm2", "messages", N_CTX)


def test_codex_setup_takes_the_window_of_an_anthropic_route_on_llama_cpp_from_props(
    llama: LlamaServer,
) -> None:
    upstream = {"name": "messages", "kind": "anthropic", "base_url": llama.base_url}
    settings = load_settings({"upstreams": [upstream], "discover": False}, environ={})
    [spec] = model_specs(settings, ["smollm2"], None)
    assert (spec.context_window, spec.window_source) == (N_CTX, "llama.cpp /props n_ctx")
