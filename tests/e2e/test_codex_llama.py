"""The whole chain with nothing scripted: `codexgate doctor` reads llama.cpp's llama-server
(SmolLM2-135M-Instruct, 8192-token context, its trained maximum) and writes its recommended
settings; the gateway runs with them; the real Codex CLI asks a question through it.

Codex 0.169's first request is about 5.7k tokens in SmolLM2's template, so it fits. The model
is far too small to do real work and may still loop despite the recommended repetition
penalty, so the test asserts what the chain must get right whatever the model says: either
the turn completes with the answer and llama.cpp's own usage, or it ends as an incomplete
response at the recommended per-turn cap, reported as such; never a cut stream or a hang."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from codexgate.app import build_app
from codexgate.backends.http.transport import AiohttpTransport
from codexgate.commands.doctor.command import write_settings
from codexgate.commands.doctor.probe import Doctor
from codexgate.config import load_settings
from tests.e2e.codex_cli import run_codex_exec
from tests.support.llama_server import run_llama_server
from tests.support.servers import run_asgi_server

pytestmark = pytest.mark.e2e

N_CTX = 8192


async def doctor_report(base_url: str) -> dict:  # type: ignore[type-arg]
    transport = AiohttpTransport()
    try:
        return (await Doctor(transport, base_url, timeout=120).run()).recommended
    finally:
        await transport.aclose()


def test_codex_answers_through_codexgate_from_a_real_llama_cpp_server(tmp_path: Path) -> None:
    config = tmp_path / "codexgate.toml"
    with run_llama_server(N_CTX, "--alias", "smollm2") as llama:
        recommended = asyncio.run(doctor_report(llama.base_url))
        write_settings(config, recommended)
        settings = load_settings({"discover": False}, config, environ={})
        [model] = settings.models
        assert model.context_window == N_CTX and model.extra_body["repeat_penalty"] == 1.1
        with run_asgi_server(build_app(settings, environ={}), lifespan="on") as gateway:
            run = run_codex_exec(
                "Reply with one short friendly sentence.",
                base_url=gateway,
                model="smollm2",
                workdir=tmp_path / "work",
                codex_home=tmp_path / "home",
                timeout=300,
            )
    print(f"codex run ok={run.ok}: {run.final_message or run.errors}")
    if run.ok:
        assert run.final_message and run.final_message.strip()
        assert run.usage is not None
        # llama.cpp's count of Codex's prompt (not the gateway's estimate), below the window
        assert 3000 < run.usage["input_tokens"] < N_CTX and run.usage["output_tokens"] > 0
    else:
        incomplete = "Incomplete response returned, reason: max_output_tokens"
        assert set(run.errors) == {incomplete}, run.describe()  # as an `error` event and turn.failed
