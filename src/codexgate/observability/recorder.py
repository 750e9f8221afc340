"""The transcript recorder (opt-in, setting `record_dir`): every exchange that reached a backend
is written as one JSON file, so that a user's bug report carries the turn itself and
`codexgate replay` (commands/replay/command.py) can run it again against a fixture upstream.

A file holds, with every secret the gateway knows masked (its Redactor: upstream keys, URL
passwords, inbound keys; plus the values of configured credential headers) and credential
headers left out: the canonical request (and the request as the backend got it, when the
request services expanded it), the upstream's settings, each HTTP request sent upstream (method,
path, headers, body) and its answer byte for byte (body text, with the sizes of the chunks as
they arrived), the events as delivered and the outcome. See docs/operations.md, "Transcripts".

The stream never waits for the disk: events are serialised as they pass (orjson, microseconds
a batch), the file is built, redacted and written by one writer thread fed through a bounded
queue, and a turn that finds the queue full is dropped with a warning. The upstream side is
captured by a tap on the transport (backends/http/tap.py), installed only when recording is on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import secrets
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import orjson

from codexgate import __version__
from codexgate.backends import scope
from codexgate.backends.scope import Captured, Tap
from codexgate.config import HttpUpstream, Settings
from codexgate.observability.transcript import (
    CREDENTIAL_HEADER,
    FORMAT_VERSION,
    captured_exchange,
    describe_upstream,
    guess_base_url,
    scrub,
)
from codexgate.redact import Redactor
from codexgate.server.exchange import Exchange
from codexgate.server.observe import Observer
from codexgate.server.state import Prepared
from codexgate.wire.responses_events import Event

__all__ = ["Recorder", "Retention"]

log = logging.getLogger("codexgate.recorder")

FILE_GLOB = "turn-*.json"
_QUEUE_SIZE = 32  # turns waiting for the disk; beyond, turns are dropped
_CAPTURE_LIMIT = 64 * 1024 * 1024  # upstream bytes kept per turn
_DROP_WARNING_SECONDS = 60.0
_STALE_TEMP_SECONDS = 3600.0


@dataclass(frozen=True, slots=True)
class Retention:
    max_age: float  # seconds
    max_bytes: int


class _Turn:
    """One exchange being recorded: serialised parts, filled on the event loop."""

    __slots__ = ("exchange", "tap", "token", "recorded_at", "request", "backend_request",
                 "compaction", "events", "meta", "captured")  # fmt: skip

    def __init__(self, exchange: Exchange, tap: Tap) -> None:
        self.exchange = exchange
        self.tap = tap
        self.recorded_at = time.time()
        self.request = b"null"
        self.backend_request: bytes | None = None
        self.compaction = False
        self.events: list[bytes] = []  # one JSON array per batch
        self.meta: dict[str, Any] = {}
        self.captured: list[tuple[Captured, list[bytes]]] = []


class Recorder(Observer):
    """The observer that records; `start()`/`aclose()` at the app's startup and shutdown (it
    also starts on first use, for an app run without its lifespan)."""

    def __init__(
        self,
        directory: Path,
        redactor: Redactor,
        retention: Retention,
        upstreams: Mapping[str, dict[str, Any]] | None = None,
        *,
        extra_secrets: tuple[str, ...] = (),
        prune_every: float = 600.0,
        queue_size: int = _QUEUE_SIZE,
        capture_limit: int = _CAPTURE_LIMIT,
    ) -> None:
        """`upstreams`: each upstream's settings as a replay needs them, by name
        (`describe_upstream`); `extra_secrets`: values to mask besides the Redactor's."""
        self.directory = directory
        self._redactor = redactor
        self._extra = Redactor(extra_secrets)
        self._upstreams = dict(upstreams or {})
        self._capture_limit = capture_limit
        self._turns: dict[int, _Turn] = {}
        self._writer = _Writer(directory, retention, prune_every, queue_size, self._render)

    @classmethod
    def from_settings(cls, settings: Settings, redactor: Redactor) -> Recorder | None:
        """The recorder the settings ask for; None when `record_dir` is unset."""
        if not settings.record_dir:
            return None
        upstreams = settings.all_upstreams()
        extra = tuple(
            value
            for upstream in upstreams
            if isinstance(upstream, HttpUpstream)
            for name, value in upstream.headers.items()
            if CREDENTIAL_HEADER.search(name)
        )
        retention = Retention(
            max_age=settings.record_max_age_days * 24 * 3600, max_bytes=settings.record_max_mb * 1024 * 1024
        )
        return cls(
            Path(settings.record_dir).expanduser(),
            redactor,
            retention,
            {u.name: describe_upstream(u, settings) for u in upstreams},
            extra_secrets=extra,
        )

    # -- the observer (on the event loop: cheap, never raises into the request)

    def started(self, exchange: Exchange) -> None:
        turn = _Turn(exchange, Tap(self._capture_limit))
        turn.request = _json(exchange.req)
        prepared = exchange.prepared
        if isinstance(prepared, Prepared):
            if prepared.req is not exchange.req:  # expanded: history, references, summaries
                turn.backend_request = _json(prepared.req)
            turn.compaction = prepared.compaction
        # The upstream traffic of this request is now captured (backends/http/tap.py).
        scope.current().tap = turn.tap
        self._turns[id(exchange)] = turn
        self._writer.start()

    def wants_batches(self, exchange: Exchange) -> bool:
        return id(exchange) in self._turns

    def batch(self, exchange: Exchange, events: list[Event]) -> None:
        turn = self._turns.get(id(exchange))
        if turn is not None:
            # Serialised now: the events are the stream's own objects and may change later.
            turn.events.append(orjson.dumps(events, default=str))

    def finished(self, exchange: Exchange) -> None:
        turn = self._turns.pop(id(exchange), None)
        if turn is None:
            return  # refused before it reached a backend: nothing to replay
        terminal = exchange.terminal or {}
        turn.meta = {
            "request_id": exchange.request_id,
            "face": exchange.face,
            "model": exchange.model,
            "upstream": exchange.upstream,
            "duration_ms": round((time.perf_counter() - exchange.started) * 1000),
            "outcome": {
                "status": exchange.status,
                "outcome": exchange.outcome,
                "terminal": terminal.get("type"),
                "usage": exchange.usage,
            },
        }
        # Copies of the lists the transport appends to, taken on the loop.
        turn.captured = [(captured, list(captured.chunks)) for captured in turn.tap.captured]
        self._writer.submit(turn)

    # -- lifecycle

    def start(self) -> None:
        """Start the writer, which first prunes what is past retention."""
        self._writer.start()

    async def flush(self) -> None:
        """Until every turn handed over so far is on disk."""
        await self._writer.flush()

    async def aclose(self) -> None:
        """Write what is queued and stop the writer."""
        await self._writer.aclose()

    def prune(self) -> int:
        """Remove the recordings past retention now; how many were removed."""
        return self._writer.prune()

    def lifespan(
        self, on_startup: Callable[[], Awaitable[Any]], on_shutdown: Callable[[], Awaitable[Any]]
    ) -> tuple[Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]]:
        """The app's lifespan hooks with the recorder started and stopped around them."""

        async def startup() -> None:
            await on_startup()
            self.start()

        async def shutdown() -> None:
            try:
                await on_shutdown()
            finally:
                await self.aclose()

        return startup, shutdown

    # -- the file (in the writer thread)

    def _render(self, turn: _Turn) -> bytes:
        meta = turn.meta
        name = meta.get("upstream")
        upstream = self._upstreams.get(name) if isinstance(name, str) else None
        # Found by discovery, not configured: a chat server at a URL.
        upstream = dict(upstream or {"name": name, "kind": "chat", "config": {"name": name}})
        # Where the requests went: the configured URL, else (discovered, or a server the
        # gateway runs itself) the one the requests name.
        posts = [c.url for c, _ in turn.captured if c.method == "POST"]
        base_url = (upstream.get("config") or {}).get("base_url") or guess_base_url(posts) or ""
        upstream["base_url"] = base_url or None
        notes: list[str] = []
        if upstream.get("kind") == "codex":
            notes.append(
                "codex backend: its JSON-RPC frames are not recorded; this file holds the canonical "
                "request and the events only, and cannot be replayed"
            )
        if turn.tap.captured and any(c.truncated for c in turn.tap.captured):
            notes.append(f"upstream bytes past {self._capture_limit} were not kept")
        events = [event for batch in turn.events for event in orjson.loads(batch)]
        document = {
            "version": FORMAT_VERSION,
            "gateway_version": __version__,
            "recorded_at": datetime.fromtimestamp(turn.recorded_at, UTC).isoformat(timespec="milliseconds"),
            **{key: meta.get(key) for key in ("request_id", "face", "model", "duration_ms")},
            "upstream": upstream,
            "request": orjson.loads(turn.request),
            "backend_request": orjson.loads(turn.backend_request) if turn.backend_request else None,
            "compaction": turn.compaction,
            "upstream_exchanges": [
                captured_exchange(c, chunks, base_url, self._redact) for c, chunks in turn.captured
            ],
            "events": events,
            "outcome": meta.get("outcome"),
            "notes": notes,
        }
        return orjson.dumps(scrub(document, self._redact), option=orjson.OPT_INDENT_2)

    def _redact(self, text: str) -> str:
        return self._extra.redact(self._redactor.redact(text))


