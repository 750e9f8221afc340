"""`codexgate claude-setup`: which key, which windows, what it prints and writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from codexgate.cli import main
from codexgate.commands.claude_setup.command import NO_KEY_TOKEN, gateway_key
from codexgate.config import ConfigError, load_settings
from tests.support.servers import run_asgi_server

CONFIG = """
[[upstreams]]
name = "u"
base_url = "http://127.0.0.1:9/v1"
[[models]]
name = "coder"
context_window = 200000
[[models]]
name = "small"
context_window = 32768
"""
KEYS = """
[[api_keys]]
name = "alice"
key_env = "ALICE_KEY"
"""


@pytest.fixture(autouse=True)
def no_keys_here(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ALICE_KEY", "OTHER_KEY", "CODEXGATE_API_KEY", "CODEXGATE_API_KEYS"):
        monkeypatch.delenv(name, raising=False)


def config(tmp_path: Path, text: str = CONFIG) -> Path:
    path = tmp_path / "codexgate.toml"
    path.write_text(text)
    return path


def setup(tmp_path: Path, *args: str, text: str = CONFIG) -> tuple[int, dict[str, str]]:
    settings = tmp_path / "settings.json"
    code = main(["claude-setup", "--config", str(config(tmp_path, text)), "--settings", str(settings), *args])
    env = json.loads(settings.read_text())["env"] if settings.exists() else {}
    return code, env


def test_the_smallest_window_of_the_conversation_routes_is_written(tmp_path: Path) -> None:
    code, env = setup(tmp_path, "--model", "coder", "--subagent-model", "small")
    assert code == 0
    assert (env["ANTHROPIC_MODEL"], env["CLAUDE_CODE_SUBAGENT_MODEL"]) == ("coder", "small")
    assert (env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"], env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"]) == ("32768", "4096")


def test_the_small_models_window_does_not_shrink_the_conversations(tmp_path: Path) -> None:
    code, env = setup(tmp_path, "--model", "coder", "--small-model", "small")
    assert code == 0 and env["ANTHROPIC_DEFAULT_HAIKU_MODEL"] == env["ANTHROPIC_SMALL_FAST_MODEL"] == "small"
    assert env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == "200000"


async def vllm_models(scope: Any, receive: Any, send: Any) -> None:
    """A `/v1/models` that reports `max_model_len`, as vLLM does."""
    if scope["type"] != "http":
        return
    body = {"object": "list", "data": [{"id": "Qwen/Qwen3-8B", "object": "model", "max_model_len": 40960}]}
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}
    )
    await send({"type": "http.response.body", "body": json.dumps(body).encode()})


def test_a_window_the_upstream_reports_is_used_for_a_route_with_none_configured(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with run_asgi_server(vllm_models) as url:
        text = f'[[upstreams]]\nname = "vllm"\nbase_url = "{url}/v1"\n[[models]]\nname = "qwen"\nmodel = "Qwen/Qwen3-8B"\n'
        code, env = setup(tmp_path, "--model", "qwen", text=text)
    assert code == 0 and env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == "40960"
    assert "route qwen: context window 40960" in capsys.readouterr().out


def test_an_unknown_window_is_said_and_written_as_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ "elsewhere" is no route: the only upstream is asked, and answers nothing (a closed port)."""
    code, env = setup(tmp_path, "--model", "elsewhere")
    assert code == 0 and "CLAUDE_CODE_MAX_CONTEXT_TOKENS" not in env
    assert "1,000,000 tokens" in capsys.readouterr().err
    code, env = setup(tmp_path, "--model", "elsewhere", "--context-window", "65536")
    assert code == 0 and env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == "65536"


def test_a_window_too_small_for_claude_code_and_a_claude_name_are_warned_about(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (
        CONFIG
        + '[[models]]\nname = "tiny"\ncontext_window = 16384\n[[models]]\nname = "sonnet"\ncontext_window = 65536\n'
    )
    assert setup(tmp_path, "--model", "tiny", text=text)[0] == 0
    assert "too small for Claude Code" in capsys.readouterr().err
    assert setup(tmp_path, "--model", "sonnet", text=text)[0] == 0
    assert "takes the route name 'sonnet' for one of Claude's own models" in capsys.readouterr().err


def test_the_key_is_the_gateways_configured_one_and_never_printed_unless_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ALICE_KEY", "cgk-alice-secret-0123456789")
    code, env = setup(tmp_path, "--model", "coder", text=CONFIG + KEYS)
    assert code == 0 and env["ANTHROPIC_AUTH_TOKEN"] == "cgk-alice-secret-0123456789"
    assert env["ANTHROPIC_API_KEY"] == ""
    out = capsys.readouterr().out
    assert "$ALICE_KEY" in out and "cgk-alice-secret" not in out
    assert (
        main(
            ["claude-setup", "--config", str(config(tmp_path, CONFIG + KEYS)), "--model", "coder", "--print"]
        )
        == 0
    )
    printed = capsys.readouterr()
    assert (
        'export ANTHROPIC_AUTH_TOKEN="$ALICE_KEY"' in printed.out
        and "cgk-alice" not in printed.out + printed.err
    )
    argv = [
        "claude-setup",
        "--config",
        str(config(tmp_path, CONFIG + KEYS)),
        "--model",
        "coder",
        "--print",
        "--show-key",
    ]
    assert main(argv) == 0
    assert "export ANTHROPIC_AUTH_TOKEN=cgk-alice-secret-0123456789" in capsys.readouterr().out


def test_print_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = tmp_path / "settings.json"
    argv = [
        "claude-setup",
        "--config",
        str(config(tmp_path)),
        "--model",
        "coder",
        "--settings",
        str(settings),
    ]
    assert main([*argv, "--print", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["env"]["ANTHROPIC_MODEL"] == "coder"
    assert not settings.exists()


def test_which_key_claude_code_sends(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with_keys = load_settings({}, config(tmp_path, CONFIG + KEYS), environ={})
    without = load_settings({}, config(tmp_path), environ={})
    assert gateway_key(without, None, {}).value == NO_KEY_TOKEN  # Claude Code will not start with none
    with pytest.raises(ConfigError, match="ALICE_KEY"):
        gateway_key(with_keys, None, {})
    assert gateway_key(with_keys, None, {"ALICE_KEY": "k" * 20}).variable == "ALICE_KEY"
    assert (
        gateway_key(with_keys, "OTHER_KEY", {"OTHER_KEY": "o" * 20, "ALICE_KEY": "k" * 20}).value == "o" * 20
    )
    with pytest.raises(ConfigError, match="--key-env OTHER_KEY: the variable is not set"):
        gateway_key(with_keys, "OTHER_KEY", {})
    one = {"CODEXGATE_API_KEYS": "bob=" + "b" * 20}
    assert gateway_key(without, None, one).value == "b" * 20
    several = {"CODEXGATE_API_KEYS": "bob=" + "b" * 20 + ",carol=" + "c" * 20}
    with pytest.raises(ConfigError, match="CODEXGATE_API_KEY"):
        gateway_key(without, None, several)
    assert (
        gateway_key(without, None, {**several, "CODEXGATE_API_KEY": "c" * 20}).variable == "CODEXGATE_API_KEY"
    )


def test_a_missing_key_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, env = setup(tmp_path, "--model", "coder", text=CONFIG + KEYS)
    assert code == 2 and env == {}
    assert "none is set here (ALICE_KEY)" in capsys.readouterr().err
