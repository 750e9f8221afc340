"""codex_setup writes a valid Codex catalog and profile layer and leaves the user's config alone."""

from __future__ import annotations

import json
import stat
import tomllib
from pathlib import Path
from typing import Any

import pytest

from codexgate.cli import main
from codexgate.commands.codex_setup.catalog import (
    DEFAULT_CONTEXT_WINDOW,
    FALLBACK_BASE_INSTRUCTIONS,
    CodexSetupError,
    ModelSpec,
    build_catalog,
    build_model_info,
    codex_base_instructions,
    render_config,
    write_codex_setup,
)

# codex-contract.md §7: ModelInfo fields Codex 0.169 requires, with their JSON types.
REQUIRED_FIELDS: dict[str, type | tuple[type, ...]] = {
    "slug": str,
    "display_name": str,
    "supported_reasoning_levels": list,
    "shell_type": str,
    "visibility": str,
    "supported_in_api": bool,
    "priority": int,
    "supports_reasoning_summaries": bool,
    "support_verbosity": bool,
    "truncation_policy": dict,
    "supports_parallel_tool_calls": bool,
    "experimental_supported_tools": list,
}
URL = "http://127.0.0.1:8080"


def test_model_info_has_every_required_field_with_its_type() -> None:
    info = build_model_info(ModelSpec("qwen3-coder", 65_536))

    for name, kind in REQUIRED_FIELDS.items():
        assert isinstance(info[name], kind), name
    assert info["visibility"] in {"list", "hide", "none"}
    assert info["truncation_policy"]["mode"] in {"tokens", "bytes"}
    assert json.loads(json.dumps(info)) == info


def test_model_info_advertises_freeform_apply_patch_and_no_search_or_verbosity() -> None:
    info = build_model_info(ModelSpec("m", 65_536))

    assert info["apply_patch_tool_type"] == "freeform"
    assert info["supports_search_tool"] is False
    assert info["support_verbosity"] is False
    assert info["input_modalities"] == ["text"]
    assert info["base_instructions"] == FALLBACK_BASE_INSTRUCTIONS


def test_model_info_sizes_window_compaction_and_tool_output_from_the_window() -> None:
    info = build_model_info(ModelSpec("m", 65_536))

    assert info["context_window"] == info["max_context_window"] == 65_536
    assert info["auto_compact_token_limit"] == int(65_536 * 0.8)
    assert info["truncation_policy"] == {"mode": "tokens", "limit": 8_192}
    big = build_model_info(ModelSpec("m", 1_000_000))
    assert big["truncation_policy"]["limit"] == 10_000


def test_unknown_context_window_uses_the_documented_default() -> None:
    info = build_model_info(ModelSpec("m", None))

    assert info["context_window"] == DEFAULT_CONTEXT_WINDOW == 32_768
    assert info["auto_compact_token_limit"] == 26_214  # 80%


def test_reasoning_and_image_models_get_levels_and_image_input() -> None:
    info = build_model_info(ModelSpec("m", 32_768, supports_reasoning=True, supports_images=True))

    assert [lvl["effort"] for lvl in info["supported_reasoning_levels"]] == ["low", "medium", "high"]
    assert info["default_reasoning_level"] == "medium"
    assert info["supports_reasoning_summaries"] is True
    assert info["input_modalities"] == ["text", "image"]


def test_explicit_knobs_override_the_derived_values() -> None:
    spec = ModelSpec(
        "m",
        100_000,
        display_name="My Model",
        auto_compact_token_limit=50_000,
        tool_output_token_limit=2_000,
        base_instructions="Be brief.",
    )
    info = build_model_info(spec, priority=3)

    assert info["display_name"] == "My Model"
    assert info["auto_compact_token_limit"] == 50_000
    assert info["truncation_policy"]["limit"] == 2_000
    assert info["base_instructions"] == "Be brief."
    assert info["priority"] == 3


@pytest.mark.parametrize(
    "spec",
    [
        ModelSpec("", 32_768),
        ModelSpec("m", 1_024),
        ModelSpec("m", 32_768, auto_compact_token_limit=40_000),
    ],
)
def test_impossible_specs_are_refused(spec: ModelSpec) -> None:
    with pytest.raises(CodexSetupError):
        build_model_info(spec)


