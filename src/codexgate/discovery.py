"""Find a local model server when none is configured (the usual default addresses), and say
what is wrong with one that does not serve models, by cause."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from codexgate.backends.server_info import fetch_json, model_entries
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


@dataclass(frozen=True, slots=True)
class ModelList:
    """What `GET {base_url}/models` gave: the HTTP status (0 when nothing answered) and ids."""

    base_url: str
    status: int
    models: list[str] = field(default_factory=list)

    @property
    def cause(self) -> str | None:
        """None when the server answers with models; else one word for what is wrong:
        unreachable, refused (a key is needed), wrong_path, error or no_models."""
        if self.status == 0:
            return "unreachable"
        if self.status in (401, 403):
            return "refused"
        if self.status in (404, 405):
            return "wrong_path"
        if self.status != 200:
            return "error"
        return None if self.models else "no_models"

    def problem(self) -> str | None:
        """What is wrong, worded by cause with the fix; None when nothing is."""
        url = f"{self.base_url}/models"
        cause = self.cause
        if cause == "unreachable":
            return (
                f"unreachable: nothing answers at {self.base_url}; is the model server running on that port?"
            )
        if cause == "refused":
            return f"refused: {url} answered {self.status}; the server wants an API key (give its variable)"
        if cause == "wrong_path":
            hint = "" if self.base_url.endswith("/v1") else f" (try {self.base_url}/v1)"
            return (
                f"wrong path: a server answers at {self.base_url} but {url} is {self.status}; the "
                f"upstream URL must be the API base, usually ending in /v1{hint}"
            )
        if cause == "error":
            return f"error: {url} answered HTTP {self.status}"
        if cause == "no_models":
            return f"no models: the server at {self.base_url} lists none; load or pull one, or name it"
        return None


async def list_models(
    transport: Transport, base_url: str, headers: Mapping[str, str] | None = None, timeout: float = 5.0
) -> ModelList:
    base = base_url.rstrip("/")
    status, body = await fetch_json(transport, base + "/models", headers or {}, timeout)
    models = [e["id"] for e in model_entries(body)] if status == 200 else []
    return ModelList(base, status, models)


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
