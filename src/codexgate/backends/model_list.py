"""Whether an upstream serves models: `GET {base}/models`, and what is wrong when it does not,
worded by cause (for doctor, codex-setup and /healthz)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from codexgate.backends.http.transport import Transport
from codexgate.backends.server_info import fetch_json_or_why, model_entries


@dataclass(frozen=True, slots=True)
class ModelList:
    """What `GET {base_url}/models` gave: the HTTP status (0 when nothing answered) and ids."""

    base_url: str
    status: int
    models: list[str] = field(default_factory=list)
    detail: str | None = None  # what went wrong, when the upstream is not an HTTP server
    # Why nothing answered, in words that follow the server's name ("refused the connection:
    # nothing is listening on 127.0.0.1:8000"); None: not known.
    reason: str | None = None
    # When it was asked (time.monotonic()): a pool's health board weighs it against what the
    # member did since (routing/health.py), as a listing may be cached for a few seconds.
    checked_at: float = field(default_factory=time.monotonic, compare=False)

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
        if cause is not None and self.detail:
            return f"{cause}: {self.detail}"
        if cause == "unreachable":
            reason = self.reason or ""
            why = f" (it {reason})" if reason else ""
            # Nothing listening, or no reason known: the usual cause is a server not started.
            running = not reason or reason.startswith("refused")
            hint = "; is the model server running on that port?" if running else ""
            return f"unreachable: nothing answers at {self.base_url}{why}{hint}"
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
    status, body, reason = await fetch_json_or_why(transport, base + "/models", headers or {}, timeout)
    models = [e["id"] for e in model_entries(body)] if status == 200 else []
    return ModelList(base, status, models, reason=reason)


class CachedListing:
    """An upstream's listing, asked for again at most every `seconds` (/healthz, which monitors
    may poll often, and /v1/models)."""

    __slots__ = ("_listing", "_seconds", "_until")

    def __init__(self, seconds: float = 5.0) -> None:
        self._listing: ModelList | None = None
        self._seconds = seconds
        self._until = 0.0

    async def get(self, fetch: Callable[[], Awaitable[ModelList]]) -> ModelList:
        """The listing, from `fetch()` when the last one is older than `seconds`."""
        if self._listing is None or time.monotonic() >= self._until:
            self._listing = await fetch()
            self._until = time.monotonic() + self._seconds
        return self._listing
