"""The settings of the gateway: `Settings`, the one typed object built once (config/load.py)
and passed down, with its tables of model routes and API keys; the upstreams' tables are in
config/upstreams.py."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Sequence
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from codexgate.config.checks import (
    DAY,
    GIB,
    MAX_WINDOW,
    SettingError,
    Strict,
    check_text_tool_calls,
    check_upstream_url,
)
from codexgate.config.upstreams import DIALECT_FIELDS, ChatUpstream, UpstreamConfig
from codexgate.translate.dialect import ChatDialect, ThinkMode

SINGLE_UPSTREAM_NAME = "default"


class PoolMember(Strict):
    """One member of a route's pool: an upstream, and its own id of the model when it differs."""

    name: str
    model: str | None = None  # None: the route's `model`


Balance = Literal["least_busy", "round_robin", "weighted"]


class ModelConfig(Strict):
    """A `[[models]]` table: a name clients ask for, the upstream it goes to (or the pool of
    upstreams, and the routes to try when none of them can answer), and the model's own settings
    layered on the upstream's."""

    name: str
    upstream: str | None = None  # None: the only upstream (or `upstreams`)
    upstreams: list[str | PoolMember] = Field(default_factory=list)  # a pool (routing/)
    model: str | None = None  # the upstreams' model id (default: name)
    balance: Balance = "least_busy"
    weights: list[float] = Field(default_factory=list)  # balance = "weighted": one per member
    sticky: bool = True  # one conversation stays on one member while it is usable
    fallbacks: list[str] = Field(default_factory=list)  # routes tried, in order, when this one cannot answer
    aliases: list[str] = Field(default_factory=list)
    context_window: int | None = Field(default=None, gt=0, le=MAX_WINDOW)
    supports_images: bool = False
    supports_reasoning: bool = False
    extra_body: dict[str, Any] = Field(default_factory=dict)  # e.g. default sampling
    text_tool_calls: str | None = None  # None: the upstream's setting
    think_tags: ThinkMode | None = None
    default_sampling: Literal["auto", "off"] | None = None

    @model_validator(mode="after")
    def _check_modes(self) -> ModelConfig:
        if self.text_tool_calls is not None:
            check_text_tool_calls(self.text_tool_calls)
        if self.upstream is not None and self.upstreams:
            raise SettingError(("upstreams",), "give `upstream` (one) or `upstreams` (a pool), not both")
        names = [member.name for member in self.members()]
        if len(names) != len(set(names)):
            raise SettingError(("upstreams",), f"a pool names each upstream once, not {names}")
        if self.balance == "weighted" and len(self.weights) != len(names):
            wanted = f"one weight per member ({len(names)})"
            raise SettingError(("weights",), f'balance = "weighted" takes {wanted}')
        if self.weights and self.balance != "weighted":
            raise SettingError(("weights",), 'weights go with balance = "weighted"')
        if any(weight <= 0 for weight in self.weights):
            raise SettingError(("weights",), "weights must be greater than 0")
        if self.name in self.fallbacks:
            raise SettingError(("fallbacks",), f"route {self.name!r} cannot fall back to itself")
        return self

    def members(self) -> list[PoolMember]:
        """The upstreams of this route, each with its model id (empty: the only upstream)."""
        if self.upstream is not None:
            return [PoolMember(name=self.upstream)]
        return [PoolMember(name=m) if isinstance(m, str) else m for m in self.upstreams]

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


# Bounds of a key's limits: far above any real use, so that a value past them is a mistake.
_MAX_RATE = 1_000_000_000
_MAX_TOKENS = 10**15


class ApiKeyConfig(Strict):
    """An inbound API key: the secret is read from `key_env`, never from the file; what the key
    may spend (server/keys/admission.py; docs/configuration.md "Keys and their limits"). A limit left
    out (None) does not apply."""

    name: str
    key_env: str
    requests_per_minute: int | None = Field(default=None, gt=0, le=_MAX_RATE)
    # input + output tokens, counted when each answer's usage is known
    tokens_per_minute: int | None = Field(default=None, gt=0, le=_MAX_TOKENS)
    max_concurrent: int | None = Field(default=None, gt=0, le=1_000_000)  # responses in flight
    tokens_per_day: int | None = Field(default=None, gt=0, le=_MAX_TOKENS)  # a budget; 00:00 UTC
    models: list[str] | None = Field(default=None, min_length=1)  # the routes it may use; None: all
    admin: bool = False  # may read every key's usage (GET /v1/usage?key=NAME)

    @property
    def limited(self) -> bool:
        """Whether admission counts anything for this key (a store round trip per request)."""
        return any(
            limit is not None
            for limit in (self.requests_per_minute, self.tokens_per_minute, self.max_concurrent,
                          self.tokens_per_day)
        )  # fmt: skip


