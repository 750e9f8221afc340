"""An `[[upstreams]]` table: one settings model per kind of upstream, on a shared base, and
`UpstreamConfig`, their union discriminated by `kind` (chat when an upstream names none).

How the gateway talks to an upstream, a backend package per kind (app.py's BACKEND_KINDS):
chat: a Chat Completions server; responses: a Responses server; anthropic: an Anthropic
Messages server (Anthropic's API, llama.cpp's, vLLM's, Ollama's /v1/messages); codex: the Codex agent, driven
through `codex app-server`; embedded: a small model the gateway runs itself (llama.cpp's
llama-server, built once per user; backends/embedded/).

A setting of another kind is refused by name ("model_path applies to upstreams of kind embedded,
not 'chat'"), not as an unknown key: set on the wrong kind it would do nothing, and that is a
mistake, not a wish.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import typing
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, TypeAlias

from pydantic import (
    BeforeValidator,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from codexgate.config.checks import (
    DAY,
    GIB,
    MAX_WINDOW,
    SettingError,
    Strict,
    check_text_tool_calls,
    check_upstream_url,
    unknown_setting,
)
from codexgate.translate.dialect import ChatDialect, DeveloperRole, ReasoningReplay, ThinkMode

UpstreamKind = Literal["chat", "responses", "anthropic", "codex", "embedded"]
UPSTREAM_KINDS: tuple[str, ...] = typing.get_args(UpstreamKind)
DEFAULT_KIND = "chat"  # an upstream that names no kind

SandboxMode = Literal["read-only", "workspace-write", "danger-full-access"]
# What Codex may ask before it acts (its own approval policy names), and what the gateway,
# which has no person to ask, answers when it does.
ApprovalPolicy = Literal["never", "on-request", "untrusted"]
ApprovalAnswer = Literal["decline", "accept"]

# The settings that make up an upstream's (and a route's) ChatDialect: the dialect is built from
# the config by these names (`UpstreamBase.dialect`), so a new one is declared in ChatDialect
# and here in the config, and nowhere in between.
DIALECT_FIELDS = frozenset(f.name for f in dataclasses.fields(ChatDialect))


class UpstreamBase(Strict):
    """What every kind of upstream takes: its name and kind, overrides of the global budgets,
    and the stages on its answers."""

    # Settings a kind cannot do without; a missing one is named with the kind that needs it.
    required_settings: ClassVar[tuple[str, ...]] = ()

    name: str
    kind: UpstreamKind
    idle_timeout: float | None = Field(default=None, gt=0, le=DAY)  # None: the global value
    max_output_bytes: int | None = Field(default=None, gt=0, le=GIB)  # None: the global values
    max_request_seconds: float | None = Field(default=None, gt=0, le=DAY)
    text_tool_calls: str = "auto"  # auto | off | hermes | qwen3_coder | mistral | llama | deepseek | json
    think_tags: ThinkMode = "auto"  # auto | start_inside | off
    models: list[str] = Field(default_factory=list)  # listed by /v1/models when not routed
    # Stop a model that repeats the same text over and over instead of letting it fill the
    # context window; the response fails with `model_output_loop`, which Codex retries.
    loop_guard: bool = True
    # Requests in flight at once on this server (e.g. llama.cpp's --parallel slots); past it a
    # request waits in a short queue or goes to another member of its route (routing/).
    max_concurrent: int | None = Field(default=None, ge=1, le=100_000)

    @model_validator(mode="before")
    @classmethod
    def _refuse_other_kinds_settings(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        kind = cls.model_fields["kind"].default
        unknown = sorted(data.keys() - cls.model_fields.keys())
        for name in unknown:
            kinds = _KINDS_TAKING.get(name)
            if kinds and data[name] is not None:
                message = f"{name} applies to upstreams of kind {' or '.join(kinds)}, not {kind!r}"
                raise SettingError((name,), message)
        for name in cls.required_settings:
            if data.get(name) is None:
                # A misspelt required setting is said as the misspelling, as an optional one is.
                for key in unknown:
                    if difflib.get_close_matches(key, [name], n=1, cutoff=0.6):
                        raise SettingError((key,), unknown_setting(name), data[key])
                raise SettingError((name,), f"an upstream of kind {kind!r} needs a {name}")
        return data

    @model_validator(mode="after")
    def _check_modes(self) -> UpstreamBase:
        check_text_tool_calls(self.text_tool_calls)
        return self

    def dialect(self) -> ChatDialect:
        """This upstream's dialect, from its settings of the same names (those its kind does
        not take keep ChatDialect's defaults)."""
        return ChatDialect(**self.model_dump(include=set(DIALECT_FIELDS)))


