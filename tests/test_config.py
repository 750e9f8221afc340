"""Settings precedence: flags > CODEXGATE_* environment > TOML file > defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from codexgate.config import ConfigError, load_settings


def test_defaults() -> None:
    settings = load_settings({}, environ={})
    assert (settings.host, settings.port, settings.idle_timeout) == ("127.0.0.1", 8787, 300.0)
    assert settings.all_upstreams() == []


def test_flags_beat_environment_beat_file(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("idle_timeout = 10\nport = 9000\nmax_retries = 5\n")
    env = {"CODEXGATE_IDLE_TIMEOUT": "20", "CODEXGATE_PORT": "9100"}
    settings = load_settings({"idle_timeout": 30.0, "port": None}, config, environ=env)
    assert settings.idle_timeout == 30.0  # flag
    assert settings.port == 9100  # environment (the flag was not given)
    assert settings.max_retries == 5  # file


def test_config_file_from_environment_and_single_upstream_flag(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('[[upstreams]]\nname = "b"\nbase_url = "http://b/v1"\n')
    settings = load_settings(
        {"upstream": "http://a/v1", "upstream_api_key_env": "A_KEY"},
        environ={"CODEXGATE_CONFIG": str(config)},
    )
    upstreams = settings.all_upstreams()
    assert [(u.name, u.base_url, u.api_key_env) for u in upstreams] == [
        ("default", "http://a/v1", "A_KEY"),
        ("b", "http://b/v1", None),
    ]


def test_boolean_environment_values() -> None:
    assert load_settings({}, environ={"CODEXGATE_DISCOVER": "false"}).discover is False


@pytest.mark.parametrize(
    "toml,fragment",
    [
        ('idle_timeout = "soon"', "idle_timeout"),
        ("unknown_key = 1", "unknown_key"),
        ('[[upstreams]]\nname = "a"\n', "base_url"),
        ('[[upstreams]]\nname = "a"\nbase_url = "x"\n[[upstreams]]\nname = "a"\nbase_url = "y"\n', "unique"),
        (
            '[[upstreams]]\nname = "a"\nbase_url = "x"\n[[models]]\nname = "m"\nupstream = "zz"\n',
            "unknown upstream",
        ),
        ('[[upstreams]]\nname = "a"\nbase_url = "x"\ndeveloper_role = "boss"\n', "developer_role"),
        ("port = [", "not valid TOML"),
    ],
)
def test_bad_settings_say_what_to_fix(tmp_path: Path, toml: str, fragment: str) -> None:
    config = tmp_path / "c.toml"
    config.write_text(toml)
    with pytest.raises(ConfigError) as info:
        load_settings({}, config, environ={})
    assert fragment in str(info.value)


def test_missing_config_file() -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_settings({}, Path("/nonexistent/codexgate.toml"), environ={})


def test_api_key_comes_from_the_named_environment_variable() -> None:
    from codexgate.app import upstream_target

    settings = load_settings({"upstream": "http://a/v1", "upstream_api_key_env": "MY_KEY"}, environ={})
    target = upstream_target(settings.all_upstreams()[0], settings, {"MY_KEY": "sk-123"})
    assert target.headers["authorization"] == "Bearer sk-123"
