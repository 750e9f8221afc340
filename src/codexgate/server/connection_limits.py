"""Connection limits uvicorn's httptools protocol does not have.

uvicorn bounds neither how long a request head may take to arrive (a client that connects and
sends nothing, or one header byte every few seconds, holds its connection forever) nor how
large it may be (16 MB of headers, or 100,000 of them, are parsed and handed to the app), and
its `limit_concurrency` counts idle keep-alive connections against requests, so 1,000 idle
connections make every new request a 503. `limited_protocol` returns a subclass of
`HttpToolsProtocol` that adds:

- a head timeout: the request line and headers must arrive within `header_timeout` seconds of
  the connection opening or the request starting (408, then closed; a connection that sent
  nothing is just closed);
- a head size limit: more than `max_header_bytes` or `MAX_HEADERS` headers is a 431, closed;
- a connection cap: past `max_connections` the longest-idle connection is closed to make
  room, and when none is idle the new one gets a 503 and is closed;
- an idle cap: at most `max_idle_connections` keep-alive connections wait between requests;
  past that, the one idle longest is closed. A new connection that has not sent its first
  request yet is not idle in this sense (the head timeout bounds it): counting it made a burst
  of 500 clients connecting at once lose half of them before they could speak.

A connection with a request in flight (a Codex stream of many minutes) is never touched.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, ClassVar

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_HEADERS = 128  # Codex sends about 15; Apache's default limit is 100


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    header_timeout: float = 10.0
    max_header_bytes: int = 64 * 1024
    max_headers: int = MAX_HEADERS
    max_connections: int = 1000
    max_idle_connections: int = 256


def _response(status: int, reason: str, code: str | None, message: str, extra: bytes = b"") -> bytes:
    """A complete HTTP/1.1 response that closes the connection."""
    body = b""
    if code is not None:
        error = {"message": message, "type": "invalid_request_error", "param": None, "code": code}
        if status >= 500:
            error["type"] = "server_error"
        body = orjson.dumps({"error": error})
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n"
    ).encode()
    return head + extra + b"\r\n" + body


class _IdleConnections:
    """Connections with no request in flight, oldest first."""

    def __init__(self) -> None:
        self._idle: OrderedDict[int, Any] = OrderedDict()

    def add(self, protocol: Any) -> None:
        self._idle[id(protocol)] = protocol
        self._idle.move_to_end(id(protocol))

    def discard(self, protocol: Any) -> None:
        self._idle.pop(id(protocol), None)

    def __len__(self) -> int:
        return len(self._idle)

    def close_oldest(self, spare: Any) -> bool:
        """Close the longest-idle connection other than `spare`; False when there is none."""
        for key, protocol in self._idle.items():
            if protocol is not spare:
                del self._idle[key]
                protocol.transport.close()
                return True
        return False


def _too_many_connections(limits: ConnectionLimits) -> bytes:
    return _response(
        503,
        "Service Unavailable",
        "too_many_connections",
        f"The gateway is serving its limit of {limits.max_connections} connections.",
        b"retry-after: 1\r\n",
    )


def _head_too_large(limits: ConnectionLimits) -> bytes:
    return _response(
        431,
        "Request Header Fields Too Large",
        "request_header_fields_too_large",
        f"The request head is over {limits.max_header_bytes} bytes or {limits.max_headers} headers.",
    )


def _head_too_slow(limits: ConnectionLimits) -> bytes:
    return _response(
        408,
        "Request Timeout",
        "request_timeout",
        f"The request head did not arrive within {limits.header_timeout:g} seconds.",
    )


class _LimitedProtocol(HttpToolsProtocol):
    """HttpToolsProtocol with `ConnectionLimits`. Not used as it is: `limited_protocol` makes
    the class of one server, which holds its limits, its idle connections and the check of a
    head's size."""

    _limits: ClassVar[ConnectionLimits]
    _idle: ClassVar[_IdleConnections]  # shared by the connections of one server
    _head_timer: asyncio.TimerHandle | None = None
    _in_head = False  # a request head has started and is not complete
    _head_bytes = 0  # parsed: request line and headers
    _head_raw = 0  # bytes received while the head was incomplete
    _head_count = 0
    _refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()
        if len(self.connections) > self._limits.max_connections and not self._idle.close_oldest(spare=self):
            self._refuse(_too_many_connections(self._limits))

    def connection_lost(self, exc: Exception | None) -> None:
        self._idle.discard(self)
        self._disarm_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        super().data_received(data)
        if self._refused or self.transport.is_closing():
            return
        if self._in_head:
            # A head still incomplete after this chunk: count the raw bytes, so that a
            # header line that never ends is caught before the parser calls back.
            self._head_raw += len(data)
            self._check_head_size()

    # -- parser callbacks

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._idle.discard(self)
        self._in_head = True
        self._head_bytes = self._head_raw = self._head_count = 0
        if self._head_timer is None:
            self._arm_head_timer()

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        self._head_bytes += len(url)
        self._check_head_size()

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._refused:
            return
        super().on_header(name, value)
        self._head_bytes += len(name) + len(value) + 4
        self._head_count += 1
        self._check_head_size()

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._disarm_head_timer()
        if self._refused:
            return
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if not self._refused:
            super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and not self.pipeline:
            idle = self._idle
            idle.add(self)
            while len(idle) > self._limits.max_idle_connections and idle.close_oldest(spare=self):
                pass

    # -- limits

    def _check_head_size(self) -> None:
        """Refuses a head over the limits (431). Made by `limited_protocol`: it runs for every
        header, and reads the limits fastest from a closure."""
        raise NotImplementedError

    def _arm_head_timer(self) -> None:
        self._disarm_head_timer()
        self._head_timer = self.loop.call_later(self._limits.header_timeout, self._head_timed_out)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.cycle is not None and not self.cycle.response_complete:
            # A pipelined head while an earlier request is still answered: wait for it.
            self._arm_head_timer()
            return
        # A head begun and not complete: 408; connected and sent nothing: just closed.
        self._refuse(_head_too_slow(self._limits) if self._in_head else b"")

    def _refuse(self, response: bytes) -> None:
        """Answer (if `response`) and close; nothing more from this connection is parsed."""
        self._refused = True
        self._disarm_head_timer()
        self._idle.discard(self)
        if not self.transport.is_closing():
            if response:
                self.transport.write(response)
            self.transport.close()


def limited_protocol(limits: ConnectionLimits) -> type[HttpToolsProtocol]:
    """An HttpToolsProtocol class enforcing `limits`. The class holds the idle set shared by
    the connections of one server, so build one class per server."""
    max_header_bytes, max_headers = limits.max_header_bytes, limits.max_headers

    class LimitedHttpToolsProtocol(_LimitedProtocol):
        _limits = limits
        _idle = _IdleConnections()

        def _check_head_size(self) -> None:
            if self._refused:
                return
            size = max(self._head_bytes, self._head_raw)
            if size > max_header_bytes or self._head_count > max_headers:
                self._refuse(_head_too_large(limits))

    return LimitedHttpToolsProtocol
