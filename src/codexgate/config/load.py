"""Loading the settings: `load_settings` builds them once from, in order of precedence,
command-line flags, `CODEXGATE_*` environment variables, a TOML file and defaults, and says
what is wrong in words a person can act on. Nothing is read at import time.

TOML layout (all keys optional)::

    idle_timeout = 300
    [[upstreams]]
    name = "ollama"
    base_url = "http://127.0.0.1:11434/v1"
    api_key_env = "OLLAMA_API_KEY"
    headers = { "X-Team" = "core" }
    [[models]]
    name = "qwen-coder"            # what the client asks for
    upstream = "ollama"
    model = "qwen3-coder:30b"      # the upstream's id (default: name)
    aliases = ["qc"]
    context_window = 65536
"""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, model_validator
from pydantic.fields import FieldInfo

from codexgate.config.checks import ConfigError, SettingError, unknown_setting
from codexgate.config.settings import (
    LIST_SETTINGS,
    TABLE_SETTINGS,
    ApiKeyConfig,
    ModelConfig,
    Settings,
    check_key_models,
)
from codexgate.config.upstreams import UPSTREAM_FIELDS, tag_free

ENV_PREFIX = "CODEXGATE_"
# The inbound API keys given in the environment, `name=key` entries (server/auth.py).
API_KEYS_ENV = ENV_PREFIX + "API_KEYS"

_SCALAR_FIELDS = {name for name in Settings.model_fields if name not in TABLE_SETTINGS}


