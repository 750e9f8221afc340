"""From settings to the Codex agent's backend (`kind = "codex"`; app.py's BACKEND_KINDS)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from codexgate.backends.base import Backend
from codexgate.backends.codex.backend import CodexBackend, CodexTarget
from codexgate.backends.http.transport import Transport
from codexgate.backends.log import OnceLog
from codexgate.config import CodexUpstream, ModelConfig, Settings, UpstreamConfig
from codexgate.translate.history_memo import Memo

__all__ = ["CODEX", "CodexKind"]


class CodexKind:
    """The Codex agent through `codex app-server` (started on first use)."""

    def build(
        self,
        upstream: UpstreamConfig,
        settings: Settings,
        environ: Mapping[str, str],
        transport: Transport,
        once: OnceLog,
        history: Memo[Any] | None,
    ) -> CodexBackend:
        """`transport`, `once` and `history` go unused: the agent is a process, not an HTTP
        server, and keeps each conversation as a thread of its own."""
        assert isinstance(upstream, CodexUpstream), "the codex kind builds codex upstreams"
        stages = upstream.model_fields_set  # stages an agent's answer needs only when asked for
        target = CodexTarget(
            name=upstream.name,
            codex_bin=upstream.codex_bin,
            codex_home=upstream.codex_home,
            workdir=os.path.abspath(os.path.expanduser(upstream.workdir or os.getcwd())),
            sandbox=upstream.sandbox,
            approval=upstream.approval,
            approval_answer=upstream.approval_answer,
            tool_result_timeout=upstream.tool_result_timeout,
            max_threads=upstream.max_threads,
            models=tuple(upstream.models),
            idle_timeout=upstream.idle_timeout or settings.idle_timeout,
            max_request_seconds=upstream.max_request_seconds or settings.max_request_seconds,
            max_output_bytes=upstream.max_output_bytes or settings.max_output_bytes,
            loop_guard=upstream.loop_guard,
            think_tags=upstream.think_tags if "think_tags" in stages else "off",
            text_tool_calls=upstream.text_tool_calls if "text_tool_calls" in stages else "off",
        )
        return CodexBackend(target, environ)

    def for_route(self, backend: Backend, model: ModelConfig) -> Backend:
        """Routes share the upstream's backend: the agent takes the model per request."""
        return backend


CODEX = CodexKind()
