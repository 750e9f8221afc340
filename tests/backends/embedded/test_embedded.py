"""The embedded model (backends/embedded/; backends/embedded/fallback.py), with a stand-in `xllamacpp`
(tests/support/fake_llama_server.py) laid out as a fetched runtime, or a fake uv whose download
never ends or fails: `serve` with nothing configured and nothing found runs it, supervises it
(restarted after SIGKILL, stopped with the gateway, not restarted after SIGILL), holds requests
while it downloads and then refuses them saying how far it is, says why on a CPU it cannot run
on, yields to a real server found later, and tells `codex-setup` its window. The real model is
in tests/test_embedded_model.py."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import httpx
import pytest

from codexgate.backends.embedded import runtime
from codexgate.backends.embedded.fallback import FALLBACK_NOTE
from codexgate.backends.embedded.runtime import cpu_problem, find_runtime, runtime_home
from codexgate.backends.embedded.supervisor import LlamaOptions, LlamaSupervisor
from codexgate.backends.http.transport import AiohttpTransport
from codexgate.cli import main
from codexgate.config import ConfigError, EmbeddedUpstream, load_settings
from codexgate.errors import NoUpstream
from tests.support.embedded_gateway import gateway, health_when, in_state, serving
from tests.support.fake_llama_server import fake_llama_executable, fake_runtime
from tests.support.fake_upstream import FakeUpstream, text_reply
from tests.support.processes import dead, free_port, until, wait_until
from tests.support.servers import run_asgi_server


@pytest.fixture
def nothing_local(monkeypatch: pytest.MonkeyPatch) -> int:
    """Discovery looks at one closed port (returned): nothing is found."""
    port = free_port()
    monkeypatch.setattr(
        "codexgate.backends.discovery.LOCAL_SERVERS", (("Test server", f"http://127.0.0.1:{port}/v1"),)
    )
    return port


async def answer(client: httpx.AsyncClient, model: str = "smollm2-135m") -> str:
    response = await client.post("/v1/responses", json={"model": model, "input": "hi"})
    assert response.status_code == 200, response.text
    text: str = response.json()["output"][0]["content"][0]["text"]
    return text


async def test_with_nothing_configured_or_found_serve_runs_the_embedded_model(
    tmp_path: Path, nothing_local: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="codexgate")
    fake_runtime(tmp_path / "llama")
    async with gateway({"llama_dir": str(tmp_path / "llama")}) as client:
        health = await health_when(client, serving)
        pid = health["embedded"]["pid"]
        assert await answer(client) == f"hello from pid {pid}"
        models = (await client.get("/v1/models")).json()
    assert health["status"] == "ok" and health["embedded"]["note"] == FALLBACK_NOTE
    assert health["embedded"]["model"] == "smollm2-135m" and health["context_windows"]["embedded"] == {
        "smollm2-135m": 8192
    }
    assert [m["id"] for m in models["data"]] == ["smollm2-135m"]
    assert FALLBACK_NOTE in caplog.messages
    wait_until(lambda: dead(pid))  # stopped with the gateway


async def test_the_child_is_started_with_the_window_and_tool_templates(
    tmp_path: Path, nothing_local: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG", logger="codexgate.backends.embedded.fallback")
    fake_runtime(tmp_path / "llama")
    config = {"llama_dir": str(tmp_path / "llama")}
    async with gateway(config) as client:
        await health_when(client, serving)
    [line] = [m for m in caplog.messages if "fake llama-server argv:" in m]
    argv = json.loads(line.split("argv:", 1)[1])
    assert argv[argv.index("-c") + 1] == "8192" and "--jinja" in argv
    assert "llama-server: fake xllamacpp omp: PASSIVE" in caplog.messages  # OpenMP's threads do not spin
    assert argv[argv.index("--alias") + 1] == "smollm2-135m" and argv[argv.index("--host") + 1] == "127.0.0.1"


async def test_a_killed_child_is_restarted_and_the_last_one_stopped_with_the_gateway(
    tmp_path: Path, nothing_local: int
) -> None:
    fake_runtime(tmp_path / "llama")
    async with gateway({"llama_dir": str(tmp_path / "llama")}) as client:
        first = (await health_when(client, serving))["embedded"]["pid"]
        os.kill(first, signal.SIGKILL)
        health = await health_when(client, lambda h: serving(h) and h["embedded"]["pid"] != first)
        second = health["embedded"]["pid"]
        assert await answer(client) == f"hello from pid {second}"
    assert health["embedded"]["restarts"] == 1
    wait_until(lambda: dead(second))
    assert not list((tmp_path / "llama" / "run").glob("*.json"))  # no PID left to reap


# `uv pip install ... --target DIR ...`: runs the given shell code with $target set.
FAKE_UV = """#!/bin/sh
while [ $# -gt 0 ]; do [ "$1" = --target ] && target=$2; shift; done
echo $$ >> "{pids}"
{body}
"""


def fake_uv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> Path:
    """A uv on PATH that downloads nothing and does `body`; returns the file of its PIDs."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    pids = tmp_path / "uv.pids"
    (fake_bin / "uv").write_text(FAKE_UV.format(pids=pids, body=body))
    (fake_bin / "uv").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake_bin}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("UV", raising=False)
    return pids


