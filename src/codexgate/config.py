"""Settings: one typed object built once from, in order of precedence, command-line flags,
`CODEXGATE_*` environment variables, a TOML file and defaults. Nothing is read at import time.

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

import dataclasses
import difflib
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from codexgate.translate.dialect import ChatDialect, DeveloperRole, ReasoningReplay, ThinkMode
from codexgate.translate.open_models.textcalls import MODES as TEXT_TOOL_CALL_MODES

ENV_PREFIX = "CODEXGATE_"
SINGLE_UPSTREAM_NAME = "default"


class ConfigError(Exception):
    """The settings cannot be built; the message says what to fix."""


class SettingError(ValueError):
    """A check across settings that failed at `loc` (e.g. ("models", 0) or ("base_url",),
    relative to the table that checks), so the message can name the entry and its source."""

    def __init__(self, loc: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.loc = loc


# Bounds shared by many settings: a value outside them is certainly a mistake (a timeout of
# more than a day, a budget of a terabyte), not a wish.
DAY = 86_400.0
_GIB = 1024**3
_MAX_WINDOW = 100_000_000  # tokens; the largest context windows offered are ~10M


def _check_text_tool_calls(mode: str) -> None:
    if mode not in TEXT_TOOL_CALL_MODES:
        modes = ", ".join(TEXT_TOOL_CALL_MODES)
        raise SettingError(("text_tool_calls",), f"text_tool_calls must be one of {modes}, not {mode!r}")


# Paths that end an endpoint rather than an API base: the gateway appends /chat/completions
# (and /models) to the base URL itself.
_ENDPOINT_SUFFIXES = ("/chat/completions", "/completions", "/responses", "/models", "/api/chat",
                      "/api/generate", "/embeddings")  # fmt: skip


_HOST = re.compile(r"^[A-Za-z0-9._:\-\[\]%]+$")


def check_upstream_url(url: str) -> str:
    """The base URL of a Chat Completions API, such as http://127.0.0.1:11434/v1. Raises
    ValueError with the fix when it is not one."""
    text = url.strip()
    parts = urlsplit(text)
    if "://" not in text:
        guess = f"http://{text.lstrip('/')}"
        if _HOST.match(urlsplit(guess).hostname or ""):
            if not urlsplit(guess).path.strip("/"):
                guess = guess.rstrip("/") + "/v1"
            raise ValueError(f"upstream URL {url!r} has no scheme; did you mean {guess}?")
        raise ValueError(f"upstream URL {url!r} is not a URL; give one like http://127.0.0.1:11434/v1")
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"upstream URL {url!r} must use http:// or https://, not {parts.scheme}://")
    try:
        parts.port  # noqa: B018 - raises for a port that is not a number or out of range
    except ValueError as exc:
        raise ValueError(f"upstream URL {url!r} has a bad port: {exc}") from None
    if not parts.hostname or not _HOST.match(parts.hostname):
        raise ValueError(f"upstream URL {url!r} has no host, e.g. http://127.0.0.1:11434/v1")
    path = parts.path.rstrip("/")
    for suffix in _ENDPOINT_SUFFIXES:
        if path.endswith(suffix):
            base = text[: text.index(parts.netloc) + len(parts.netloc)] + path[: -len(suffix)]
            raise ValueError(
                f"upstream URL {url!r} names an endpoint; give the API base the gateway appends "
                f"{suffix} to: {base}"
            )
    if parts.query or parts.fragment:
        raise ValueError(f"upstream URL {url!r} must not carry a query or fragment")
    return text


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# How the gateway talks to an upstream; a backend module per kind (app.py's table):
# chat: a Chat Completions server; responses: a Responses server; codex: the Codex agent,
# driven through `codex app-server`; embedded: a small model the gateway runs itself
# (llama.cpp's llama-server, built once per user; backends/embedded.py).
UpstreamKind = Literal["chat", "responses", "codex", "embedded"]
SandboxMode = Literal["read-only", "workspace-write", "danger-full-access"]
# What Codex may ask before it acts (its own approval policy names), and what the gateway,
# which has no person to ask, answers when it does.
ApprovalPolicy = Literal["never", "on-request", "untrusted"]
ApprovalAnswer = Literal["decline", "accept"]

# The settings that make up an upstream's (and a route's) ChatDialect: the dialect is built from
# the config by these names (`UpstreamConfig.dialect`), so a new one is declared in ChatDialect
# and here in the config, and nowhere in between.
DIALECT_FIELDS = frozenset(f.name for f in dataclasses.fields(ChatDialect))


# Settings that only some kinds of upstream read; set on another kind they would do nothing,
# so they are refused there (a misplaced setting is a mistake, not a wish).
_KIND_FIELDS: dict[str, frozenset[str]] = {
    "base_url": frozenset(("chat", "responses")),
    "api_key_env": frozenset(("chat", "responses")),
    "headers": frozenset(("chat", "responses")),
    "connect_timeout": frozenset(("chat", "responses")),
    "max_retries": frozenset(("chat", "responses")),
    "extra_body": frozenset(("chat", "responses", "embedded")),
    "developer_role": frozenset(("chat",)),
    "reasoning_replay": frozenset(("chat",)),
    "send_reasoning_effort": frozenset(("chat",)),
    "max_tokens_field": frozenset(("chat",)),
    "include_usage": frozenset(("chat",)),
    "learn_context_window": frozenset(("chat",)),
    "default_sampling": frozenset(("chat", "embedded")),
    "tool_format": frozenset(("responses",)),
    "codex_bin": frozenset(("codex",)),
    "codex_home": frozenset(("codex",)),
    "workdir": frozenset(("codex",)),
    "sandbox": frozenset(("codex",)),
    "approval": frozenset(("codex",)),
    "approval_answer": frozenset(("codex",)),
    "tool_result_timeout": frozenset(("codex",)),
    "max_threads": frozenset(("codex",)),
    "model_path": frozenset(("embedded",)),
    "context_window": frozenset(("embedded",)),
    "threads": frozenset(("embedded",)),
}


class UpstreamConfig(_Strict):
    name: str
    kind: UpstreamKind = "chat"
    base_url: str | None = None  # chat and responses: the API base (required)
    api_key_env: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    connect_timeout: float | None = Field(default=None, gt=0, le=3600)  # None: the global value
    idle_timeout: float | None = Field(default=None, gt=0, le=DAY)
    max_retries: int | None = Field(default=None, ge=0, le=100)
    max_output_bytes: int | None = Field(default=None, gt=0, le=_GIB)  # None: the global values
    max_request_seconds: float | None = Field(default=None, gt=0, le=DAY)
    developer_role: DeveloperRole = "merge"
    reasoning_replay: ReasoningReplay = "reasoning_content"
    send_reasoning_effort: bool = False
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    include_usage: bool = True
    text_tool_calls: str = "auto"  # auto | off | hermes | qwen3_coder | mistral | llama | deepseek | json
    think_tags: ThinkMode = "auto"  # auto | start_inside | off
    extra_body: dict[str, Any] = Field(default_factory=dict)
    models: list[str] = Field(default_factory=list)  # listed by /v1/models when not routed
    # Ask the server for each model's context window (llama.cpp /props, Ollama /api/show, ...)
    # so requests that cannot fit are refused instead of silently truncated.
    learn_context_window: bool = True
    # A request with no temperature/top_p (Codex sends none) gets the model family's published
    # values ("auto"), or the server's defaults ("off").
    default_sampling: Literal["auto", "off"] = "auto"
    # Stop a model that repeats the same text over and over instead of letting it fill the
    # context window; the response fails with `model_output_loop`, which Codex retries.
    loop_guard: bool = True
    # responses: how the request's tools are offered. "functions": every tool as a function
    # (namespaces flattened, custom tools with one `input` string), hosted tools left out, as
    # any Responses server takes them; "native": as the client sent them (OpenAI, codexgate).
    tool_format: Literal["functions", "native"] = "functions"
    # codex: the Codex agent as the model (docs/backends.md).
    codex_bin: str = "codex"  # the Codex CLI; a name on PATH or a path
    codex_home: str | None = None  # its CODEX_HOME (config, catalog, sign-in); None: the user's own
    workdir: str | None = None  # where its threads run commands and edit files; None: the cwd
    sandbox: SandboxMode = "read-only"
    approval: ApprovalPolicy = "never"
    approval_answer: ApprovalAnswer = "decline"
    # Seconds a Codex turn waits for the client to return a tool call's result; then the call
    # fails (the model is told) and a late result is refused.
    tool_result_timeout: float = Field(default=300.0, gt=0, le=DAY)
    max_threads: int = Field(default=64, gt=0, le=100_000)  # conversations kept as Codex threads (LRU)
    # embedded: a GGUF of one's own (default: SmolLM2-135M), the context it runs with (default
    # 8192), llama-server's threads (default: every core).
    model_path: str | None = None
    context_window: int | None = Field(default=None, gt=0, le=_MAX_WINDOW)
    threads: int | None = Field(default=None, gt=0, le=1024)

    @model_validator(mode="after")
    def _check_modes(self) -> UpstreamConfig:
        _check_text_tool_calls(self.text_tool_calls)
        for name in sorted(self.model_fields_set & _KIND_FIELDS.keys()):
            kinds = _KIND_FIELDS[name]
            if self.kind not in kinds and getattr(self, name) is not None:
                allowed = " or ".join(sorted(kinds))
                message = f"{name} applies to upstreams of kind {allowed}, not {self.kind!r}"
                raise SettingError((name,), message)
        if self.kind in ("chat", "responses") and not self.base_url:
            raise SettingError(("base_url",), f"an upstream of kind {self.kind!r} needs a base_url")
        return self

    def dialect(self) -> ChatDialect:
        """This upstream's dialect, from its settings of the same names."""
        return ChatDialect(**self.model_dump(include=set(DIALECT_FIELDS)))

    @field_validator("base_url")
    @classmethod
    def _check_base_url(cls, value: str | None) -> str | None:
        return check_upstream_url(value) if value is not None else None