def _from_env(environ: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name in _SCALAR_FIELDS:
        raw = environ.get(ENV_PREFIX + name.upper())
        if raw is not None and raw != "":
            if name in LIST_SETTINGS:
                values[name] = [item.strip() for item in raw.split(",") if item.strip()]
            else:
                values[name] = raw  # pydantic converts "300" and "false"
    return values


def load_settings(
    cli: Mapping[str, Any] | None = None,
    config_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Build the settings. `cli` holds only the flags the user gave (None values are ignored).
    Raises ConfigError with a readable message: where the bad value came from (flag,
    environment variable or file) and, for an unknown key, the nearest known one."""
    environ = os.environ if environ is None else environ
    config_file = resolve_config_file(config_file, environ)
    merged: dict[str, Any] = {}
    sources: dict[str, str] = {}
    if config_file is not None:
        merged.update(_read_toml(config_file))
        sources.update((key, f"in {config_file}") for key in merged)
    from_env = _from_env(environ)
    merged.update(from_env)
    sources.update((key, f"from {ENV_PREFIX}{key.upper()}") for key in from_env)
    flags = {k: v for k, v in (cli or {}).items() if v is not None}
    merged.update(flags)
    sources.update((key, f"from --{key.replace('_', '-')}") for key in flags)
    try:
        return Settings.model_validate(merged)
    except ValidationError as exc:
        raise settings_error(exc, sources, merged) from None


def _read_toml(config_file: Path) -> dict[str, Any]:
    """Raises ConfigError for a file that is missing or is not TOML."""
    try:
        return tomllib.loads(config_file.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {config_file}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {config_file} is not valid TOML: {exc}") from None


def settings_error(exc: ValidationError, sources: Mapping[str, str], data: Mapping[str, Any]) -> ConfigError:
    """The settings' validation errors as one line (the words of a start and of a reload
    alike): each problem by its setting's path, its value, where it came from (`sources`, by
    top-level key) and what is wrong. A required key reported missing beside an unknown key
    that is its misspelling is said once, as the misspelling."""
    errors = exc.errors()
    misspelt = set()
    for error in errors:
        close = _suggestion(error)
        if close is not None:
            misspelt.add((*tag_free(error["loc"])[:-1], close))
    problems = [
        _describe(e, sources, data)
        for e in errors
        if not (e["type"] == "missing" and tag_free(e["loc"]) in misspelt)
    ]
    return ConfigError(f"invalid settings: {'; '.join(problems)}")


_TABLE_FIELDS: Mapping[str, Mapping[str, FieldInfo]] = {
    "upstreams": UPSTREAM_FIELDS,  # the settings of every kind: a misspelt one is found in any
    "models": ModelConfig.model_fields,
    "api_keys": ApiKeyConfig.model_fields,
}


def _describe(error: Any, sources: Mapping[str, str], data: Mapping[str, Any]) -> str:
    """One validation error as a line a person can act on: the setting's path (an entry of a
    table by its index, `upstreams[0].idle_timeout`, and by its name), the value, where it
    came from (flag, environment variable or file) and what is wrong."""
    loc = list(tag_free(error["loc"]))
    cause = (error.get("ctx") or {}).get("error")
    shown = ""
    if isinstance(cause, SettingError):  # a check across settings: it says where it failed
        loc += cause.loc
        message = str(cause)
        if isinstance(cause.value, (str, int, float)):
            shown = f" = {cause.value!r}"
    else:
        message = str(error["msg"]).removeprefix("Value error, ").replace("Input should be", "must be")
        value = error.get("input")
        if isinstance(value, (str, int, float)) and loc:
            shown = f" = {value!r}"
    if error["type"] == "extra_forbidden":
        message = unknown_setting(_suggestion(error))
        if len(loc) > 1 and loc[-1] in Settings.model_fields:
            message = f"not a setting of {loc[0]}: {loc[-1]} is set at the top level of the file, for all"
    if not loc:
        return message
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    context = [c for c in (_entry_name(loc, data, message), sources.get(str(loc[0]))) if c]
    return f"{where}{shown} ({', '.join(context)}): {message}" if context else f"{where}{shown}: {message}"


def _suggestion(error: Any) -> str | None:
    """For an unknown key, the known setting of its table it is nearest to, if one is near."""
    if error["type"] != "extra_forbidden":
        return None
    loc = tag_free(error["loc"])
    known = (_TABLE_FIELDS.get(str(loc[0]), {}) if len(loc) > 1 else {}) or Settings.model_fields
    close = difflib.get_close_matches(str(loc[-1]), list(known), n=1, cutoff=0.6)
    return close[0] if close else None


def _entry_name(loc: list[Any], data: Mapping[str, Any], message: str) -> str | None:
    """The entry an error is inside, by name (`upstream 'local'` for `upstreams[0]`) so that it
    can be found by name as well as by index; None when the message names it already."""
    if len(loc) < 2 or loc[0] not in _TABLE_FIELDS or not isinstance(loc[1], int):
        return None
    entries = data.get(loc[0])
    entry = entries[loc[1]] if isinstance(entries, list) and loc[1] < len(entries) else None
    name = entry.get("name") if isinstance(entry, dict) else None
    if not isinstance(name, str) or repr(name) in message:
        return None
    return f"{loc[0].removesuffix('s').replace('_', ' ')} {name!r}"


def resolve_config_file(config_file: Path | None, environ: Mapping[str, str]) -> Path | None:
    """The config file given by flag, else by CODEXGATE_CONFIG, else None."""
    if config_file is None and environ.get(ENV_PREFIX + "CONFIG"):
        return Path(environ[ENV_PREFIX + "CONFIG"])
    return config_file


class _KeyTables(BaseModel):
    """The `[[api_keys]]` of a config file read alone, at a reload: the rest of the file is
    not read (it applies at start only), so only these are checked, by the rules of a start."""

    model_config = ConfigDict(extra="ignore")

    api_keys: list[ApiKeyConfig] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check_key_models(self, info: ValidationInfo) -> _KeyTables:
        settings = (info.context or {}).get("settings")
        if isinstance(settings, Settings):  # the routes are those being served
            check_key_models(self.api_keys, settings.models, settings.all_upstreams())
        return self


def read_api_key_configs(config_file: Path, settings: Settings | None = None) -> list[ApiKeyConfig]:
    """Only the `[[api_keys]]` of a config file, for a reload while serving `settings` (the
    rest of the file is not re-read): checked as at start, a key's `models` against the routes
    of `settings` when given, and refused in the same words. Raises ConfigError."""
    data = _read_toml(config_file)
    try:
        return _KeyTables.model_validate(data, context={"settings": settings}).api_keys
    except ValidationError as exc:
        raise settings_error(exc, {"api_keys": f"in {config_file}"}, data) from None
