"""One structured log line per request, for operators: what was asked, where it went, how it
ended, how many tokens and how long (logger `codexgate.access`, logfmt: key=value pairs that
both people and log tools read)."""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger("codexgate.access")

_UNSAFE = re.compile(r"[^A-Za-z0-9._:/@+-]")
_MAX_VALUE = 80  # client-chosen strings (model names, request ids) are cut to this

# This process's worker number under `serve --workers N` (server/workers.py), read at its first
# access line rather than from os.environ at every one. A worker is forked and given its number
# after this module was imported, so a forked child reads it again.
_worker: list[str | None] = []
os.register_at_fork(after_in_child=_worker.clear)


def _worker_id() -> str | None:
    if not _worker:
        _worker.append(os.environ.get("CODEXGATE_WORKER"))
    return _worker[0]


def answered_headers(where: tuple[str, str]) -> list[tuple[bytes, bytes]]:
    """The headers that say which route and upstream answered a pooled request (the `model`
    the client sees stays the one it asked for)."""
    route, upstream = where
    return [(b"x-codexgate-route", route.encode()), (b"x-codexgate-upstream", upstream.encode())]


class Exchange:
    """What one request to a face did, filled in as it runs; `line()` at the end.

    `complete` says the HTTP response is finished: after that, `http.disconnect` is the
    normal end of the exchange (ASGI servers send it then), not the client leaving."""

    __slots__ = (
        "complete", "started", "request_id", "face", "model", "upstream", "status", "outcome",
        "first_output", "usage", "response_id", "req", "terminal", "watch", "wall_start", "caller",
        "prepared", "error_message", "route", "at_end",
    )  # fmt: skip

    def __init__(self, request_id: str | None = None, face: str | None = None) -> None:
        self.complete = False
        self.started = time.perf_counter()
        self.request_id = request_id
        # Which API the client spoke, and how: responses, responses-ws (over a WebSocket), chat,
        # compact, messages (the usage ledger folds responses-ws into responses: server/keys/usage.py).
        self.face = face
        self.model: str | None = None
        self.upstream: str | None = None
        self.status: int | None = None  # the HTTP status sent
        self.outcome: str | None = None  # the terminal event, or the error code
        self.first_output: float | None = None  # perf_counter of the first model output
        self.usage: dict[str, Any] | None = None
        self.response_id: str | None = None
        self.wall_start = time.time()
        # For observers (server/observe.py): the canonical request once read (until `started`
        # has seen it: then it is dropped, so a long stream does not hold its whole history),
        # the terminal event once sent, and what sees each batch of events (None: nothing watches).
        self.req: Any = None
        self.terminal: dict[str, Any] | None = None
        self.watch: Callable[[list[dict[str, Any]]], None] | None = None
        # The request as the backend got it, with what the request services need (server/state.py
        # Prepared: history, references and summaries expanded); set for `started` only.
        self.prepared: Any = None
        # The inbound API key's name (None: no key): whose exchange it is, for the live view.
        self.caller: str | None = None
        # An HTTP error's message as raised, not yet redacted (the live view redacts it).
        self.error_message: str | None = None
        # The route that answered: the model's, or one of its fallbacks' (routing/pool.py).
        self.route: str | None = None
        # What must be done before the client reads the answer's end (`settle`).
        self.at_end: Callable[[], Awaitable[None]] | None = None

    def answered_by(self, where: tuple[str, str] | None) -> None:
        """A route's pool took the request: the route and the upstream that answer it."""
        if where is not None:
            self.route, self.upstream = where

    async def settle(self) -> None:
        """Run `at_end`, once: the key's slot freed and its usage counted (server/keys/admission.py).
        Called just before the terminal event (or error) goes out, since a client such as
        Codex sends its next request as soon as it reads it; the gateway may still be reading
        the upstream's tail then, and the request must not count against the key twice."""
        at_end, self.at_end = self.at_end, None
        if at_end is not None:
            await at_end()

    def saw_output(self) -> None:
        if self.first_output is None:
            self.first_output = time.perf_counter()

    def ended_with(self, terminal: dict[str, Any]) -> None:
        """Record the terminal event (`response.completed`, `.failed`, `.incomplete`)."""
        self.terminal = terminal
        resource = terminal.get("response") or {}
        self.response_id = resource.get("id")
        usage = resource.get("usage")
        self.usage = usage if isinstance(usage, dict) else None
        error = resource.get("error")
        kind = str(terminal.get("type", "")).removeprefix("response.")
        self.outcome = f"{kind}:{error.get('code')}" if isinstance(error, dict) else kind

    def fields(self) -> dict[str, Any]:
        """What the access line says, by key (None left out; client-chosen text cut): the
        line's pairs, and the keys of a JSON log line (server/logs.py)."""
        elapsed = time.perf_counter() - self.started
        first = self.first_output
        fields: dict[str, Any] = {
            "request_id": self.request_id,
            "face": self.face,
            "response_id": self.response_id,
            "model": self.model,
            "route": self.route,  # a pool's route (or its fallback's) that answered
            "upstream": self.upstream,
            "status": self.status,
            "outcome": self.outcome,
            "input_tokens": (self.usage or {}).get("input_tokens"),
            "output_tokens": (self.usage or {}).get("output_tokens"),
            "ttft_ms": None if first is None else round((first - self.started) * 1000),
            "duration_ms": round(elapsed * 1000),
            "worker": _worker_id(),  # under `serve --workers N`
        }
        return {
            key: value if isinstance(value, (int, float)) else str(value)[:_MAX_VALUE]
            for key, value in fields.items()
            if value is not None
        }

    def line(self, fields: dict[str, Any] | None = None) -> str:
        """The logfmt line of `fields` (default: this exchange's)."""
        fields = self.fields() if fields is None else fields
        return " ".join(f"{key}={_value(value)}" for key, value in fields.items())

    def log(self) -> None:
        if log.isEnabledFor(logging.INFO):
            fields = self.fields()
            # The fields ride on the record too: a JSON formatter makes them keys. The record
            # is made here, not by log.info(), whose walk up the stack to find its caller (the
            # line is always this one) took ~2 of the line's ~27 us.
            record = log.makeRecord(
                log.name, logging.INFO, __file__, 0, self.line(fields), (), None, "log",
                extra={"fields": fields},
            )  # fmt: skip
            log.handle(record)


def _value(value: Any) -> str:
    """A logfmt value: client-chosen text is cut and its unusual characters replaced, so that a
    hostile model name can neither forge fields nor flood the log."""
    if isinstance(value, (int, float)):
        return str(value)
    text = str(value)[:_MAX_VALUE]
    return _UNSAFE.sub("_", text) if _UNSAFE.search(text) else text
