"""The embedded model as `serve`'s fallback, when no upstream is configured and no local server
is found, and the watch for a real one that takes over (its backend: factory.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from codexgate.backends.embedded.backend import EmbeddedBackend
from codexgate.config import EmbeddedUpstream

__all__ = ["FALLBACK_NOTE", "EmbeddedFallback", "embedded_upstream"]

log = logging.getLogger("codexgate.backends.embedded.fallback")

FALLBACK_NOTE = (
    "no model server found; serving the embedded SmolLM2-135M (a tiny model for trying "
    "codexgate; point at a real one with --upstream URL)"
)


def embedded_upstream() -> EmbeddedUpstream:
    """The upstream `serve` falls back to."""
    return EmbeddedUpstream(name="embedded")


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
