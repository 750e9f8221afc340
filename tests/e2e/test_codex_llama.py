"""The whole chain with nothing scripted: `codexgate doctor` reads llama.cpp's llama-server
(SmolLM2-135M-Instruct, 4096-token context) and writes its recommended settings; the gateway
runs with them; the real Codex CLI asks a question through it.

Codex's request is its own (its tools, skills, permissions and environment) except for its base
prompt, the first developer message, which the model catalog's `base_instructions` sets
(codex-contract.md): one line here instead of Codex's ~4.3k tokens. With it the request was
~5.7k tokens and its prefill took most of this test's 81 s on 2 cores, proving nothing the
short one does not: the gateway passes that message as it passes any text, and every other e2e
test (run_codex_exec's default) sends Codex's whole prompt.
The model is far too small to do real work and may still loop despite the recommended
repetition penalty, so the test asserts what the chain must get right whatever the model says:
either the turn completes with the answer and llama.cpp's own usage, or it ends as an
incomplete response at the recommended per-turn cap, reported as such; never a cut stream or a
hang."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from codexgate.app import build_app
from codexgate.backends.http.transport import AiohttpTransport
from codexgate.commands.codex_setup.catalog import ModelSpec
from codexgate.commands.doctor.command import write_settings
from codexgate.commands.doctor.probe import Doctor
from codexgate.config import load_settings
from tests.e2e.codex_cli import CodexTraffic, run_codex_exec
from tests.support.llama_server import post_json, run_llama_server
from tests.support.servers import run_asgi_server

pytestmark = pytest.mark.e2e

N_CTX = 4096
BASE_PROMPT = "You are Codex, a coding agent. Answer the user briefly."


async def doctor_report(base_url: str) -> dict:  # type: ignore[type-arg]
    transport = AiohttpTransport()
    try:
        return (await Doctor(transport, base_url, timeout=120).run()).recommended
    finally:
        await transport.aclose()


def texts(body: dict) -> list[str]:  # type: ignore[type-arg]
    """The text of every message of a Responses request."""
    return [
        part["text"]
        for item in body["input"]
        if item.get("type") == "message"
        for part in item["content"]
        if isinstance(part, dict) and "text" in part
    ]


def test_codex_answers_through_codexgate_from_a_real_llama_cpp_server(tmp_path: Path) -> None:
    config = tmp_path / "codexgate.toml"
    with run_llama_server(N_CTX, "--alias", "smollm2") as llama:
        recommended = asyncio.run(doctor_report(llama.base_url))
        write_settings(config, recommended)
        settings = load_settings({"discover": False}, config, environ={})
        [model] = settings.models
        assert model.context_window == N_CTX and model.extra_body["repeat_penalty"] == 1.1
        traffic = CodexTraffic(build_app(settings, environ={}))
        with run_asgi_server(traffic, lifespan="on") as gateway:
            run = run_codex_exec(
                "Reply with one short friendly sentence.",
                base_url=gateway,
                model="smollm2",
                workdir=tmp_path / "work",
                codex_home=tmp_path / "home",
                specs=[ModelSpec(slug="smollm2", context_window=None, base_instructions=BASE_PROMPT)],
                timeout=300,
            )
        [request] = traffic.bodies()
        sent = texts(request)
        # The tokens of what Codex wrote, by llama.cpp's own tokenizer (~1.1k).
        written = sum(len(post_json(llama.root + "/tokenize", {"content": text})["tokens"]) for text in sent)
    print(f"codex run ok={run.ok}: {run.final_message or run.errors} ({written} tokens written)")
    assert sent[0] == BASE_PROMPT and len(sent) >= 3  # Codex's own messages follow it
    if run.ok:
        assert run.final_message and run.final_message.strip()
        assert run.usage is not None
        # llama.cpp's count of the whole prompt (not the gateway's estimate), below the window
        assert written <= run.usage["input_tokens"] < N_CTX and run.usage["output_tokens"] > 0
    else:
        incomplete = "Incomplete response returned, reason: max_output_tokens"
        assert set(run.errors) == {incomplete}, run.describe()  # as an `error` event and turn.failed