class ModelConfig(_Strict):
    name: str
    upstream: str | None = None  # None: the only upstream
    model: str | None = None
    aliases: list[str] = Field(default_factory=list)
    context_window: int | None = Field(default=None, gt=0, le=_MAX_WINDOW)
    supports_images: bool = False
    supports_reasoning: bool = False
    extra_body: dict[str, Any] = Field(default_factory=dict)  # e.g. default sampling
    text_tool_calls: str | None = None  # None: the upstream's setting
    think_tags: ThinkMode | None = None
    default_sampling: Literal["auto", "off"] | None = None

    @model_validator(mode="after")
    def _check_modes(self) -> ModelConfig:
        if self.text_tool_calls is not None:
            _check_text_tool_calls(self.text_tool_calls)
        return self

    def dialect_for(self, upstream: ChatDialect) -> ChatDialect:
        """The upstream's dialect with this model's settings layered on: a model setting left
        unset (None) keeps the upstream's, `extra_body` merges (the model's keys win)."""
        overrides = {
            name: value
            for name, value in self.model_dump(include=set(DIALECT_FIELDS)).items()
            if value is not None
        }
        overrides["extra_body"] = {**upstream.extra_body, **self.extra_body}
        overrides["context_window"] = self.context_window
        return dataclasses.replace(upstream, **overrides)