def test_catalog_keeps_order_and_refuses_duplicates_or_nothing() -> None:
    catalog = build_catalog([ModelSpec("a", None), ModelSpec("b", None)])

    assert [m["slug"] for m in catalog["models"]] == ["a", "b"]
    assert [m["priority"] for m in catalog["models"]] == [0, 1]
    with pytest.raises(CodexSetupError):
        build_catalog([ModelSpec("a", None), ModelSpec("a", None)])
    with pytest.raises(CodexSetupError):
        build_catalog([])


def test_config_is_valid_toml_selecting_model_provider_and_catalog(tmp_path: Path) -> None:
    text = render_config("codexgate", URL, "qwen", tmp_path / "c.json", "codexgate")
    config = tomllib.loads(text)

    assert config["model"] == "qwen"
    assert config["model_provider"] == "codexgate"
    assert config["model_catalog_json"] == str((tmp_path / "c.json").resolve())
    assert config["web_search"] == "disabled"
    assert config["features"] == {"goals": False, "view_image": False}
    assert config["agents"] == {"enabled": False}
    provider = config["model_providers"]["codexgate"]
    assert provider["name"] != "OpenAI"
    assert provider["base_url"] == URL + "/v1"
    assert provider["wire_api"] == "responses"
    assert provider["supports_websockets"] is True
    assert provider["stream_idle_timeout_ms"] > 0
    assert "env_key" not in provider
    assert "profiles" not in config and "profile" not in config


@pytest.mark.parametrize("url", [URL, URL + "/", URL + "/v1", URL + "/v1/"])
def test_base_url_always_ends_in_v1(url: str) -> None:
    config = tomllib.loads(render_config("gw", url, "m", "/c.json", "p"))

    assert config["model_providers"]["gw"]["base_url"] == URL + "/v1"


def test_env_key_and_view_image_are_opt_in() -> None:
    text = render_config("gw", URL, "m", "/c.json", "p", env_key="GW_KEY", view_image=True)
    config = tomllib.loads(text)

    assert config["model_providers"]["gw"]["env_key"] == "GW_KEY"
    assert config["features"]["view_image"] is True


def test_websockets_can_be_turned_off() -> None:
    on = tomllib.loads(render_config("gw", URL, "m", "/c.json", "p"))
    off = tomllib.loads(render_config("gw", URL, "m", "/c.json", "p", websockets=False))

    assert on["model_providers"]["gw"]["supports_websockets"] is True
    assert off["model_providers"]["gw"]["supports_websockets"] is False


def test_remote_compaction_names_the_provider_openai_and_says_why() -> None:
    plain = render_config("gw", URL, "m", "/c.json", "p")
    text = render_config("gw", URL, "m", "/c.json", "p", remote_compaction=True)
    config = tomllib.loads(text)

    assert tomllib.loads(plain)["model_providers"]["gw"]["name"] == "codexgate"
    assert "compaction" not in plain
    provider = config["model_providers"]["gw"]
    assert provider["name"] == "OpenAI"  # exactly: Codex compares the display name
    assert config["model_provider"] == "gw"  # the id is unchanged
    assert provider["base_url"] == URL + "/v1"
    lines = text.splitlines()
    at = lines.index('name = "OpenAI"')
    comment: list[str] = []
    for line in reversed(lines[:at]):
        if not line.startswith("#"):
            break
        comment.insert(0, line)
    assert comment, "a comment above the name explains it"
    assert "remote" in " ".join(comment).lower() and "compact" in " ".join(comment).lower()
    assert lines[at - len(comment) - 1] == "[model_providers.gw]"


def test_write_codex_setup_passes_both_options_on(tmp_path: Path) -> None:
    result = write_codex_setup(
        tmp_path, URL, [ModelSpec("m", None)], websockets=False, remote_compaction=True
    )

    provider = tomllib.loads(result.config_path.read_text())["model_providers"]["codexgate"]
    assert provider["supports_websockets"] is False
    assert provider["name"] == "OpenAI"


def test_strings_round_trip_through_toml() -> None:
    model = 'we"ird\\name \u00e9\U0001f600\x7f\ttab'
    config = tomllib.loads(render_config("gw", URL, model, "/c.json", "p"))

    assert config["model"] == model


@pytest.mark.parametrize(
    ("provider", "profile"), [("OpenAI", "p"), ("openai", "p"), ("a b", "p"), ("gw", "../x")]
)
@pytest.mark.parametrize("remote_compaction", [False, True])
def test_bad_provider_or_profile_names_are_refused(
    provider: str, profile: str, remote_compaction: bool
) -> None:
    with pytest.raises(CodexSetupError):
        render_config(provider, URL, "m", "/c.json", profile, remote_compaction=remote_compaction)


