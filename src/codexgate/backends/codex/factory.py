"""From settings to the Codex agent's backend (`kind = "codex"`; app.py's BACKEND_KINDS)."""

from __future__ import annotations

import os

from codexgate.backends.base import Backend
from codexgate.backends.codex.backend import CodexBackend, CodexTarget
from codexgate.backends.kinds import Building
from codexgate.config import CodexUpstream, ModelConfig, UpstreamConfig

__all__ = ["CODEX", "CodexKind"]


class CodexKind:
    """The Codex agent through `codex app-server` (started on first use)."""

    def build(self, upstream: UpstreamConfig, building: Building) -> CodexBackend:
        """The agent is a process, not an HTTP server, and keeps each conversation as a thread
        of its own: of `building` it takes the settings and the environment."""
        settings = building.settings
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
        return CodexBackend(target, building.environ)

    def for_route(self, backend: Backend, model: ModelConfig) -> Backend:
        """Routes share the upstream's backend: the agent takes the model per request."""
        return backend


CODEX = CodexKind()