class HttpUpstream(UpstreamBase):
    """What the kinds reached over HTTP (chat, responses, anthropic) share: where, with which
    key."""

    required_settings = ("base_url",)

    base_url: str  # the API base, e.g. http://127.0.0.1:11434/v1
    api_key_env: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    connect_timeout: float | None = Field(default=None, gt=0, le=3600)  # None: the global value
    max_retries: int | None = Field(default=None, ge=0, le=100)
    # Seconds the server may take to its first byte (its response headers) before the attempt
    # fails; None: idle_timeout. A pool fails over to another member past it.
    first_byte_timeout: float | None = Field(default=None, gt=0, le=DAY)
    extra_body: dict[str, Any] = Field(default_factory=dict)

    @field_validator("base_url")
    @classmethod
    def _check_base_url(cls, value: str) -> str:
        return check_upstream_url(value)

    def key_headers(self, key: str) -> dict[str, str]:
        """The headers that carry the upstream's key (read from `api_key_env`)."""
        return {"authorization": f"Bearer {key}"}

    def kind_headers(self) -> dict[str, str]:
        """Headers the kind sends with every request (the configured `headers` win)."""
        return {}


class ChatUpstream(HttpUpstream):
    """A Chat Completions server."""

    kind: Literal["chat"] = "chat"
    developer_role: DeveloperRole = "merge"
    reasoning_replay: ReasoningReplay = "reasoning_content"
    send_reasoning_effort: bool = False
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    include_usage: bool = True
    # Ask the server for each model's context window (llama.cpp /props, Ollama /api/show, ...)
    # so requests that cannot fit are refused instead of silently truncated.
    learn_context_window: bool = True
    # A request with no temperature/top_p (Codex sends none) gets the model family's published
    # values ("auto"), or the server's defaults ("off").
    default_sampling: Literal["auto", "off"] = "auto"


class ResponsesUpstream(HttpUpstream):
    """A Responses server."""

    kind: Literal["responses"] = "responses"
    # How the request's tools are offered. "functions": every tool as a function (namespaces
    # flattened, custom tools with one `input` string), hosted tools left out, as any Responses
    # server takes them; "native": as the client sent them (OpenAI, codexgate).
    tool_format: Literal["functions", "native"] = "functions"


class AnthropicUpstream(HttpUpstream):
    """An Anthropic Messages server: Anthropic's API, or the `/v1/messages` of llama.cpp, vLLM
    or Ollama (no key). The gateway appends `/messages` to `base_url`."""

    kind: Literal["anthropic"] = "anthropic"
    anthropic_version: str = "2023-06-01"  # sent as `anthropic-version`
    betas: list[str] = Field(default_factory=list)  # sent as `anthropic-beta` with every request
    # "auto": the gateway marks cache breakpoints (translate/messages_upstream/cache.py) on
    # requests whose client set none; "off": never.
    prompt_cache: Literal["auto", "off"] = "auto"
    # How `reasoning.effort` asks for thinking: "enabled" (a budget of tokens per effort),
    # "adaptive" (the model decides, `output_config.effort` says how hard; Claude 4.6 and
    # later), "off" (never).
    thinking: Literal["enabled", "adaptive", "off"] = "enabled"

    @field_validator("betas")
    @classmethod
    def _check_betas(cls, value: list[str]) -> list[str]:
        for beta in value:
            if not beta or "," in beta or beta.strip() != beta:
                raise ValueError(f"a beta is one name without commas or spaces, not {beta!r}")
        return value

    def key_headers(self, key: str) -> dict[str, str]:
        return {"x-api-key": key}

    def kind_headers(self) -> dict[str, str]:
        headers = {"anthropic-version": self.anthropic_version}
        if self.betas:
            headers["anthropic-beta"] = ",".join(self.betas)
        return headers


