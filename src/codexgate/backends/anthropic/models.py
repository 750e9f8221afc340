"""What a Messages server says of its models, for `codex-setup` and `doctor`: Anthropic's
`GET /v1/models` lists each model with `max_input_tokens` (its context window), `max_tokens`
and its `capabilities` (thinking, image input); a server that lists less (llama.cpp, vLLM,
Ollama) or nothing leaves it to a table by the start of the model's id (`claude-`: 200k
tokens, images, thinking from Claude 3.7 on), and the window to what a local server publishes
beside its Messages endpoint (llama.cpp's `/props`, vLLM's `max_model_len`, Ollama's, LM
Studio's: backends/server_info.py, as for a chat upstream)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote

from codexgate.backends.http.transport import Transport
from codexgate.backends.server_info import (
    ContextWindow,
    fetch_json_or_why,
    model_entries,
    probe_context_window,
    probeable_model_name,
)

__all__ = [
    "CLAUDE_CONTEXT_WINDOW",
    "ModelFacts",
    "claude_facts",
    "facts_of_entry",
    "list_entries",
    "model_facts",
    "with_server_window",
]

CLAUDE_CONTEXT_WINDOW = 200_000  # every Claude model's, unless a beta widens it
_CLAUDE = "claude-"
# Claude models that think (extended thinking): 3.7 and every later family.
_NO_THINKING = ("claude-3-opus", "claude-3-sonnet", "claude-3-haiku", "claude-3-5")


@dataclass(frozen=True, slots=True)
class ModelFacts:
    window: ContextWindow | None
    reasoning: bool  # the model thinks (thinking "enabled" or "adaptive")
    images: bool
    listed: bool = False  # the server listed the model


def claude_facts(model: str) -> ModelFacts | None:
    """What the table says of a Claude model by its id; None for any other model."""
    lowered = model.lower()
    if not lowered.startswith(_CLAUDE):
        return None
    window = ContextWindow(CLAUDE_CONTEXT_WINDOW, "Claude models' context window")
    return ModelFacts(window, reasoning=not lowered.startswith(_NO_THINKING), images=True)


def _supported(capabilities: Any, *path: str) -> bool | None:
    node = capabilities
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, bool) else None


def facts_of_entry(entry: Mapping[str, Any]) -> ModelFacts:
    """A model as the server listed it, the table filling what the entry does not say."""
    table = claude_facts(str(entry.get("id", "")))
    window = table.window if table is not None else None
    tokens = entry.get("max_input_tokens")
    if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0:
        window = ContextWindow(tokens, "/v1/models max_input_tokens")
    capabilities = entry.get("capabilities")
    thinking = _supported(capabilities, "thinking", "supported")
    images = _supported(capabilities, "image_input", "supported")
    return ModelFacts(
        window,
        reasoning=thinking if thinking is not None else bool(table and table.reasoning),
        images=images if images is not None else bool(table and table.images),
        listed=True,
    )


async def list_entries(
    transport: Transport, base_url: str, headers: Mapping[str, str], timeout: float
) -> tuple[int, list[dict[str, Any]], str | None]:
    """`GET {base_url}/models`: (status, the model entries, what failed when nothing answered).
    Status 0: nothing answered."""
    status, body, why = await fetch_json_or_why(transport, base_url.rstrip("/") + "/models", headers, timeout)
    return status, model_entries(body) if status == 200 else [], why


async def model_facts(
    transport: Transport, base_url: str, headers: Mapping[str, str], model: str, timeout: float
) -> ModelFacts | None:
    """The model's facts from the server's list (Anthropic's `GET /models/{id}` when the list
    does not hold it), else from the table; None when neither knows the model."""
    status, entries, _ = await list_entries(transport, base_url, headers, timeout)
    entry = next((e for e in entries if e["id"] == model), None)
    if entry is None and status == 200 and probeable_model_name(model):
        url = f"{base_url.rstrip('/')}/models/{quote(model, safe='')}"
        try:
            async with asyncio.timeout(timeout):
                one, body, _ = await fetch_json_or_why(transport, url, headers, timeout)
        except TimeoutError:
            one, body = 0, None
        if one == 200 and isinstance(body, dict) and body.get("id") == model:
            entry = body
    facts = facts_of_entry(entry) if entry is not None else claude_facts(model)
    return await with_server_window(facts, transport, base_url, headers, model, timeout)


async def with_server_window(
    facts: ModelFacts | None,
    transport: Transport,
    base_url: str,
    headers: Mapping[str, str],
    model: str,
    timeout: float,
) -> ModelFacts | None:
    """`facts` with the window the server publishes for `model` where they hold none (a local
    server: Anthropic's own list always says). Unchanged when the server publishes none."""
    if facts is not None and facts.window is not None:
        return facts
    window = await probe_context_window(transport, base_url, headers, model, timeout)
    if window is None:
        return facts
    return (
        ModelFacts(window, reasoning=False, images=False) if facts is None else replace(facts, window=window)
    )