class Settings(Strict):
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
    max_body_bytes: int = Field(default=64 * 1024 * 1024, ge=1024, le=GIB)
    # Bounds on one response, far above any real Codex turn (a turn's answer is kilobytes to
    # a few hundred kilobytes; long turns take minutes): output past the first ends the
    # response `incomplete` (max_output_tokens), a response outlasting the second fails
    # with upstream_timeout.
    max_output_bytes: int = Field(default=8 * 1024 * 1024, gt=0, le=GIB)
    max_request_seconds: float = Field(default=3600.0, gt=0, le=DAY)
    # What is remembered of each conversation between turns, so that the history Codex
    # re-sends every turn is decoded, validated and translated once (translate/history_memo.py,
    # wire/known_body.py): at most this many MiB of memory for the Responses face and as many
    # per upstream (a request takes about twice its body); 0 turns it off. A conversation is
    # remembered from its second request, if that is at least history_cache_min_kb: Codex's
    # first request alone is ~25 KB, a working session's 50-100 KB and more
    # (docs/operations.md).
    history_cache_mb: int = Field(default=128, ge=0, le=1024 * 1024)
    history_cache_min_kb: int = Field(default=32, ge=0, le=1024 * 1024)
    # Stored responses (previous_response_id, item_reference, GET /v1/responses/{id}, compaction
    # keys; docs/state.md): SQLite by default at store_path (default
    # $XDG_DATA_HOME/codexgate/store.sqlite3), Redis or PostgreSQL at store_url for several
    # gateway processes, or none.
    store: Literal["sqlite", "redis", "postgres", "none"] = "sqlite"
    store_path: str | None = None
    store_url: str | None = None
    store_max_age_days: float = Field(default=30.0, gt=0, le=36_500)
    store_max_mb: int = Field(default=1024, gt=0, le=1024**3)
    # The usage ledger (GET /v1/usage, `codexgate usage`): days kept, per key, route and upstream.
    usage_max_age_days: int = Field(default=400, gt=0, le=36_500)
    # The "minute" of requests_per_minute and tokens_per_minute, in seconds: 60 but in tests,
    # which shorten it rather than wait a minute.
    rate_window_seconds: float = Field(default=60.0, ge=0.5, le=60.0)
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
    # Connection limits (server/connection_limits.py); the defaults leave Codex's long streams alone.
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
        routes = {name for model in self.models for name in (model.name, *model.aliases)}
        for i, model in enumerate(self.models):
            members = model.members()
            if not members and len(names) != 1:
                raise SettingError(
                    ("models", i, "upstream"),
                    f"model {model.name!r} must name its upstream (there are {len(names)}: {listed})",
                )
            for member in members:
                if member.name not in names:
                    raise SettingError(
                        ("models", i),
                        f"model {model.name!r} routes to unknown upstream {member.name!r}; "
                        f"the upstreams are: {listed}",
                    )
            for fallback in model.fallbacks:
                if fallback not in routes:
                    raise SettingError(
                        ("models", i, "fallbacks"),
                        f"model {model.name!r} falls back to unknown route {fallback!r}",
                    )
        check_key_models(self.api_keys, self.models, self.all_upstreams())
        return self

    def all_upstreams(self) -> list[UpstreamConfig]:
        """The configured upstreams, with `--upstream` as one named "default"."""
        upstreams = list(self.upstreams)
        if self.upstream:
            upstreams.insert(
                0,
                ChatUpstream(
                    name=SINGLE_UPSTREAM_NAME, base_url=self.upstream, api_key_env=self.upstream_api_key_env
                ),
            )
        return upstreams


def check_key_models(
    keys: Sequence[ApiKeyConfig], models: Sequence[ModelConfig], upstreams: Sequence[UpstreamConfig]
) -> None:
    """A key's `models` must name what can be served, as far as the settings alone can tell:
    routes and their aliases; with no routes, the model ids every upstream lists (its
    `models`). An upstream that lists none serves the names clients send as they are, which
    only asking it could check, so then any name is accepted. Raises SettingError at the name
    (`api_keys[0].models[1]`), with the nearest known name when one is near."""
    if models:
        known = {name for model in models for name in (model.name, *model.aliases)}
        unknown, listing = "which is not routed", "the models are"
    elif upstreams and all(upstream.models for upstream in upstreams):
        known = {name for upstream in upstreams for name in upstream.models}
        unknown, listing = "which no upstream lists", "the upstreams' models are"
    else:
        return
    for i, key in enumerate(keys):
        for j, name in enumerate(key.models or ()):
            if name not in known:
                close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
                raise SettingError(
                    ("api_keys", i, "models", j),
                    f"key {key.name!r} names model {name!r}, {unknown}; {listing}: "
                    + ", ".join(sorted(known))
                    + (f"; did you mean {close[0]!r}?" if close else ""),
                )


TABLE_SETTINGS = frozenset(("upstreams", "models", "api_keys"))  # the file's alone; the rest are flags
LIST_SETTINGS = frozenset(("allowed_hosts", "cors_origins"))  # comma-separated in flags and environment
