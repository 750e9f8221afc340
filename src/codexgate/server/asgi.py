"""The ASGI vocabulary the server is written against: a connection's scope, the receive and send
callables, and an application, as the ASGI specification defines them (messages are plain
dicts whose `type` says what they are)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

__all__ = ["App", "Message", "Receive", "Scope", "Send"]

Message: TypeAlias = dict[str, Any]
Scope: TypeAlias = dict[str, Any]
Receive: TypeAlias = Callable[[], Awaitable[Message]]
Send: TypeAlias = Callable[[Message], Awaitable[None]]
App: TypeAlias = Callable[[Scope, Receive, Send], Awaitable[None]]