def test_standalone_setup_makes_out_dir_a_codex_home(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = write_codex_setup(out, URL, [ModelSpec("a", 16_384), ModelSpec("b", None)])

    assert result.codex_home == out.resolve()
    assert result.config_path == out.resolve() / "codexgate.config.toml"
    assert result.command == f"CODEX_HOME={out.resolve()} codex --profile codexgate"
    assert result.env == {"CODEX_HOME": str(out.resolve())}
    assert result.args == ("--profile", "codexgate")
    config = tomllib.loads(result.config_path.read_text())
    assert config["model"] == "a"
    assert Path(config["model_catalog_json"]) == result.catalog_path
    catalog = json.loads(result.catalog_path.read_text())
    assert [m["slug"] for m in catalog["models"]] == ["a", "b"]
    assert not (out / "config.toml").exists()


def deep_merge(base: dict[str, Any], layer: dict[str, Any]) -> dict[str, Any]:
    """How Codex layers `<profile>.config.toml` over `config.toml`."""
    merged = dict(base)
    for key, value in layer.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


USER_CONFIG = """\
model = "gpt-5.5"
approval_policy = "on-request"

[model_providers.work]
name = "Work"
base_url = "https://llm.example.com/v1"

[features]
memories = true

[profiles.other]
model = "o3"
"""


def test_setup_in_an_existing_codex_home_keeps_the_users_config(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(USER_CONFIG)
    result = write_codex_setup(tmp_path / "out", URL, [ModelSpec("qwen", None)], codex_home=home)

    assert (home / "config.toml").read_text() == USER_CONFIG
    assert result.config_path == home.resolve() / "codexgate.config.toml"
    assert result.catalog_path.parent == (tmp_path / "out").resolve()
    effective = deep_merge(tomllib.loads(USER_CONFIG), tomllib.loads(result.config_path.read_text()))
    assert effective["approval_policy"] == "on-request"
    assert effective["model_providers"]["work"]["base_url"] == "https://llm.example.com/v1"
    assert effective["model_providers"]["codexgate"]["base_url"] == URL + "/v1"
    assert effective["features"]["memories"] is True
    assert effective["profiles"]["other"] == {"model": "o3"}
    assert effective["model"] == "qwen"


def test_running_setup_again_replaces_only_its_own_files(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_codex_setup(home, URL, [ModelSpec("a", None)], codex_home=home)
    result = write_codex_setup(home, "http://other:1", [ModelSpec("b", None)], codex_home=home)

    config = tomllib.loads(result.config_path.read_text())
    assert config["model"] == "b"
    assert config["model_providers"]["codexgate"]["base_url"] == "http://other:1/v1"


@pytest.mark.parametrize("user_config", ['profile = "codexgate"\n', '[profiles.codexgate]\nmodel = "x"\n'])
def test_a_legacy_profile_of_the_same_name_is_reported(tmp_path: Path, user_config: str) -> None:
    (tmp_path / "config.toml").write_text(user_config)

    with pytest.raises(CodexSetupError, match="legacy"):
        write_codex_setup(tmp_path, URL, [ModelSpec("m", None)], codex_home=tmp_path)
    assert (tmp_path / "config.toml").read_text() == user_config
    assert not (tmp_path / "codexgate.config.toml").exists()


def test_a_profile_file_written_by_someone_else_is_not_overwritten(tmp_path: Path) -> None:
    theirs = 'model = "mine"\n'
    (tmp_path / "codexgate.config.toml").write_text(theirs)

    with pytest.raises(CodexSetupError):
        write_codex_setup(tmp_path, URL, [ModelSpec("m", None)], codex_home=tmp_path)
    assert (tmp_path / "codexgate.config.toml").read_text() == theirs


def test_default_codex_home_needs_no_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("CODEX_HOME", raising=False)
    result = write_codex_setup(
        tmp_path / "out", URL, [ModelSpec("m", None)], "local", codex_home=tmp_path / ".codex"
    )

    assert result.command == "codex --profile local"
    assert result.env == {}


def test_shared_base_instructions_fill_only_specs_without_their_own(tmp_path: Path) -> None:
    specs = [ModelSpec("a", None), ModelSpec("b", None, base_instructions="Own prompt.")]
    result = write_codex_setup(tmp_path, URL, specs, base_instructions="Shared prompt.")

    models = json.loads(result.catalog_path.read_text())["models"]
    assert [m["base_instructions"] for m in models] == ["Shared prompt.", "Own prompt."]


def fake_codex(tmp_path: Path, models: list[dict[str, Any]], exit_code: int = 0) -> Path:
    """A `codex` stand-in whose `debug models --bundled` prints `models`."""
    payload = tmp_path / "catalog.json"
    payload.write_text(json.dumps({"models": models}))
    script = tmp_path / "codex"
    script.write_text(
        "#!/bin/sh\n"
        '[ "$1 $2 $3" = "debug models --bundled" ] || exit 2\n'
        f'[ -n "$CODEX_HOME" ] || exit 3\ncat "{payload}"\nexit {exit_code}\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_base_instructions_are_read_from_the_codex_binary(tmp_path: Path) -> None:
    codex = fake_codex(
        tmp_path,
        [
            {"slug": "gpt-6", "visibility": "list", "priority": 1, "base_instructions": "six"},
            {"slug": "gpt-5.5", "model_messages": {"instructions_template": "five"}},
        ],
    )

    assert codex_base_instructions(codex) == "five"
    assert codex_base_instructions(codex, slug="gone") == "six"


@pytest.mark.parametrize(
    ("models", "exit_code"), [([{"slug": "gpt-5.5", "base_instructions": ""}], 0), ([], 1)]
)
def test_missing_base_instructions_raise(
    tmp_path: Path, models: list[dict[str, Any]], exit_code: int
) -> None:
    with pytest.raises(CodexSetupError):
        codex_base_instructions(fake_codex(tmp_path, models, exit_code))


def test_a_missing_codex_binary_raises(tmp_path: Path) -> None:
    with pytest.raises(CodexSetupError):
        codex_base_instructions(tmp_path / "nope")


@pytest.mark.parametrize(
    ("flags", "websockets", "name"),
    [((), True, "codexgate"), (("--no-websockets", "--remote-compaction"), False, "OpenAI")],
)
def test_codex_setup_command_flags(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    flags: tuple[str, ...],
    websockets: bool,
    name: str,
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")  # no codex binary: the fallback prompt is used
    argv = ["codex-setup", "--upstream", "http://127.0.0.1:9/v1", "--codex-home", str(tmp_path)]
    code = main([*argv, "--model", "m", "--context-window", "32768", *flags])

    assert code == 0
    out = capsys.readouterr().out
    provider = tomllib.loads((tmp_path / "codexgate.config.toml").read_text())["model_providers"]
    assert provider["codexgate"]["supports_websockets"] is websockets
    assert provider["codexgate"]["name"] == name
    compaction_lines = [line for line in out.splitlines() if "compact" in line]
    if name == "OpenAI":
        assert len(compaction_lines) == 1 and '"OpenAI"' in compaction_lines[0]
        assert "locally" in compaction_lines[0]
    else:
        assert compaction_lines == []


@pytest.mark.parametrize(
    ("config", "environ", "flags", "expected"),
    [
        ("", {}, (), None),  # no keys: Codex sends none
        (
            '[[api_keys]]\nname = "team"\nkey_env = "TEAM_GATEWAY_KEY"\n',
            {"TEAM_GATEWAY_KEY": "k" * 24},
            (),
            "TEAM_GATEWAY_KEY",
        ),
        ("", {"CODEXGATE_API_KEYS": "alice=" + "a" * 24}, (), "CODEXGATE_API_KEY"),
        ("", {"CODEXGATE_API_KEYS": "alice=" + "a" * 24}, ("--env-key", "MY_KEY"), "MY_KEY"),
    ],
)
def test_a_keyed_gateway_gets_codexs_env_key(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    config: str,
    environ: dict[str, str],
    flags: tuple[str, ...],
    expected: str | None,
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("CODEXGATE_API_KEYS", raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    config_file = tmp_path / "gw.toml"
    config_file.write_text(config)
    home = tmp_path / "home"
    argv = ["codex-setup", "--config", str(config_file), "--upstream", "http://127.0.0.1:9/v1"]
    code = main([*argv, "--codex-home", str(home), "--model", "m", "--context-window", "32768", *flags])

    assert code == 0
    out = capsys.readouterr().out
    provider = tomllib.loads((home / "codexgate.config.toml").read_text())["model_providers"]["codexgate"]
    assert provider.get("env_key") == expected
    if expected:
        assert f"set {expected} to your codexgate key" in out
        assert "k" * 24 not in (home / "codexgate.config.toml").read_text()  # the name, never the key
