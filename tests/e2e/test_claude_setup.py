"""`codexgate claude-setup` writes ~/.claude/settings.json, and the pinned Claude Code, started
with nothing of ours in its environment, follows it: the recording server standing in for the
gateway sees the base URL, the bearer token, the main and sub-agent routes and the output
budget written there, and Claude Code reports the window written there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codexgate.cli import main
from tests.e2e.claude_cli import JSON, MessagesRecorder, Reply, run_claude, text, tool_use
from tests.support.servers import run_asgi_server

pytestmark = pytest.mark.e2e

CONFIG = """
[[upstreams]]
name = "u"
base_url = "http://127.0.0.1:9/v1"
[[models]]
name = "main-route"
context_window = 32768
[[models]]
name = "sub-route"
context_window = 65536
[[models]]
name = "fast-route"
context_window = 8192
[[api_keys]]
name = "alice"
key_env = "CLAUDE_SETUP_E2E_KEY"
"""
KEY = "cgk-e2e-alice-0123456789abcdef"


def delegate_once(body: JSON, index: int) -> Reply:
    """The first request starts a sub-agent; every later one (the sub-agent's too) answers."""
    if index == 0:
        return tool_use("Agent", description="Say hi", prompt="Say hi.", subagent_type="general-purpose")
    return text("Done.")


def test_claude_code_follows_the_settings_claude_setup_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    settings = home / ".claude" / "settings.json"
    config = tmp_path / "codexgate.toml"
    config.write_text(CONFIG)
    monkeypatch.setenv("CLAUDE_SETUP_E2E_KEY", KEY)
    recorder = MessagesRecorder(delegate_once)
    with run_asgi_server(recorder) as url:
        argv = [
            "claude-setup",
            "--config",
            str(config),
            "--gateway-url",
            f"{url}/v1",
            "--settings",
            str(settings),
        ]
        argv += ["--model", "main-route", "--subagent-model", "sub-route", "--small-model", "fast-route"]
        assert main(argv) == 0
        assert json.loads(settings.read_text())["env"]["ANTHROPIC_BASE_URL"] == url
        run = run_claude("delegate a greeting", home=home, workdir=tmp_path / "work", allowed_tools=["Agent"],
                         quiet_network=False)  # fmt: skip
    assert run.ok, run.describe()
    requests = recorder.requests
    assert requests and all(r.path == "/v1/messages?beta=true" for r in requests), [r.path for r in requests]
    assert {r.headers.get("authorization") for r in requests} == {f"Bearer {KEY}"}
    assert not any("x-api-key" in r.headers for r in requests)
    bodies = [r.body or {} for r in requests]
    assert bodies[0]["model"] == "main-route"
    assert {b["model"] for b in bodies} == {"main-route", "sub-route"}
    assert {b["max_tokens"] for b in bodies} == {4096}  # CLAUDE_CODE_MAX_OUTPUT_TOKENS
    assert run.model_usage["main-route"]["contextWindow"] == 32768  # CLAUDE_CODE_MAX_CONTEXT_TOKENS
