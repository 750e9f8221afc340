"""`codexgate codex-setup`: which models, which context windows, what it writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from codexgate.cli import main
from codexgate.commands.codex_setup.command import model_specs
from codexgate.config import load_settings
from tests.support.fake_messages_upstream import FakeMessagesUpstream, model_entry
from tests.support.servers import run_asgi_server


async def vllm_like_models(scope: Any, receive: Any, send: Any) -> None:
    """A `/v1/models` that reports `max_model_len`, as vLLM does."""
    if scope["type"] != "http":
        return
    body = {
        "object": "list",
        "data": [
            {"id": "Qwen/Qwen3-8B", "object": "model", "max_model_len": 40960},
            {"id": "plain", "object": "model"},
        ],
    }
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}
    )
    await send({"type": "http.response.body", "body": json.dumps(body).encode()})


def test_routed_models_use_their_configured_windows(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        '[[upstreams]]\nname = "u"\nbase_url = "http://127.0.0.1:9/v1"\n'
        '[[models]]\nname = "coder"\ncontext_window = 65536\nsupports_images = true\n'
        '[[models]]\nname = "small"\n'
    )
    specs = model_specs(load_settings({}, config, environ={}), None, 16384)
    assert [(s.slug, s.context_window, s.supports_images) for s in specs] == [
        ("coder", 65536, True),
        ("small", 16384, False),
    ]


def test_unrouted_models_and_windows_come_from_the_upstream() -> None:
    with run_asgi_server(vllm_like_models) as url:
        specs = model_specs(load_settings({"upstream": url + "/v1"}, environ={}), None, None)
    assert [(s.slug, s.context_window) for s in specs] == [("Qwen/Qwen3-8B", 40960), ("plain", None)]


def test_the_command_writes_profile_and_catalog_and_prints_how_to_run_codex(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")  # no codex binary: the fallback prompt is used
    with run_asgi_server(vllm_like_models) as url:
        code = main(
            [
                "codex-setup",
                "--upstream",
                url + "/v1",
                "--port",
                "8899",
                "--codex-home",
                str(tmp_path),
                "--model",
                "Qwen/Qwen3-8B",
            ]
        )
    assert code == 0
    out = capsys.readouterr().out
    assert f"CODEX_HOME={tmp_path} codex --profile codexgate" in out
    catalog = json.loads((tmp_path / "codexgate-models.json").read_text())
    entry = catalog["models"][0]
    assert entry["slug"] == "Qwen/Qwen3-8B" and entry["context_window"] == 40960
    assert entry["apply_patch_tool_type"] == "freeform" and entry["supports_search_tool"] is False
    profile = (tmp_path / "codexgate.config.toml").read_text()
    assert 'base_url = "http://127.0.0.1:8899/v1"' in profile


def test_nothing_to_set_up_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["codex-setup", "--no-discover", "--codex-home", str(tmp_path)]) == 2
    assert "--model" in capsys.readouterr().err


def test_an_anthropic_route_gets_its_window_and_reasoning_levels_from_the_models_api(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("CLAUDE_KEY", "sk-ant-test")
    models = [
        model_entry("claude-sonnet-4-5", max_input_tokens=1_000_000),
        model_entry("local-qwen", max_input_tokens=32768),
    ]
    fake = FakeMessagesUpstream(models=models, api_key="sk-ant-test")
    with run_asgi_server(fake) as url:
        config = tmp_path / "c.toml"
        config.write_text(
            f'[[upstreams]]\nname = "claude"\nkind = "anthropic"\nbase_url = "{url}/v1"\napi_key_env = "CLAUDE_KEY"\n'
            '[[models]]\nname = "sonnet"\nmodel = "claude-sonnet-4-5"\n'
            '[[models]]\nname = "opus"\nmodel = "claude-opus-4-1"\n'  # not listed: the table
            '[[models]]\nname = "qwen"\nmodel = "local-qwen"\n'
        )
        assert main(["codex-setup", "--config", str(config), "--codex-home", str(tmp_path / "home")]) == 0
    catalog = json.loads((tmp_path / "home" / "codexgate-models.json").read_text())
    entries = {m["slug"]: m for m in catalog["models"]}
    assert entries["sonnet"]["context_window"] == 1_000_000  # listed: so the key went as x-api-key
    assert entries["opus"]["context_window"] == 200_000
    assert entries["qwen"]["context_window"] == 32768
    assert [level["effort"] for level in entries["sonnet"]["supported_reasoning_levels"]] == [
        "low",
        "medium",
        "high",
    ]
    assert entries["sonnet"]["input_modalities"] == ["text", "image"]
    assert entries["qwen"]["supported_reasoning_levels"] == []
    out = capsys.readouterr().out
    assert "model sonnet: context window 1000000 (/v1/models max_input_tokens)" in out
    assert "model opus: context window 200000 (Claude models' context window)" in out
