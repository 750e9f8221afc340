"""The embedded model from the settings: the backend of a `kind = "embedded"` upstream (and of
the fallback `serve` uses when no upstream is configured and no local server is found), and
its entry in Codex's model catalog. The model itself runs in backends/embedded.py."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from codexgate.backends.embedded.backend import EmbeddedBackend
from codexgate.backends.embedded.runtime import llama_root
from codexgate.backends.embedded.supervisor import LlamaOptions, LlamaSupervisor
from codexgate.backends.http.stream import UpstreamTarget
from codexgate.backends.http.transport import Transport
from codexgate.backends.log import OnceLog
from codexgate.commands.codex_setup.catalog import ModelSpec
from codexgate.config import EmbeddedUpstream, Settings
from codexgate.translate.history_memo import Memo

__all__ = [
    "DEFAULT_ALIAS",
    "DEFAULT_CONTEXT_WINDOW",
    "FALLBACK_NOTE",
    "EmbeddedFallback",
    "alias_of",
    "build_embedded",
    "embedded_spec",
    "embedded_upstream",
]

log = logging.getLogger("codexgate.backends.embedded.fallback")

DEFAULT_ALIAS = "smollm2-135m"  # the model id of the default embedded model
DEFAULT_CONTEXT_WINDOW = 8192  # SmolLM2's trained context
FALLBACK_NOTE = (
    "no model server found; serving the embedded SmolLM2-135M (a tiny model for trying "
    "codexgate; point at a real one with --upstream URL)"
)
_TOOLS_NOTE = (
    "SmolLM2-135M, codexgate's embedded model: a tiny model for trying codexgate. It answers, "
    "but does not call tools reliably; point codexgate at a real model for work."
)


def embedded_upstream() -> EmbeddedUpstream:
    """The upstream `serve` falls back to."""
    return EmbeddedUpstream(name="embedded")


def alias_of(upstream: EmbeddedUpstream) -> str:
    """The model id it serves: `smollm2-135m`, or the name of one's own GGUF file."""
    if upstream.model_path:
        return Path(upstream.model_path).name.removesuffix(".gguf").lower()
    return DEFAULT_ALIAS


DEFAULT_MAX_TOKENS = 1024


def build_embedded(
    upstream: EmbeddedUpstream,
    settings: Settings,
    environ: Mapping[str, str],
    transport: Transport,
    once: OnceLog,
    history: Memo[Any] | None,
) -> EmbeddedBackend:
    """The backend; nothing runs until it is started (at the gateway's startup)."""
    window = upstream.context_window or DEFAULT_CONTEXT_WINDOW
    options = LlamaOptions(
        root=llama_root(environ, settings.llama_dir),
        alias=alias_of(upstream),
        context_window=window,
        threads=upstream.threads,
        model=Path(upstream.model_path).expanduser() if upstream.model_path else None,
        server=Path(settings.llama_server).expanduser() if settings.llama_server else None,
    )
    dialect = upstream.dialect()
    # A tiny model easily repeats itself until its window is full: minutes on 2 cores for a
    # newcomer's first "hello". Its answers are capped unless the client (max_output_tokens)
    # or the config (extra_body) says otherwise; a capped answer ends `incomplete`.
    extra = {"max_tokens": DEFAULT_MAX_TOKENS, **dialect.extra_body}
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
    supervisor = LlamaSupervisor(options, transport)
    return EmbeddedBackend(template, transport, supervisor, once, history=history)


def embedded_spec(upstream: EmbeddedUpstream, slug: str | None = None) -> ModelSpec:
    """Codex's catalog entry for the embedded model: its window is known without running it."""
    window = upstream.context_window or DEFAULT_CONTEXT_WINDOW
    own = bool(upstream.model_path)
    return ModelSpec(
        slug=slug or alias_of(upstream),
        context_window=window,
        window_source="the embedded model's configured context" if own else "the embedded model",
        description=None if own else _TOOLS_NOTE,
    )


# While the embedded model is the fallback: how often to look for a local model server, and
# how long the embedded model goes on (finishing its answers) once one is found.
WATCH_SECONDS = 10.0
GRACE_SECONDS = 30.0


class EmbeddedFallback:
    """The embedded model as `serve`'s default, and the watch for a real one: every
    WATCH_SECONDS `find` looks for a local model server (backends/discovery.py) and, once one is found
    and routed to, this stops watching; the embedded model stops GRACE_SECONDS later, so the
    answers it is giving end first."""

    def __init__(self, backend: EmbeddedBackend, find: Callable[[], Awaitable[bool]]) -> None:
        self.backend, self._find = backend, find
        self._watch: asyncio.Task[None] | None = None

    def start(self) -> None:
        log.info("%s", FALLBACK_NOTE)
        self.backend.start()
        self._watch = asyncio.get_running_loop().create_task(self._watching(), name="embedded-fallback")

    async def _watching(self) -> None:
        try:
            while not await self._wait_and_find():
                pass
            await asyncio.sleep(GRACE_SECONDS)
        finally:
            await self.backend.aclose()

    async def _wait_and_find(self) -> bool:
        await asyncio.sleep(WATCH_SECONDS)
        return await self._find()

    async def aclose(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.gather(self._watch, return_exceptions=True)
        await self.backend.aclose()
