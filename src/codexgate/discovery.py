"""Find a local model server when none is configured: the usual default addresses."""

from __future__ import annotations

import asyncio
import logging

from codexgate.backends.server_info import fetch_json
from codexgate.backends.transport import Transport

log = logging.getLogger("codexgate.discovery")

# (name, base URL) in the order they are tried.
LOCAL_SERVERS: tuple[tuple[str, str], ...] = (
    ("Ollama", "http://127.0.0.1:11434/v1"),
    ("LM Studio", "http://127.0.0.1:1234/v1"),
    ("llama.cpp", "http://127.0.0.1:8080/v1"),
    ("vLLM", "http://127.0.0.1:8000/v1"),
    ("SGLang", "http://127.0.0.1:30000/v1"),
)


async def _answers_models(transport: Transport, base_url: str, timeout: float) -> bool:
    status, body = await fetch_json(transport, base_url + "/models", {}, timeout)
    return status == 200 and isinstance(body, dict)


async def discover(transport: Transport, timeout: float = 0.5) -> tuple[str, str] | None:
    """The first local server that answers `GET /models`, as (name, base URL), or None.
    All candidates are probed at once so a miss costs one timeout, not five."""
    results = await asyncio.gather(*(_answers_models(transport, url, timeout) for _, url in LOCAL_SERVERS))
    for (name, url), found in zip(LOCAL_SERVERS, results, strict=True):
        if found:
            return name, url
    return None