LogLevel = Literal["debug", "info", "warning", "error", "critical"]


class ApiKeyConfig(_Strict):
    """An inbound API key: the secret is read from `key_env`, never from the file."""

    name: str
    key_env: str


class Settings(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(default=8787, ge=0, le=65535)  # 0: any free port (the log says which)
    upstream: str | None = None  # one upstream given by flag or env: becomes "default"
    upstream_api_key_env: str | None = None
    idle_timeout: float = Field(default=300.0, gt=0, le=DAY)
    connect_timeout: float = Field(default=10.0, gt=0, le=3600)
    # Retries before the upstream's first byte (backends/http/stream.py): retry n waits
    # retry_backoff * 2**(n-1) (+-10%), except that the first retry after a connection error
    # is immediate, and a Retry-After the upstream sends wins; a wait over max_retry_wait, or
    # past the idle_timeout budget, is not waited: the error is answered.
    max_retries: int = Field(default=2, ge=0, le=100)
    retry_backoff: float = Field(default=0.5, ge=0, le=3600)
    max_retry_wait: float = Field(default=30.0, ge=0, le=DAY)
    max_body_bytes: int = Field(default=64 * 1024 * 1024, ge=1024, le=_GIB)
    # Bounds on one response, far above any real Codex turn (a turn's answer is kilobytes to
    # a few hundred kilobytes; long turns take minutes): output past the first ends the
    # response `incomplete` (max_output_tokens), a response outlasting the second fails
    # with upstream_timeout.
    max_output_bytes: int = Field(default=8 * 1024 * 1024, gt=0, le=_GIB)
    max_request_seconds: float = Field(default=3600.0, gt=0, le=DAY)
    # What is remembered of each conversation between turns, so that the history Codex
    # re-sends every turn is validated and translated once (translate/history_memo.py): at most this many MiB
    # of request bodies for the Responses face and as many per upstream; 0 turns it off.
    # Only conversations whose request is at least history_cache_min_kb are remembered: a
    # shorter one is read again in well under a millisecond, and remembering it costs about
    # 2.5 times its size (bench/under_load.py: 500 sessions of 50 KB would keep ~30 MB for
    # ~0.3 ms a turn, and none of it is used when more sessions than entries take turns).
    history_cache_mb: int = Field(default=64, ge=0, le=1024 * 1024)
    history_cache_min_kb: int = Field(default=128, ge=0, le=1024 * 1024)
    # Stored responses (previous_response_id, item_reference, GET /v1/responses/{id}, compaction
    # keys; docs/state.md): SQLite by default at store_path (default
    # $XDG_DATA_HOME/codexgate/store.sqlite3), Redis or PostgreSQL at store_url for several
    # gateway processes, or none.
    store: Literal["sqlite", "redis", "postgres", "none"] = "sqlite"
    store_path: str | None = None
    store_url: str | None = None
    store_max_age_days: float = Field(default=30.0, gt=0, le=36_500)
    store_max_mb: int = Field(default=1024, gt=0, le=1024**3)
    # The transcript recorder (observability/recorder.py; docs/operations.md "Transcripts"): off unless
    # record_dir is set; then each turn is one JSON file there, secrets masked, kept at most
    # record_max_age_days and record_max_mb (the oldest go first).
    record_dir: str | None = None
    record_max_age_days: float = Field(default=7.0, gt=0, le=36_500)
    record_max_mb: int = Field(default=512, gt=0, le=1024**3)
    # WebSocket mode of /v1/responses (server/websocket.py): connections at once, a
    # connection's lifetime in seconds, and what one connection remembers of its last response.
    websocket_max_connections: int = Field(default=256, ge=0, le=1_000_000)  # 0: none
    websocket_max_lifetime: float = Field(default=3600.0, gt=0, le=7 * DAY)
    websocket_max_memory_mb: float = Field(default=64.0, ge=0, le=1024 * 1024)
    # Gateway processes sharing the port (server/workers.py); 0: one per usable core.
    workers: int = Field(default=1, ge=0, le=256)
    discover: bool = True  # look for a local model server when no upstream is configured
    # With none configured and none found, serve the embedded model (docs/backends.md); its
    # runtime, fetched on first use, lives in llama_dir (default $XDG_CACHE_HOME/codexgate/llama);
    # llama_server: a llama-server binary of one's own instead of the prebuilt runtime.
    embedded: bool = True
    llama_dir: str | None = None
    llama_server: str | None = None
    ui: bool = True  # the live view at /ui (observability/live_view.py; docs/operations.md, "Live view")
    log_level: LogLevel = "info"
    # Metrics, traces, logs (docs/operations.md): log lines as logfmt or one JSON object each;
    # Prometheus text on /metrics; OpenTelemetry traces to an OTLP/HTTP collector, sent only
    # when otlp_endpoint is set (e.g. http://127.0.0.1:4318; /v1/traces is added).
    log_format: Literal["logfmt", "json"] = "logfmt"
    metrics: bool = True
    otlp_endpoint: str | None = None
    otel_service_name: str = "codexgate"
    upstreams: list[UpstreamConfig] = Field(default_factory=list)
    models: list[ModelConfig] = Field(default_factory=list)
    # Who may use the gateway (docs/threat-model.md). Keys are also read from CODEXGATE_API_KEYS.
    api_keys: list[ApiKeyConfig] = Field(default_factory=list)
    allow_unauthenticated: bool = False  # serve non-loopback clients without keys
    allowed_hosts: list[str] = Field(default_factory=list)  # Host names besides IPs and localhost
    cors_origins: list[str] = Field(default_factory=list)  # browser origins allowed; none by default
    # Connection limits (server/limits.py); the defaults leave Codex's long streams alone.
    header_timeout: float = Field(default=10.0, gt=0, le=3600)  # seconds to receive a request's head
    body_timeout: float = Field(default=60.0, gt=0, le=DAY)  # seconds to receive a request's body
    # Seconds an idle keep-alive connection is kept; past max_idle_connections of them, the
    # longest-idle one is closed (0: none is kept idle).
    keep_alive_timeout: float = Field(default=75.0, gt=0, le=DAY)
    max_connections: int = Field(default=1000, ge=1, le=1_000_000)
    max_idle_connections: int = Field(default=256, ge=0, le=1_000_000)
    max_header_bytes: int = Field(default=64 * 1024, ge=1024, le=16 * 1024 * 1024)
    # On SIGTERM, seconds the open responses may take to finish before each still open ends
    # with response.failed `server_shutting_down` (server/serve.py; docs/deploy.md).
    shutdown_grace: float = Field(default=30.0, ge=0, le=DAY)

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower_log_level(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    @field_validator("upstream")
    @classmethod
    def _check_upstream(cls, value: str | None) -> str | None:
        return check_upstream_url(value) if value else value

    @field_validator("otlp_endpoint")
    @classmethod
    def _check_otlp_endpoint(cls, value: str | None) -> str | None:
        if value and (urlsplit(value).scheme not in ("http", "https") or not urlsplit(value).hostname):
            raise ValueError(f"otlp_endpoint {value!r} must be an http:// or https:// URL")
        return value or None

    @model_validator(mode="after")
    def _check_routes(self) -> Settings:
        names = [u.name for u in self.all_upstreams()]
        offset = len(names) - len(self.upstreams)  # --upstream's "default" comes first
        for i, name in enumerate(names):
            if name in names[:i]:
                where = ("upstreams", i - offset, "name") if i >= offset else ("upstream",)
                raise SettingError(where, f"upstream names must be unique: {name!r} is used twice")
        listed = ", ".join(names) or "none"
        for i, model in enumerate(self.models):
            if model.upstream is None and len(names) != 1:
                raise SettingError(
                    ("models", i, "upstream"),
                    f"model {model.name!r} must name its upstream (there are {len(names)}: {listed})",
                )
            if model.upstream is not None and model.upstream not in names:
                raise SettingError(
                    ("models", i),
                    f"model {model.name!r} routes to unknown upstream {model.upstream!r}; "
                    f"the upstreams are: {listed}",
                )
        return self

    def all_upstreams(self) -> list[UpstreamConfig]:
        """The configured upstreams, with `--upstream` as one named "default"."""
        upstreams = list(self.upstreams)
        if self.upstream:
            upstreams.insert(
                0,
                UpstreamConfig(
                    name=SINGLE_UPSTREAM_NAME, base_url=self.upstream, api_key_env=self.upstream_api_key_env
                ),
            )
        return upstreams


TABLE_SETTINGS = frozenset(("upstreams", "models", "api_keys"))  # the file's alone; the rest are flags
_SCALAR_FIELDS = {name for name in Settings.model_fields if name not in TABLE_SETTINGS}
LIST_SETTINGS = frozenset(("allowed_hosts", "cors_origins"))  # comma-separated in flags and environment


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


_TABLE_FIELDS = {
    "upstreams": UpstreamConfig.model_fields,
    "models": ModelConfig.model_fields,
    "api_keys": ApiKeyConfig.model_fields,
}


def _describe(error: Any, sources: Mapping[str, str], data: Mapping[str, Any]) -> str:
    """One validation error as a line a person can act on: the setting's path (an entry of a
    table by its index, `upstreams[0].idle_timeout`, and by its name), the value, where it
    came from (flag, environment variable or file) and what is wrong."""
    loc = list(error["loc"])
    cause = (error.get("ctx") or {}).get("error")
    shown = ""
    if isinstance(cause, SettingError):  # a check across settings: it says where it failed
        loc += cause.loc
        message = str(cause)
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
