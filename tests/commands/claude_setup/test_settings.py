"""What claude-setup writes into Claude Code's settings.json, for small and large windows, and
how it merges into a file the user already has."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from codexgate.commands.claude_setup.settings import (
    ClaudeRoutes,
    ClaudeSetupError,
    base_url_for_claude,
    claude_env,
    compact_threshold,
    looks_like_claude_model,
    render_exports,
    render_json,
    write_settings,
)

ROUTES = ClaudeRoutes.of("coder", small="fast")


def test_a_32k_route_gets_its_window_and_an_output_budget_that_leaves_room_to_work() -> None:
    env = claude_env("http://127.0.0.1:8787", "cgk-token", ROUTES, 32_768)
    assert env == {
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:8787",
        "ANTHROPIC_AUTH_TOKEN": "cgk-token",
        "ANTHROPIC_API_KEY": "",
        "ANTHROPIC_MODEL": "coder",
        "ANTHROPIC_DEFAULT_OPUS_MODEL": "coder",
        "ANTHROPIC_DEFAULT_SONNET_MODEL": "coder",
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": "fast",
        "ANTHROPIC_SMALL_FAST_MODEL": "fast",
        "CLAUDE_CODE_SUBAGENT_MODEL": "coder",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_MAX_CONTEXT_TOKENS": "32768",
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "4096",
    }
    # with Claude Code's own 32,000 it would compact below zero tokens, i.e. on every turn
    assert compact_threshold(32_768, 32_000) < 0 < compact_threshold(32_768, 4_096) == 15_672


def test_a_200k_route_gets_its_window_and_an_eighth_of_it_for_output() -> None:
    env = claude_env("http://gw:8787", "t", ROUTES, 200_000)
    assert (env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"], env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"]) == (
        "200000",
        "25000",
    )
    assert compact_threshold(200_000, 25_000) == compact_threshold(200_000, 32_000) == 167_000
    assert claude_env("http://gw", "t", ROUTES, 1_000_000)["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "32000"


def test_an_unknown_window_writes_no_window_settings() -> None:
    env = claude_env("http://gw", "t", ROUTES, None)
    assert "CLAUDE_CODE_MAX_CONTEXT_TOKENS" not in env and "CLAUDE_CODE_MAX_OUTPUT_TOKENS" not in env


def test_routes_left_out_are_the_main_route() -> None:
    assert ClaudeRoutes.of("m") == ClaudeRoutes("m", "m", "m", "m", "m")
    assert ClaudeRoutes.of("m", subagent="s", opus="o").conversations() == ["m", "s", "o"]


@pytest.mark.parametrize(
    ("url", "base"),
    [("http://gw:8787", "http://gw:8787"), ("http://gw:8787/v1", "http://gw:8787"),
     ("http://gw:8787/v1/", "http://gw:8787"), ("https://gw/team/v1", "https://gw/team")],
)  # fmt: skip
def test_the_base_url_has_no_v1_because_claude_code_appends_it(url: str, base: str) -> None:
    assert base_url_for_claude(url) == base


@pytest.mark.parametrize(
    ("name", "claude"),
    [("claude-local", False), ("my-claude-model", False), ("qwen3-coder", False), ("sonnet", True),
     ("opus[1m]", True), ("claude-sonnet-4-5", True), ("anthropic/claude-sonnet-4-5", True),
     ("claude-3-5-haiku-latest", True)],
)  # fmt: skip
def test_names_claude_code_takes_for_its_own_models(name: str, claude: bool) -> None:
    """As measured with 2.1.332's /context: these names get Claude's window whatever
    CLAUDE_CODE_MAX_CONTEXT_TOKENS says; the others get the variable's."""
    assert looks_like_claude_model(name) is claude


def test_merging_keeps_every_other_setting_and_the_users_own_variables(tmp_path: Path) -> None:
    path = tmp_path / ".claude" / "settings.json"
    path.parent.mkdir()
    before = {
        "permissions": {"allow": ["Bash(git status)"]},
        "model": "sonnet",
        "env": {
            "HTTPS_PROXY": "http://proxy:3128",
            "ANTHROPIC_MODEL": "old",
            "CLAUDE_CODE_MAX_CONTEXT_TOKENS": "8192",
        },
    }
    path.write_text(json.dumps(before))
    written = write_settings(path, claude_env("http://gw", "t", ROUTES, None), now=0)
    after = json.loads(path.read_text())
    assert {k: v for k, v in after.items() if k != "env"} == {k: v for k, v in before.items() if k != "env"}
    assert after["env"]["HTTPS_PROXY"] == "http://proxy:3128"
    assert after["env"]["ANTHROPIC_MODEL"] == "coder"
    assert "CLAUDE_CODE_MAX_CONTEXT_TOKENS" not in after["env"]  # ours, and no window known now
    assert written.removed == ("CLAUDE_CODE_MAX_CONTEXT_TOKENS",)
    assert written.backup == path.with_name("settings.json.19700101T000000Z.bak")
    assert json.loads(written.backup.read_text()) == before
    for file in (path, written.backup):
        assert stat.S_IMODE(file.stat().st_mode) == 0o600  # the key is in there
    assert sorted(p.name for p in path.parent.iterdir()) == [
        "settings.json",
        "settings.json.19700101T000000Z.bak",
    ]


def test_a_new_settings_file_is_created_with_its_folder_and_no_backup(tmp_path: Path) -> None:
    path = tmp_path / "home" / ".claude" / "settings.json"
    written = write_settings(path, {"ANTHROPIC_MODEL": "coder"})
    assert written.backup is None
    assert json.loads(path.read_text()) == {"env": {"ANTHROPIC_MODEL": "coder"}}


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"env": ["A=1"]}'])
def test_a_settings_file_that_is_not_a_json_object_is_never_overwritten(tmp_path: Path, content: str) -> None:
    path = tmp_path / "settings.json"
    path.write_text(content)
    with pytest.raises(ClaudeSetupError, match=str(path)):
        write_settings(path, {"ANTHROPIC_MODEL": "coder"})
    assert path.read_text() == content and list(tmp_path.iterdir()) == [path]


def test_printed_settings_show_the_token_as_its_variable_unless_asked() -> None:
    env = claude_env("http://gw", "cgk-secret", ROUTES, 32_768)
    hidden = render_exports(env, '"$CODEXGATE_API_KEY"')
    assert 'export ANTHROPIC_AUTH_TOKEN="$CODEXGATE_API_KEY"\n' in hidden and "cgk-secret" not in hidden
    assert "export ANTHROPIC_API_KEY=''\n" in hidden
    assert "export ANTHROPIC_AUTH_TOKEN=cgk-secret\n" in render_exports(env, None)
    shown = json.loads(render_json(env, "<the value of $CODEXGATE_API_KEY>"))
    assert shown["env"]["ANTHROPIC_AUTH_TOKEN"] == "<the value of $CODEXGATE_API_KEY>"
    assert "cgk-secret" not in json.dumps(shown)
