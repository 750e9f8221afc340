"""The flags of `serve` and `codex-setup`: one per top-level setting, generated from the
settings, each reaching the setting of its name."""

from __future__ import annotations

import argparse

import pytest

from codexgate.cli import _settings_from, build_parser
from codexgate.config import TABLE_SETTINGS, Settings
from codexgate.config.flags import HELP, SETUP_SETTINGS, scalar_settings


def _subcommand(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return commands.choices[name]  # type: ignore[no-any-return]


def _flags(name: str) -> set[str]:
    return {option for action in _subcommand(name)._actions for option in action.option_strings}


def test_every_top_level_setting_is_a_serve_flag_with_help() -> None:
    flags = _flags("serve")
    missing = [
        n
        for n in Settings.model_fields
        if n not in TABLE_SETTINGS and "--" + n.replace("_", "-") not in flags
    ]
    assert not missing
    assert set(scalar_settings()) == set(HELP), "a setting without a help line, or help for no setting"


@pytest.mark.parametrize(
    "argv,expected",
    [
        (["--store", "none"], {"store": "none"}),
        (["--retry-backoff", "0.25", "--max-retries", "4"], {"retry_backoff": 0.25, "max_retries": 4}),
        (["--no-metrics", "--ui"], {"metrics": False, "ui": True}),
        (["--allow-unauthenticated"], {"allow_unauthenticated": True}),
        (["--allowed-hosts", "gw.example, gw2.example"], {"allowed_hosts": ["gw.example", "gw2.example"]}),
        (["--no-discover", "--no-embedded"], {"discover": False, "embedded": False}),
    ],
)
def test_a_flag_reaches_its_setting(
    argv: list[str], expected: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in expected:
        monkeypatch.delenv("CODEXGATE_" + name.upper(), raising=False)
    monkeypatch.delenv("CODEXGATE_CONFIG", raising=False)
    settings = _settings_from(build_parser().parse_args(["serve", *argv]))
    assert {name: getattr(settings, name) for name in expected} == expected


def test_flags_not_given_leave_the_environment_and_file_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODEXGATE_METRICS", "false")
    monkeypatch.delenv("CODEXGATE_CONFIG", raising=False)
    settings = _settings_from(build_parser().parse_args(["serve"]))
    assert settings.metrics is False


def test_codex_setup_takes_only_the_settings_it_reads() -> None:
    flags = _flags("codex-setup")
    for name in scalar_settings():
        flag = "--" + name.replace("_", "-")
        assert (flag in flags) == (name in SETUP_SETTINGS), flag
    assert {"--config", "--gateway-url", "--model", "--codex-home"} <= flags


def test_serve_help_names_its_routes() -> None:
    description = _subcommand("serve").description or ""
    for route in ("/v1/responses", "/v1/chat/completions", "/v1/models"):
        assert route in description
