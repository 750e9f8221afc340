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

from pydantic import ValidationError
from pydantic.fields import FieldInfo

from codexgate.config.checks import ConfigError, SettingError
from codexgate.config.settings import LIST_SETTINGS, TABLE_SETTINGS, ApiKeyConfig, ModelConfig, Settings
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
        try:
            merged.update(tomllib.loads(config_file.read_text()))
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {config_file}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {config_file} is not valid TOML: {exc}") from None
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
        problems = "; ".join(_describe(e, sources, merged) for e in exc.errors())
        raise ConfigError(f"invalid settings: {problems}") from None


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
        known = _TABLE_FIELDS.get(str(loc[0]), {}) if len(loc) > 1 else {}
        known = known or Settings.model_fields
        close = difflib.get_close_matches(str(loc[-1]), list(known), n=1, cutoff=0.6)
        message = "unknown setting" + (f"; did you mean {close[0]!r}?" if close else "")
        if len(loc) > 1 and loc[-1] in Settings.model_fields:
            message = f"not a setting of {loc[0]}: {loc[-1]} is set at the top level of the file, for all"
    if not loc:
        return message
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    context = [c for c in (_entry_name(loc, data, message), sources.get(str(loc[0]))) if c]
    return f"{where}{shown} ({', '.join(context)}): {message}" if context else f"{where}{shown}: {message}"


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


def read_api_key_configs(config_file: Path) -> list[ApiKeyConfig]:
    """Only the `[[api_keys]]` of a config file, for a reload while serving (the rest of the
    file is not re-read). Raises ConfigError."""
    try:
        data = tomllib.loads(config_file.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {config_file}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {config_file} is not valid TOML: {exc}") from None
    entries = data.get("api_keys", [])
    try:
        if not isinstance(entries, list):
            raise ValueError("api_keys must be an array of tables ([[api_keys]])")
        return [ApiKeyConfig.model_validate(entry) for entry in entries]
    except (ValidationError, ValueError) as exc:
        raise ConfigError(f"invalid api_keys in {config_file}: {exc}") from None
