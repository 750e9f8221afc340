"""The embedded model for real: `serve`'s default with nothing configured and nothing found runs
llama.cpp's server with SmolLM2-135M from the per-user runtime (tests/support/llama_server.py
fetches it once per machine), answers through the gateway's chat stages, comes back after its
child is SIGKILLed, and leaves no process behind. The supervision's edge cases run on a
stand-in in tests/backends/embedded/test_embedded.py."""

from __future__ import annotations

import os
import signal
from typing import Any

import httpx
import pytest

from codexgate.backends.embedded.fallback import FALLBACK_NOTE
from tests.support.embedded_gateway import gateway, health_when, serving
from tests.support.llama_server import llama_cache, llama_runtime
from tests.support.processes import dead, free_port, wait_until
from tests.support.sse import sse_events


@pytest.fixture
def flags(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Settings that leave the gateway nothing but the embedded model, from the tests' runtime."""
    closed = f"http://127.0.0.1:{free_port()}/v1"
    monkeypatch.setattr("codexgate.backends.discovery.LOCAL_SERVERS", (("Test server", closed),))
    server, model = os.environ.get("CODEXGATE_LLAMA_SERVER"), os.environ.get("CODEXGATE_LLAMA_MODEL")
    if not (server and model):
        llama_runtime()
        return {"llama_dir": str(llama_cache())}  # the default path: the per-user runtime
    # CODEXGATE_LLAMA_SERVER / CODEXGATE_LLAMA_MODEL: that server and model, configured
    upstream = {"name": "embedded", "kind": "embedded", "model_path": model}
    return {"llama_dir": str(llama_cache()), "llama_server": str(server), "upstreams": [upstream]}


SLOW = 120  # seconds: a real model on a shared CPU


async def ask_capital(client: httpx.AsyncClient) -> tuple[str, dict[str, Any]]:
    body = {
        "model": "smollm2-135m",
        "instructions": "You are a helpful assistant.",
        "input": "What is the capital of France? Answer in one sentence.",
        "max_output_tokens": 48,
        "temperature": 0,
        "stream": True,
    }
    response = await client.post("/v1/responses", json=body)
    assert response.status_code == 200, response.text
    events = sse_events(response.content)
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    return text, events[-1]


async def ask_capital_as_claude_code(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    """The same question through the Messages face, named as Claude Code names its model."""
    body = {
        "model": "claude-sonnet-4-6",
        "system": [
            {"type": "text", "text": "You are a helpful assistant.", "cache_control": {"type": "ephemeral"}}
        ],
        "messages": [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}],
        "max_tokens": 32000,
        "temperature": 0,
        "stream": True,
    }
    response = await client.post(
        "/v1/messages?beta=true", json=body, headers={"anthropic-version": "2023-06-01"}
    )
    assert response.status_code == 200, response.text
    return [e for e in sse_events(response.content) if e["type"] != "ping"]


async def test_the_embedded_model_answers_when_nothing_else_is_there(flags: dict[str, Any]) -> None:
    async with gateway(flags, timeout=SLOW) as client:
        # A /healthz asked as the child comes up can probe it just before it serves and read
        # its state just after: the next one says ok, and one must within the bound.
        health = await health_when(client, lambda h: serving(h) and h["status"] == "ok", SLOW)
        text, final = await ask_capital(client)
        messages = await ask_capital_as_claude_code(client)
    assert "Paris" in text
    assert [e["type"] for e in messages[:2]] == ["message_start", "content_block_start"]
    assert [e["type"] for e in messages[-2:]] == ["message_delta", "message_stop"]
    said = "".join(e["delta"].get("text", "") for e in messages if e["type"] == "content_block_delta")
    assert "Paris" in said and messages[-2]["delta"]["stop_reason"] in ("end_turn", "max_tokens")
    assert final["type"] == "response.completed" and final["response"]["usage"]["output_tokens"] <= 48
    assert health["upstreams"]["embedded"]["usable"]
    assert health["context_windows"]["embedded"] == {health["embedded"]["model"]: 8192}
    if "upstreams" not in flags:  # the fallback, not a configured upstream
        assert health["embedded"]["note"] == FALLBACK_NOTE
    wait_until(lambda: dead(health["embedded"]["pid"]))


async def test_a_killed_llama_server_comes_back_and_none_is_left_behind(flags: dict[str, Any]) -> None:
    async with gateway(flags, timeout=SLOW) as client:
        first = (await health_when(client, serving, SLOW))["embedded"]["pid"]
        os.kill(first, signal.SIGKILL)
        health = await health_when(client, lambda h: serving(h) and h["embedded"]["pid"] != first, SLOW)
        text, _ = await ask_capital(client)
    assert "Paris" in text and health["embedded"]["restarts"] == 1
    wait_until(lambda: dead(health["embedded"]["pid"]))
