"""Find a local model server when none is configured: the usual default addresses."""

from __future__ import annotations

import asyncio
import logging

from codexgate.backends.http.transport import Transport
from codexgate.backends.server_info import fetch_json

log = logging.getLogger("codexgate.backends.discovery")

# (name, base URL) in the order they are tried.
LOCAL_SERVERS: tuple[tuple[str, str], ...] = (
    ("Ollama", "http://127.0.0.1:11434/v1"),
    ("LM Studio", "http://127.0.0.1:1234/v1"),
    ("llama.cpp", "http://127.0.0.1:8080/v1"),
    ("vLLM", "http://127.0.0.1:8000/v1"),
    ("SGLang", "http://127.0.0.1:30000/v1"),
)


async def discover(transport: Transport, timeout: float = 0.5) -> tuple[str, str] | None:
    """The first local server that answers `GET /models`, as (name, base URL), or None.
    All candidates are probed at once so a miss costs one timeout, not five."""
    results = await asyncio.gather(
        *(fetch_json(transport, url + "/models", {}, timeout) for _, url in LOCAL_SERVERS)
    )
    for (name, url), (status, body) in zip(LOCAL_SERVERS, results, strict=True):
        if status == 200 and isinstance(body, dict):
            return name, url
    return None


def not_found_message(discovery: bool) -> str:
    """What to say when no upstream was given and none was found."""
    looked = (
        "looked at " + ", ".join(f"{n} {u}" for n, u in LOCAL_SERVERS) if discovery else "discovery is off"
    )
    return f"no upstream given and no local model server found ({looked}); pass --upstream URL"
