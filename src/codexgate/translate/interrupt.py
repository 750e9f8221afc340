"""Ending a running turn early, from outside its task, with a terminal event the turn writes.

When the gateway stops, the streams still open after its grace period end with
`response.failed` (`server_shutting_down`, which Codex retries). Only the turn
(translate/turn.py) can write that event well-formed, every open item closed first, so the
server does not write it: it makes an `Interrupt` for each stream it delivers and asks it to
`end(error)`. The turn is given it in its options (TurnOptions.interrupt), which its backend
takes from the request's scope (backends/scope.py); the turn's run loop runs in the delivering
task, the one the interrupt belongs to.

The turn marks the moments it waits on its upstream (`waiting`); `end()` cancels such a wait,
and the turn takes the cancellation back (`claim()`) and fails with the error. When the task
is elsewhere (writing to a slow client), nothing is cancelled: the turn raises the error
before it waits again.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable
from typing import Any, TypeVar

from codexgate.errors import GatewayError

__all__ = ["Interrupt"]

T = TypeVar("T")


class Interrupt:
    """One stream's way to be ended early. Made in, and belongs to, the task that delivers it."""

    __slots__ = ("_cancelled", "_task", "error", "waiting")

    def __init__(self) -> None:
        self.error: GatewayError | None = None  # set by end(): what the stream ends with
        self.waiting = False  # the task waits on something end() may cut short
        self._task: asyncio.Task[Any] | None = asyncio.current_task()
        self._cancelled = False  # end() cancelled the task; claim() takes it back

    def end(self, error: GatewayError) -> None:
        """Ask the stream to end now with `error` (the first call counts; later ones do nothing)."""
        if self.error is not None:
            return
        self.error = error
        if self.waiting and self._task is not None:
            self._cancelled = True
            self._task.cancel()

    def claim(self) -> GatewayError | None:
        """In the task, on a CancelledError: the error to end with when end() caused it (the
        cancellation is then taken back); None when someone else cancelled the task (the client
        left, the server gave up), and the cancellation must go on."""
        if not self._cancelled:
            return None
        self._cancelled = False
        if self._task is not None:
            self._task.uncancel()
        return self.error

    async def wait(self, awaitable: Awaitable[T]) -> T:
        """`await awaitable`, unless end() comes first. Raises the error given to end()."""
        if self.error is not None:
            if inspect.iscoroutine(awaitable):
                awaitable.close()  # never started: no "never awaited" warning
            raise self.error
        self.waiting = True
        try:
            return await awaitable
        except asyncio.CancelledError:
            error = self.claim()
            if error is None:
                raise
            raise error from None
        finally:
            self.waiting = False