def _json(value: Any) -> bytes:
    try:
        return orjson.dumps(value, default=str)
    except TypeError:  # nesting past orjson's limit: the request was refused anyway
        return b"null"


class _Writer:
    """One thread writing recordings and pruning the directory, fed by a bounded queue."""

    def __init__(
        self,
        directory: Path,
        retention: Retention,
        prune_every: float,
        queue_size: int,
        render: Callable[[_Turn], bytes],
    ) -> None:
        self._directory = directory
        self._retention = retention
        self._prune_every = prune_every
        self._render = render
        self._queue: queue.Queue[_Turn | None] = queue.Queue(queue_size)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._bytes = 0  # what the directory holds, as of the last prune plus writes since
        self._dropped = 0
        self._warned_at = float("-inf")

    def start(self) -> None:
        if self._thread is not None:
            return
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="codexgate-recorder", daemon=True)
                self._thread.start()

    def submit(self, turn: _Turn) -> None:
        self.start()
        try:
            self._queue.put_nowait(turn)
        except queue.Full:
            self._dropped += 1
            now = time.monotonic()
            if now - self._warned_at >= _DROP_WARNING_SECONDS:
                self._warned_at = now
                log.warning("recorder: the disk cannot keep up; %d turns not recorded so far", self._dropped)

    async def flush(self) -> None:
        if self._thread is not None:
            await asyncio.to_thread(self._queue.join)

    async def aclose(self) -> None:
        thread = self._thread
        if thread is None:
            return
        await asyncio.to_thread(self._queue.put, None)
        await asyncio.to_thread(thread.join)
        self._thread = None

    def _run(self) -> None:
        self._safely(self.prune)
        next_prune = time.monotonic() + self._prune_every
        while True:
            try:
                turn = self._queue.get(timeout=max(0.0, next_prune - time.monotonic()))
            except queue.Empty:
                self._safely(self.prune)
                next_prune = time.monotonic() + self._prune_every
                continue
            try:
                if turn is None:
                    return
                self._safely(partial(self._write, turn))
            finally:
                self._queue.task_done()

    @staticmethod
    def _safely(work: Callable[[], object]) -> None:
        try:
            work()
        except Exception:  # a full disk, a removed directory: the gateway goes on
            log.exception("recorder: could not write or prune recordings")

    def _write(self, turn: _Turn) -> None:
        data = self._render(turn)
        directory = self._directory
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        stamp = datetime.fromtimestamp(turn.recorded_at, UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        path = directory / f"turn-{stamp}-{secrets.token_hex(4)}.json"
        temp = path.with_name(path.name + ".tmp")
        # Private to the user: a recording holds the conversation. Written whole, then renamed,
        # so a reader (or a prune) never sees half a file.
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        os.replace(temp, path)
        self._bytes += len(data)
        if self._bytes > self._retention.max_bytes:
            self.prune()

    def prune(self) -> int:
        """Remove recordings older than the retention's age, then the oldest while the directory
        holds more than its bytes; and temporary files a crash left behind."""
        now = time.time()
        entries: list[tuple[float, int, Path]] = []
        for path in self._directory.glob(FILE_GLOB + "*"):
            with contextlib.suppress(FileNotFoundError):
                stat = path.stat()
                if path.name.endswith(".tmp"):
                    if now - stat.st_mtime > _STALE_TEMP_SECONDS:
                        path.unlink(missing_ok=True)
                    continue
                entries.append((stat.st_mtime, stat.st_size, path))
        entries.sort()
        total = sum(size for _, size, _ in entries)
        removed = 0
        for mtime, size, path in entries:
            if now - mtime <= self._retention.max_age and total <= self._retention.max_bytes:
                break
            path.unlink(missing_ok=True)
            total -= size
            removed += 1
        self._bytes = total
        if removed:
            log.info("recorder: %d recordings past their retention removed", removed)
        return removed