class CodexUpstream(UpstreamBase):
    """The Codex agent as the model (docs/backends.md)."""

    kind: Literal["codex"] = "codex"
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


class EmbeddedUpstream(UpstreamBase):
    """A model the gateway runs itself: a GGUF of one's own (default: SmolLM2-135M), the context
    it runs with (default 8192), llama-server's threads (default: every core)."""

    kind: Literal["embedded"] = "embedded"
    extra_body: dict[str, Any] = Field(default_factory=dict)
    default_sampling: Literal["auto", "off"] = "auto"
    model_path: str | None = None
    context_window: int | None = Field(default=None, gt=0, le=MAX_WINDOW)
    threads: int | None = Field(default=None, gt=0, le=1024)


# One line per kind; the union below lists the same classes, in the same order.
UPSTREAM_CLASSES: Mapping[str, type[UpstreamBase]] = {
    "chat": ChatUpstream,
    "responses": ResponsesUpstream,
    "anthropic": AnthropicUpstream,
    "codex": CodexUpstream,
    "embedded": EmbeddedUpstream,
}

# Every setting an upstream of some kind takes, and the kinds that take each.
UPSTREAM_FIELDS: Mapping[str, FieldInfo] = {
    name: field for cls in UPSTREAM_CLASSES.values() for name, field in cls.model_fields.items()
}
_KINDS_TAKING: Mapping[str, tuple[str, ...]] = {
    name: tuple(sorted(kind for kind, cls in UPSTREAM_CLASSES.items() if name in cls.model_fields))
    for name in UPSTREAM_FIELDS
}


def _kind_of(value: Any) -> str | None:
    """The discriminator: the kind an upstream names, chat when it names none."""
    if isinstance(value, dict):
        kind = value.get("kind", DEFAULT_KIND)
        return kind if isinstance(kind, str) else None
    return getattr(value, "kind", None)


def _known_kind(value: Any) -> Any:
    """Refuses, before the union picks a class, a table that is not one or names no kind there
    is, with the kinds there are."""
    if isinstance(value, UpstreamBase):
        return value
    if not isinstance(value, dict):
        raise SettingError((), "must be a valid dictionary or instance of UpstreamConfig", value)
    kind = value.get("kind", DEFAULT_KIND)
    if kind not in UPSTREAM_KINDS:
        *first, last = (repr(k) for k in UPSTREAM_KINDS)
        raise SettingError(("kind",), f"must be {', '.join(first)} or {last}", kind)
    return value


UpstreamConfig: TypeAlias = Annotated[
    Annotated[ChatUpstream, Tag("chat")]
    | Annotated[ResponsesUpstream, Tag("responses")]
    | Annotated[AnthropicUpstream, Tag("anthropic")]
    | Annotated[CodexUpstream, Tag("codex")]
    | Annotated[EmbeddedUpstream, Tag("embedded")],
    Discriminator(_kind_of),
    BeforeValidator(_known_kind),
]


def tag_free(loc: tuple[str | int, ...]) -> tuple[str | int, ...]:
    """An error's place without the kind pydantic inserts after an upstream's index
    (`upstreams, 0, codex, sandbox` is `upstreams[0].sandbox` to the person who wrote it)."""
    if len(loc) > 2 and loc[0] == "upstreams" and isinstance(loc[1], int) and loc[2] in UPSTREAM_KINDS:
        return loc[:2] + loc[3:]
    return loc


@functools.cache
def _adapter() -> TypeAdapter[UpstreamConfig]:
    return TypeAdapter(UpstreamConfig)


def parse_upstream(data: Mapping[str, Any]) -> UpstreamConfig:
    """One `[[upstreams]]` table as its kind's settings. Raises pydantic's ValidationError."""
    return _adapter().validate_python(dict(data))
