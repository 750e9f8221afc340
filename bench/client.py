"""The load generator: an aiohttp client (keep-alive pool, TCP_NODELAY) reading SSE streams with
as little parsing as possible: events are counted by their blank-line terminators, the first
text delta and the end of the stream are found by byte markers.

Two kinds of stream, read the same way:
* `gateway`: POST /v1/responses; first delta = `event: response.output_text.delta`; success =
  `event: response.completed` was received.
* `direct`: POST /chat/completions straight to the fake upstream; first delta = the first
  chunk with `"delta":{"content":"..."}` (the role chunk has `"content":""`); success = `[DONE]`.
* `messages`: POST /v1/messages (the Anthropic Messages face, bench/faces.py); first delta =
  the first `text_delta`; success = `event: message_stop`; failure = `event: error`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp

GATEWAY = "gateway"
DIRECT = "direct"
# Any Responses relay, codexgate or a peer: events found by their `data:` JSON (a peer may
# leave out the `event:` lines, which Codex does not need).
RESPONSES = "responses"
MESSAGES = "messages"

_MARKERS = {
    GATEWAY: (b"event: response.output_text.delta\n", b"event: response.completed\n"),
    DIRECT: (b'"delta":{"content":"', b"data: [DONE]"),
    RESPONSES: (b'"type":"response.output_text.delta"', b'"type":"response.completed"'),
    MESSAGES: (b'"delta":{"type":"text_delta"', b"event: message_stop\n"),
}
_CARRY = 48
_FAILED = (b"event: response.failed\n", b'"type":"response.failed"')
_FAILED_BY_KIND = {MESSAGES: (b"event: error\n",)}
_LOOP_CODE = b"model_output_loop"

# Streams that ended in response.failed because codexgate's loop guard stopped them. A bench
# answer must never look like a loop (bench/workload.py); run.py fails loudly when this is not 0.
LOOP_STOPS = 0


@dataclass(slots=True)
class StreamResult:
    ok: bool = False
    status: int = 0
    ttfb: float = 0.0  # seconds from sending to the first body byte
    first_delta: float = 0.0  # to the first text delta
    total: float = 0.0  # to the end of the body
    events: int = 0
    nbytes: int = 0
    reads: int = 0
    error: str = ""


def pct(xs: list[float], q: float) -> float:
    """The q-quantile of `xs` (linear between ranks); NaN for no values."""
    s = sorted(xs)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def new_session(limit: int = 2000) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=limit, limit_per_host=0, force_close=False, keepalive_timeout=120)
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=30),
        auto_decompress=False,
        skip_auto_headers=("User-Agent",),
    )


_HEADERS = {"content-type": "application/json", "accept": "text/event-stream"}
# A peer relay may refuse a request with no key (the gateway and the bare relay ignore it).
_KEYED = {**_HEADERS, "authorization": "Bearer bench"}


async def stream_once(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    kind: str,
    *,
    on_open: Callable[[], None] | None = None,
    on_close: Callable[[], None] | None = None,
    headers: dict[str, str] | None = None,
) -> StreamResult:
    """One streamed request read to its end; `headers`: sent beside the usual ones."""
    global LOOP_STOPS
    first_marker, end_marker = _MARKERS[kind]
    if kind == DIRECT:
        # `"delta":{"content":""` is the role chunk's shape only when content comes first; the
        # fake upstream's text chunks are `"delta":{"content":"<non-empty>"`.
        first_marker_empty = first_marker + b'"'
    else:
        first_marker_empty = b""
    failed_markers = _FAILED_BY_KIND.get(kind, _FAILED)
    sent = _KEYED if kind in (RESPONSES, MESSAGES) else _HEADERS
    if headers:
        sent = {**sent, **headers}
    res = StreamResult()
    perf = time.perf_counter
    t0 = perf()
    opened = False
    try:
        async with session.post(url, data=body, headers=sent) as resp:
            res.status = resp.status
            if on_open is not None:
                on_open()
                opened = True
            carry = b""
            prev_nl = False
            found_first = False
            found_end = False
            found_failed = False
            async for chunk in resp.content.iter_any():
                now = perf()
                if not res.reads:
                    res.ttfb = now - t0
                res.reads += 1
                res.nbytes += len(chunk)
                res.events += chunk.count(b"\n\n") + (1 if prev_nl and chunk[:1] == b"\n" else 0)
                prev_nl = chunk[-1:] == b"\n"
                if not (found_first and found_end):
                    window = carry + chunk if carry else chunk
                    if not found_failed and kind != DIRECT and any(f in window for f in failed_markers):
                        found_failed = True
                        res.error = "response.failed" if kind != MESSAGES else "event: error"
                    if found_failed and _LOOP_CODE in window and "loop" not in res.error:
                        res.error = "response.failed (model_output_loop)"
                        LOOP_STOPS += 1
                    if not found_first:
                        pos = window.find(first_marker)
                        while pos >= 0 and first_marker_empty and window.startswith(first_marker_empty, pos):
                            pos = window.find(first_marker, pos + 1)
                        if pos >= 0:
                            found_first = True
                            res.first_delta = now - t0
                    if not found_end and end_marker in window:
                        found_end = True
                    carry = window[-_CARRY:]
            res.total = perf() - t0
            res.ok = resp.status == 200 and found_end and found_first
            if not res.ok and not res.error:
                res.error = f"status {resp.status}" if resp.status != 200 else "no terminal marker"
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        res.error = f"{type(exc).__name__}: {exc}"
        res.total = perf() - t0
    finally:
        if opened and on_close is not None:
            on_close()
    return res


@dataclass
class LoadResult:
    results: list[StreamResult] = field(default_factory=list)
    wall: float = 0.0

    @property
    def ok(self) -> int:
        return sum(r.ok for r in self.results)

    @property
    def failed(self) -> int:
        return len(self.results) - self.ok

    @property
    def events(self) -> int:
        return sum(r.events for r in self.results)

    def first_error(self) -> str:
        return next((r.error for r in self.results if not r.ok), "")


async def run_load(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    kind: str,
    *,
    concurrency: int,
    max_streams: int,
    max_seconds: float,
) -> LoadResult:
    """`concurrency` workers, each running streams back to back, until `max_streams` were
    started or `max_seconds` passed (streams in flight then finish)."""
    out = LoadResult()
    started = 0
    deadline = time.perf_counter() + max_seconds

    async def worker() -> None:
        nonlocal started
        while started < max_streams and time.perf_counter() < deadline:
            started += 1
            out.results.append(await stream_once(session, url, body, kind))

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    out.wall = time.perf_counter() - t0
    return out
