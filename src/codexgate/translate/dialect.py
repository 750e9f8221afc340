"""What a Chat Completions upstream accepts: the knobs translation reads. Pure data; built from
the upstream's config so that a new OpenAI-compatible server needs config, not code."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

# merge: leading developer/system messages become one system message, later ones a user
#        message (most chat templates allow one system message, at the start, and no developer)
# system: every developer message becomes a system message where it stands
# developer: the roles go upstream as they are (OpenAI itself, servers that know `developer`)
DeveloperRole = Literal["merge", "system", "developer"]

# How reasoning from an earlier turn goes back upstream: as `reasoning_content` (DeepSeek, vLLM,
# llama.cpp), as `reasoning` (OpenRouter), or not at all.
ReasoningReplay = Literal["reasoning_content", "reasoning", "none"]

# Reasoning written inline as <think>...</think>: detect it ("auto"), expect the answer to start
# inside an unclosed block because the chat template opened it ("start_inside"), or "off".
ThinkMode = Literal["auto", "start_inside", "off"]


@dataclass(frozen=True, slots=True)
class ChatDialect:
    developer_role: DeveloperRole = "merge"
    reasoning_replay: ReasoningReplay = "reasoning_content"
    send_reasoning_effort: bool = False
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    include_usage: bool = True
    # Tool calls written as text: "auto" (detect every known format), a format name
    # (hermes, qwen3_coder, mistral, llama, deepseek, json) or "off".
    text_tool_calls: str = "auto"
    think_tags: ThinkMode = "auto"
    # The model's context window when known: a request that cannot fit is refused before it
    # is sent, instead of being truncated silently by servers with a small default context.
    context_window: int | None = None
    # "auto": a request without temperature/top_p gets the model family's published values
    # (translate/open_models/sampling.py); "off": the server's own defaults.
    default_sampling: Literal["auto", "off"] = "auto"
    # Stop a generation whose text has become one unit repeated over and over
    # (translate/open_models/loops.py).
    loop_guard: bool = True
    # merged into every request body (e.g. default sampling for a small model); the client's
    # own values win.
    extra_body: dict[str, Any] = field(default_factory=dict)