async def test_the_runtime_is_downloaded_once_and_then_serves(
    tmp_path: Path, nothing_local: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    layout = tmp_path / "layout"
    home = fake_runtime(layout)
    pids = fake_uv(tmp_path, monkeypatch, f'sleep 0.5; cp -r "{home}/." "$target"')
    async with gateway({"llama_dir": str(tmp_path / "llama")}) as client:
        downloading = await health_when(client, in_state("downloading"))
        text = await answer(client)  # held while it downloads, then answered
    assert text.startswith("hello from pid") and len(pids.read_text().split()) == 1
    assert "being downloaded" in downloading["embedded"]["message"]
    assert find_runtime(tmp_path / "llama") is not None  # kept for the next gateway


async def test_past_the_wait_for_the_download_requests_get_503_saying_how_far(
    tmp_path: Path, nothing_local: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("codexgate.backends.embedded.backend.START_WAIT_SECONDS", 0.3)
    pids = fake_uv(tmp_path, monkeypatch, "exec sleep 600")
    async with gateway({"llama_dir": str(tmp_path / "llama")}) as client:
        health = await health_when(client, in_state("downloading"))
        response = await client.post("/v1/responses", json={"model": "smollm2-135m", "input": "hi"})
        uv = int(pids.read_text().split()[0])
    assert response.status_code == 503
    error = response.json()["error"]
    assert error["code"] == "embedded_model_starting"
    assert "being downloaded" in error["message"] and "--upstream URL" in error["message"]
    assert health["status"] == "unavailable" and health["embedded"]["note"] == FALLBACK_NOTE
    wait_until(lambda: dead(uv))  # the download stops with the gateway
    assert not runtime_home(tmp_path / "llama").exists()


async def test_a_failed_download_is_reported_with_its_cause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_uv(tmp_path, monkeypatch, "echo 'no wheel for this platform (fake uv)'; exit 1")
    transport = AiohttpTransport()
    supervisor = LlamaSupervisor(LlamaOptions(root=tmp_path / "llama", alias="m"), transport)
    try:
        supervisor.start()
        await until(lambda: supervisor.state == "failed", 30)
        with pytest.raises(NoUpstream, match="no wheel for this platform \\(fake uv\\)"):
            await supervisor.wait_serving(1)
    finally:
        await supervisor.aclose()
        await transport.aclose()
    assert "--upstream URL" in (supervisor.error or "")


async def test_on_a_cpu_the_runtime_cannot_run_on_nothing_is_downloaded_and_it_says_why(
    tmp_path: Path, nothing_local: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    pids = fake_uv(tmp_path, monkeypatch, "exit 1")
    monkeypatch.setattr(runtime, "cpu_problem", lambda: "this CPU lacks AVX2, which the prebuilt ... needs")
    async with gateway({"llama_dir": str(tmp_path / "llama")}) as client:
        health = await health_when(client, in_state("failed"))
        response = await client.post("/v1/responses", json={"model": "smollm2-135m", "input": "hi"})
    assert response.status_code == 503 and "lacks AVX2" in response.json()["error"]["message"]
    assert "--upstream URL" in health["embedded"]["message"] and not pids.exists()


def test_the_cpu_check_names_the_missing_instructions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("platform.machine", lambda: "x86_64")
    assert cpu_problem("flags\t\t: fpu sse2 avx avx2 fma f16c\n") is None
    problem = cpu_problem("flags\t\t: fpu sse2 avx fma\n")
    assert problem is not None and "AVX2, F16C" in problem


async def test_a_child_killed_by_sigill_is_not_restarted(tmp_path: Path, nothing_local: int) -> None:
    fake_runtime(tmp_path / "llama", sigill=True)
    async with gateway({"llama_dir": str(tmp_path / "llama")}) as client:
        health = await health_when(client, in_state("failed"))
    assert "SIGILL" in health["embedded"]["message"] and "--upstream URL" in health["embedded"]["message"]
    assert health["embedded"]["restarts"] == 0


async def test_a_local_server_found_later_takes_over_from_the_embedded_model(
    tmp_path: Path, nothing_local: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("codexgate.backends.embedded.fallback.WATCH_SECONDS", 0.1)
    monkeypatch.setattr("codexgate.backends.embedded.fallback.GRACE_SECONDS", 0.1)
    fake_runtime(tmp_path / "llama")
    async with gateway({"llama_dir": str(tmp_path / "llama")}) as client:
        pid = (await health_when(client, serving))["embedded"]["pid"]
        real = FakeUpstream(lambda body: text_reply("from the real server"), models=["qwen"])
        with run_asgi_server(real, port=nothing_local):
            health = await health_when(client, lambda h: "test-server" in h["upstreams"])
            assert await answer(client) == "from the real server"
            wait_until(lambda: dead(pid))
    assert list(health["upstreams"]) == ["test-server"] and "embedded" not in health


async def test_without_the_fallback_nothing_runs(tmp_path: Path, nothing_local: int) -> None:
    fake_runtime(tmp_path / "llama")
    async with gateway({"llama_dir": str(tmp_path / "llama"), "embedded": False}) as client:
        response = await client.post("/v1/responses", json={"model": "m", "input": "x"})
        health = await client.get("/healthz")
    assert response.status_code == 503 and response.json()["error"]["code"] == "no_upstream_configured"
    assert "embedded" not in health.json()


async def test_a_configured_embedded_upstream_runs_its_own_gguf_with_its_settings(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG", logger="codexgate.backends.embedded.fallback")
    gguf = tmp_path / "Qwen3-0.6B-Q8_0.gguf"
    gguf.write_text("not a real gguf")
    flags = {
        "llama_server": str(fake_llama_executable(tmp_path)),
        "llama_dir": str(tmp_path / "llama"),
        "models": [{"name": "tiny", "upstream": "local"}],  # a route: the child's window stays
        "upstreams": [{"name": "local", "kind": "embedded", "model_path": str(gguf), "context_window": 4096,
                       "threads": 1}],
    }  # fmt: skip
    async with gateway(flags) as client:
        health = await health_when(client, serving)
        assert (await answer(client, "tiny")).startswith("hello from pid")
        too_long = await client.post("/v1/responses", json={"model": "tiny", "input": "word " * 6000})
    assert health["embedded"]["note"] is None  # configured, not a fallback
    assert too_long.status_code == 400 and too_long.json()["error"]["code"] == "context_length_exceeded"
    assert health["context_windows"]["local"] == {"qwen3-0.6b-q8_0": 4096}
    [line] = [m for m in caplog.messages if "fake llama-server argv:" in m]
    argv = json.loads(line.split("argv:", 1)[1])
    assert argv[argv.index("-m") + 1] == str(gguf) and argv[argv.index("-t") + 1] == "1"


def test_embedded_settings_belong_to_embedded_upstreams() -> None:
    settings = load_settings({"upstreams": [{"name": "e", "kind": "embedded"}]}, environ={})
    assert isinstance(settings.upstreams[0], EmbeddedUpstream) and settings.embedded
    assert load_settings({}, environ={"CODEXGATE_EMBEDDED": "false"}).embedded is False
    assert load_settings({}, environ={"CODEXGATE_LLAMA_DIR": "/x"}).llama_dir == "/x"
    with pytest.raises(ConfigError, match="model_path applies to upstreams of kind embedded"):
        load_settings({"upstreams": [{"name": "c", "base_url": "http://h/v1", "model_path": "m.gguf"}]})
    with pytest.raises(
        ConfigError, match="base_url applies to upstreams of kind anthropic or chat or responses"
    ):
        load_settings({"upstreams": [{"name": "e", "kind": "embedded", "base_url": "http://h/v1"}]})


def test_codex_setup_points_codex_at_the_embedded_model(
    tmp_path: Path, nothing_local: int, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["codex-setup", "--codex-home", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert "too small for Codex" in err and "point codexgate at a real model with --upstream URL" in err
    assert "`serve` runs the embedded SmolLM2-135M" in out
    assert "model smollm2-135m: context window 8192 (the embedded model)" in out
    [entry] = json.loads((tmp_path / "codexgate-models.json").read_text())["models"]
    assert entry["slug"] == "smollm2-135m" and entry["context_window"] == 8192
    assert "does not call tools reliably" in entry["description"]
    assert 'model = "smollm2-135m"' in (tmp_path / "codexgate.config.toml").read_text()
    assert main(["codex-setup", "--no-embedded", "--codex-home", str(tmp_path / "x")]) == 2
    assert "no local model server found" in capsys.readouterr().err


async def test_the_chat_stages_apply_to_the_embedded_model(tmp_path: Path, nothing_local: int) -> None:
    fake_runtime(tmp_path / "llama")
    said = '<think>the user wants a listing</think><tool_call>{"name": "exec_command", "arguments": {"cmd": "ls"}}</tool_call>'
    tool = {"type": "function", "name": "exec_command", "parameters": {"type": "object", "properties": {}}}
    body = {"model": "smollm2-135m", "input": "echo:" + said, "tools": [tool]}
    async with gateway({"llama_dir": str(tmp_path / "llama")}) as client:
        await health_when(client, serving)
        response = await client.post("/v1/responses", json=body)
    output = response.json()["output"]
    assert [item["type"] for item in output] == ["reasoning", "function_call"]  # think tags, text tool calls
    assert output[0]["summary"][0]["text"] == "the user wants a listing"
    assert output[1]["name"] == "exec_command" and json.loads(output[1]["arguments"]) == {"cmd": "ls"}


async def test_the_tiny_models_answers_are_capped_unless_the_client_says(
    tmp_path: Path, nothing_local: int
) -> None:
    fake_runtime(tmp_path / "llama")
    async with gateway({"llama_dir": str(tmp_path / "llama")}) as client:
        await health_when(client, serving)
        capped = await client.post("/v1/responses", json={"model": "smollm2-135m", "input": "max_tokens?"})
        asked = await client.post(
            "/v1/responses", json={"model": "smollm2-135m", "input": "max_tokens?", "max_output_tokens": 50}
        )
    assert capped.json()["output"][0]["content"][0]["text"] == "1024"
    assert asked.json()["output"][0]["content"][0]["text"] == "50"


SMOLLM2_SAMPLING = {"model": "smollm2-135m", "temperature": 0.2, "top_p": 0.9}  # its card's values


async def test_sampling_follows_the_model_the_embedded_child_runs_not_the_name_asked_for(
    tmp_path: Path, nothing_local: int
) -> None:
    """The README's `qwen3-coder` once got Qwen's sampling applied to SmolLM2, and `x` none."""
    fake_runtime(tmp_path / "llama")
    async with gateway({"llama_dir": str(tmp_path / "llama")}) as client:
        await health_when(client, serving)
        said = {}
        for name in ("qwen3-coder", "x", "smollm2-135m"):
            response = await client.post("/v1/responses", json={"model": name, "input": "sampling?"})
            assert response.json()["model"] == name  # the answer keeps the client's name
            said[name] = json.loads(response.json()["output"][0]["content"][0]["text"])
    assert said == dict.fromkeys(("qwen3-coder", "x", "smollm2-135m"), SMOLLM2_SAMPLING)


async def test_a_routes_sampling_follows_the_model_its_embedded_upstream_runs(tmp_path: Path) -> None:
    """A route named `qwen3-coder` on the default model gets SmolLM2's; a route named `tiny` on
    one's own Qwen3 GGUF gets Qwen3's (the family is in the file's name, the model's id)."""
    gguf = tmp_path / "Qwen3-0.6B-Q8_0.gguf"
    gguf.write_text("not a real gguf")
    flags = {
        "discover": False,
        "llama_server": str(fake_llama_executable(tmp_path)),
        "llama_dir": str(tmp_path / "llama"),
        "upstreams": [{"name": "small", "kind": "embedded"},
                      {"name": "own", "kind": "embedded", "model_path": str(gguf)}],
        "models": [{"name": "qwen3-coder", "upstream": "small"}, {"name": "tiny", "upstream": "own"}],
    }  # fmt: skip
    async with gateway(flags) as client:
        said = {}
        for name in ("qwen3-coder", "tiny"):
            response = await client.post("/v1/responses", json={"model": name, "input": "sampling?"})
            assert response.status_code == 200, response.text
            said[name] = json.loads(response.json()["output"][0]["content"][0]["text"])
    assert said == {
        "qwen3-coder": SMOLLM2_SAMPLING,
        "tiny": {"model": "qwen3-0.6b-q8_0", "temperature": 0.6, "top_p": 0.95},  # Qwen3's card
    }


async def test_a_long_prefill_on_the_embedded_model_is_logged_as_it_goes(
    tmp_path: Path, nothing_local: int, caplog: pytest.LogCaptureFixture
) -> None:
    """The gateway asks the child for its prompt progress (llama.cpp's `return_progress`), read
    in batches of 512 tokens so that it comes every few seconds; Codex's first prompt (~5k
    tokens) takes a minute or more on a CPU before the first token."""
    caplog.set_level("DEBUG", logger="codexgate")
    fake_runtime(tmp_path / "llama")
    async with gateway({"llama_dir": str(tmp_path / "llama")}) as client:
        await health_when(client, serving)
        quick = await client.post("/v1/responses", json={"model": "smollm2-135m", "input": "hi"})
        assert [m for m in caplog.messages if ": prompt " in m] == []  # under 3 s: nothing
        slow = await client.post("/v1/responses", json={"model": "smollm2-135m", "input": "slow prefill"})
    assert quick.status_code == slow.status_code == 200
    assert [m for m in caplog.messages if ": prompt " in m] == [
        "upstream embedded: prompt 1,024/5,112 tokens processed (20%), 4 s, 256 tokens/s, about 16 s to go",
        "upstream embedded: prompt 3,072/5,112 tokens processed (60%), 12 s, 256 tokens/s, about 8 s to go",
        "upstream embedded: prompt 5,112/5,112 tokens processed (100%) in 20 s (256 tokens/s); the answer starts",
    ]
    [line] = [m for m in caplog.messages if "fake llama-server argv:" in m]
    argv = json.loads(line.split("argv:", 1)[1])
    assert argv[argv.index("-b") + 1] == "512"
