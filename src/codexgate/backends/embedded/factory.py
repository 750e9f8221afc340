"""From settings to the embedded model's backend: the backend of a `kind = "embedded"` upstream
(app.py's BACKEND_KINDS), and of the fallback `serve` uses when no upstream is configured and no
local server is found (fallback.py). backend.py reaches the model, child.py runs it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from codexgate.backends.base import Backend
from codexgate.backends.embedded.backend import EmbeddedBackend
from codexgate.backends.embedded.runtime import llama_root
from codexgate.backends.embedded.supervisor import LlamaOptions, LlamaSupervisor
from codexgate.backends.http.stream import UpstreamTarget
from codexgate.backends.kinds import Building
from codexgate.config import EmbeddedUpstream, ModelConfig, UpstreamConfig

__all__ = [
    "DEFAULT_ALIAS",
    "DEFAULT_CONTEXT_WINDOW",
    "EMBEDDED",
    "EmbeddedKind",
    "alias_of",
    "build_embedded",
]

DEFAULT_ALIAS = "smollm2-135m"  # the model id of the default embedded model
DEFAULT_CONTEXT_WINDOW = 8192  # SmolLM2's trained context
DEFAULT_MAX_TOKENS = 1024


def alias_of(upstream: EmbeddedUpstream) -> str:
    """The model id it serves: `smollm2-135m`, or the name of one's own GGUF file."""
    if upstream.model_path:
        return Path(upstream.model_path).name.removesuffix(".gguf").lower()
    return DEFAULT_ALIAS


def build_embedded(upstream: EmbeddedUpstream, building: Building) -> EmbeddedBackend:
    """The backend; nothing runs until it is started (at the gateway's startup)."""
    settings = building.settings
    window = upstream.context_window or DEFAULT_CONTEXT_WINDOW
    options = LlamaOptions(
        root=llama_root(building.environ, settings.llama_dir),
        alias=alias_of(upstream),
        context_window=window,
        threads=upstream.threads,
        model=Path(upstream.model_path).expanduser() if upstream.model_path else None,
        server=Path(settings.llama_server).expanduser() if settings.llama_server else None,
    )
    dialect = upstream.dialect()
    # A tiny model easily repeats itself until its window is full: minutes on 2 cores for a
    # newcomer's first "hello". Its answers are capped unless the client (max_output_tokens)
    # or the config (extra_body) says otherwise; a capped answer ends `incomplete`. And it
    # reports how far it has read a long prompt (`prompt_progress` chunks: Codex's first
    # prompt takes a minute or more on a CPU), which the chat backend logs.
    extra = {"max_tokens": DEFAULT_MAX_TOKENS, "return_progress": True, **dialect.extra_body}
    template = UpstreamTarget(
        name=upstream.name,
        base_url="http://127.0.0.1:0/v1",  # the child's port is chosen when it starts
        headers={},
        dialect=replace(dialect, context_window=window, extra_body=extra),
        connect_timeout=settings.connect_timeout,
        idle_timeout=upstream.idle_timeout or settings.idle_timeout,
        max_retries=settings.max_retries,
        retry_backoff=settings.retry_backoff,
        max_retry_wait=settings.max_retry_wait,
        models=(options.alias,),
        learn_context_window=False,  # the window is the one it was started with
        max_output_bytes=upstream.max_output_bytes or settings.max_output_bytes,
        max_request_seconds=upstream.max_request_seconds or settings.max_request_seconds,
    )
    transport = building.transport
    supervisor = LlamaSupervisor(options, transport)
    return EmbeddedBackend(template, transport, supervisor, building.once, history=building.history())


class EmbeddedKind:
    """`kind = "embedded"`: a model the gateway runs itself; it starts with the gateway."""

    def build(self, upstream: UpstreamConfig, building: Building) -> EmbeddedBackend:
        assert isinstance(upstream, EmbeddedUpstream), "the embedded kind builds embedded upstreams"
        return build_embedded(upstream, building)

    def for_route(self, backend: Backend, model: ModelConfig) -> EmbeddedBackend:
        """The model's own settings layered on the embedded model's dialect."""
        assert isinstance(backend, EmbeddedBackend), "routes of an embedded upstream"
        return backend.for_route(model.dialect_for(backend.target.dialect))


EMBEDDED = EmbeddedKind()
