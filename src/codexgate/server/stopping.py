"""The gateway's stop as its streams see it: from the moment the server begins to stop, no new
request is served (503 `server_shutting_down`, which clients retry, elsewhere behind a load
balancer); the streams already open may finish within the grace period; then each still open
ends with `response.failed` (`server_shutting_down`), written by its turn so that every open
item is closed first (translate/interrupt.py). The chat face turns that event into its error
chunk, the WebSocket sends it as a frame and then closes the connection (1001).

server/serve.py decides when: SIGTERM gives the streams `shutdown_grace` seconds, SIGINT none.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from codexgate.errors import GatewayError
from codexgate.translate.interrupt import Interrupt

__all__ = ["SHUTTING_DOWN", "Streams", "shutting_down"]

SHUTTING_DOWN = "server_shutting_down"


def shutting_down() -> GatewayError:
    """What a request gets once the gateway is stopping: a 503 (retried by Codex and the
    OpenAI SDKs) before a response started, `response.failed` with its code after."""
    return GatewayError(
        "The gateway is shutting down; retry the request.", code=SHUTTING_DOWN, status=503, retry_after=1
    )


class Streams:
    """The responses being delivered (HTTP streams and bodies, WebSocket responses), each with
    the `Interrupt` that can end it; and the connections that outlive their responses (a
    WebSocket), which close themselves once told the server is stopping."""

    def __init__(self) -> None:
        self.stopping = False
        self._open: set[Interrupt] = set()
        self._held: set[Callable[[], None]] = set()  # each held connection's wake-up
        self._hurry = False  # end the streams without waiting for the grace period
        self._changed: asyncio.Event | None = None  # made by the first wait, in its loop
        self.started = 0  # responses begun, ever (server/malloc_trim.py trims after activity)

    def __len__(self) -> int:
        return len(self._open)

    @contextmanager
    def stream(self) -> Iterator[Interrupt]:
        """Around the delivery of one response, in its task. Raises GatewayError (503) once the
        gateway is stopping: a new response would only be cut off."""
        if self.stopping:
            raise shutting_down()
        interrupt = Interrupt()
        self._open.add(interrupt)
        self.started += 1
        try:
            yield interrupt
        finally:
            self._open.discard(interrupt)
            if not self._open and not self._held:
                self._wake()

    def hold(self, wake: Callable[[], None]) -> None:
        """A connection that outlives its responses opened: the server waits for it to close as
        it waits for streams. `wake()` tells it the server is stopping (it then closes once no
        response of its own is in flight); called at once if the server already is."""
        self._held.add(wake)
        if self.stopping:
            wake()

    def release(self, wake: Callable[[], None]) -> None:
        """The connection `hold(wake)` counted closed."""
        self._held.discard(wake)
        if not self._held and not self._open:
            self._wake()

    def begin(self) -> None:
        """The server begins to stop: refuse new responses from now on, and wake the held
        connections."""
        if self.stopping:
            return
        self.stopping = True
        for wake in list(self._held):
            wake()

    def hurry(self) -> None:
        """Cut the grace period short (a second signal, SIGINT): `drained()` returns now."""
        self.begin()
        self._hurry = True
        self._wake()

    def end(self) -> None:
        """End every open stream now with `server_shutting_down`."""
        self.begin()
        error = shutting_down()
        for interrupt in list(self._open):
            interrupt.end(error)

    async def drained(self, timeout: float) -> bool:
        """The grace period: wait until no stream or held connection is open, at most `timeout`
        seconds, or until `hurry()`. True when none is."""
        return await self._until_empty(timeout, hurried=True)

    async def ended(self, timeout: float) -> bool:
        """After `end()`: wait at most `timeout` seconds for the streams to write their terminal
        event and the held connections to close. True when none is open."""
        return await self._until_empty(timeout, hurried=False)

    async def _until_empty(self, timeout: float, hurried: bool) -> bool:
        if self._changed is None:
            self._changed = asyncio.Event()
        try:
            async with asyncio.timeout(timeout):
                while (self._open or self._held) and not (hurried and self._hurry):
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            pass
        return not self._open and not self._held

    def _wake(self) -> None:
        if self._changed is not None:
            self._changed.set()
