"""The flags of `serve`: one per top-level setting, generated from the `Settings` fields, so that
a new setting is a flag (and its `CODEXGATE_*` variable) without anyone remembering to add one.
This module holds only what a field cannot say about itself: the help line, the placeholder
and the group it is listed under. The tables (`[[upstreams]]`, `[[models]]`, `[[api_keys]]`)
are the config file's alone.
"""

from __future__ import annotations

import argparse
import types
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from codexgate.config.load import ENV_PREFIX
from codexgate.config.settings import LIST_SETTINGS, TABLE_SETTINGS, Settings

# (group title, [(setting, help, placeholder)]); a switch has no placeholder.
_GROUPS: list[tuple[str, list[tuple[str, str, str]]]] = [
    ("the gateway", [
        ("host", "address to listen on", "ADDRESS"),
        ("port", "port to listen on (0: any free port, logged at start)", "PORT"),
        ("workers", "gateway processes sharing the port; 0: one per core", "N"),
        ("log_level", "debug, info, warning, error or critical", "LEVEL"),
        ("log_format", "logfmt, or json: one object per line", "FORMAT"),
        ("shutdown_grace", "on SIGTERM, seconds open responses may take to finish before they end with "
         "server_shutting_down", "SECONDS"),
    ]),
    ("the upstream (more of them, and model routes: the --config file)", [
        ("upstream", "base URL of one Chat Completions server, e.g. http://127.0.0.1:11434/v1 "
         "(default: look for a local one)", "URL"),
        ("upstream_api_key_env", "environment variable holding the upstream's API key", "VAR"),
        ("discover", "with no upstream given, look for a local model server (Ollama, LM Studio, "
         "llama.cpp, vLLM, SGLang on their usual ports)", ""),
        ("embedded", "with no upstream given and none found, run the embedded model (SmolLM2-135M)", ""),
        ("llama_dir", "where the embedded model's runtime is fetched, once per user "
         "(default $XDG_CACHE_HOME/codexgate/llama)", "DIR"),
        ("llama_server", "a llama-server binary of one's own for the embedded model", "FILE"),
    ]),
    ("time and size budgets", [
        ("idle_timeout", "seconds the upstream may stay silent, before its first byte (retries "
         "included) and between events", "SECONDS"),
        ("connect_timeout", "seconds to connect to an upstream", "SECONDS"),
        ("max_retries", "retries of connection errors and 5xx before the first byte", "N"),
        ("retry_backoff", "retry n waits this x 2^(n-1) seconds (+-10%%); the first retry after a "
         "connection error is immediate; a Retry-After wins", "SECONDS"),
        ("max_retry_wait", "a retry that would wait longer (backoff or Retry-After) is not made: the "
         "error is answered", "SECONDS"),
        ("max_body_bytes", "largest request body accepted (413 above)", "BYTES"),
        ("max_output_bytes", "model output per response before it ends incomplete (max_output_tokens)",
         "BYTES"),
        ("max_request_seconds", "total seconds one response may take", "SECONDS"),
        ("history_cache_mb", "memory for conversations' last requests, reused next turn: the face's, "
         "and as much for each upstream's translations (0: off)",
         "MIB"),
        ("history_cache_min_kb", "remember only conversations whose request is at least this large", "KIB"),
    ]),
    ("who may connect (docs/threat-model.md)", [
        ("allow_unauthenticated", "serve clients beyond loopback without API keys (they can spend the "
         "upstream)", ""),
        ("allowed_hosts", "Host names accepted besides IPs and localhost, comma-separated (*: any)",
         "HOSTS"),
        ("cors_origins", "browser origins allowed to call the gateway, comma-separated", "ORIGINS"),
    ]),
    ("what keys may spend ([[api_keys]] in the --config file; docs/configuration.md)", [
        ("usage_max_age_days", "days of per-key usage kept (GET /v1/usage, codexgate usage)", "DAYS"),
        ("rate_window_seconds", "the window of requests_per_minute and tokens_per_minute; 60 but in "
         "tests", "SECONDS"),
    ]),
    ("connection limits", [
        ("header_timeout", "seconds to receive a request's head (408 after)", "SECONDS"),
        ("body_timeout", "seconds to receive a request's body (408 after)", "SECONDS"),
        ("keep_alive_timeout", "seconds an idle keep-alive connection stays open", "SECONDS"),
        ("max_connections", "open connections; past it the longest-idle one is closed", "N"),
        ("max_idle_connections", "idle keep-alive connections kept", "N"),
        ("max_header_bytes", "largest request head (431 above)", "BYTES"),
    ]),
    ("stored responses and WebSocket mode (docs/state.md)", [
        ("store", "sqlite, redis, postgres or none", "KIND"),
        ("store_path", "the SQLite file (default $XDG_DATA_HOME/codexgate/store.sqlite3)", "FILE"),
        ("store_url", "redis://... or postgresql://... (with a password, prefer the variable)", "URL"),
        ("store_max_age_days", "stored responses older than this are removed", "DAYS"),
        ("store_max_mb", "past this in total, only the newest stored responses are kept", "MIB"),
        ("websocket_max_connections", "WebSocket connections at once on /v1/responses (0: none)", "N"),
        ("websocket_max_lifetime", "seconds a WebSocket connection lives; then it is told to reconnect",
         "SECONDS"),
        ("websocket_max_memory_mb", "what a WebSocket connection remembers of its last response", "MIB"),
    ]),
    ("metrics, traces, transcripts (docs/operations.md)", [
        ("metrics", "Prometheus text on GET /metrics", ""),
        ("ui", "the live view at /ui", ""),
        ("otlp_endpoint", "send OpenTelemetry traces to this OTLP/HTTP collector, e.g. "
         "http://127.0.0.1:4318 (default: none)", "URL"),
        ("otel_service_name", "service.name of the spans", "NAME"),
        ("record_dir", "record each turn into this directory, secrets masked (off by default)", "DIR"),
        ("record_max_age_days", "recordings older than this are removed", "DAYS"),
        ("record_max_mb", "past this in total, the oldest recordings are removed", "MIB"),
    ]),
]  # fmt: skip

HELP = {name: (text, placeholder) for _, entries in _GROUPS for name, text, placeholder in entries}

# What `codex-setup` reads of the settings: where the gateway is and what it serves.
SETUP_SETTINGS = ("host", "port", "upstream", "upstream_api_key_env", "discover", "embedded")


def scalar_settings() -> list[str]:
    """Every top-level setting a flag can carry: all but the tables."""
    return [name for name in Settings.model_fields if name not in TABLE_SETTINGS]


def add_config_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help=f"TOML file with upstreams and model routes, and any setting below (env {ENV_PREFIX}CONFIG)",
    )


def add_setting_flags(parser: argparse.ArgumentParser, only: Iterable[str] | None = None) -> None:
    """A flag per setting (all of them, or `only` these), listed under its group's title."""
    wanted = set(scalar_settings() if only is None else only)
    for title, entries in _GROUPS:
        names = [name for name, _, _ in entries if name in wanted]
        if names:
            group = parser.add_argument_group(title)
            for name in names:
                add_setting_flag(group, name)
            wanted -= set(names)
    for name in sorted(wanted):  # a setting with no help line yet still gets its flag
        add_setting_flag(parser, name)


def add_setting_flag(parser: argparse._ActionsContainer, name: str) -> None:
    """The flag of the setting `name`: its type from the field (a switch is --x and --no-x, a
    list comma-separated), its help ending with the default and the environment variable that
    sets it too. The argparse default is None so that only flags the user typed override the
    environment and the file."""
    field = Settings.model_fields[name]
    text, placeholder = HELP.get(name, (name.replace("_", " "), ""))
    env = ENV_PREFIX + name.upper()
    default = field.get_default(call_default_factory=True)
    kind = _base_type(field.annotation)
    kwargs: dict[str, Any] = {"dest": name, "default": None}
    if kind is bool:
        kwargs["action"] = argparse.BooleanOptionalAction
        shown = str(default).lower()
    elif name in LIST_SETTINGS:
        kwargs.update(type=_comma_list, metavar=placeholder or "A,B")
        shown = ",".join(default) or "none"
    else:
        kwargs.update(type=kind if kind in (int, float) else str, metavar=placeholder or "VALUE")
        shown = "" if default is None else f"{default:g}" if isinstance(default, float) else str(default)
    suffix = f"default {shown}; env {env}" if shown else f"env {env}"
    parser.add_argument("--" + name.replace("_", "-"), help=f"{text} ({suffix})", **kwargs)


def _base_type(annotation: Any) -> Any:
    """int, float, bool or str for a field's annotation (`int | None` is int, a Literal of
    strings is str)."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        kinds = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _base_type(kinds[0]) if len(kinds) == 1 else str
    if typing.get_origin(annotation) is typing.Literal:
        return str
    return annotation if annotation in (int, float, bool) else str


def _comma_list(raw: str) -> list[str]:
    return [item.strip() for item in raw.split(",") if item.strip()]
