"""A relay's CPU for one request, from the last byte of its body to its upstream request written.

    python bench/request_cpu.py codexgate|bare UPSTREAM_V1 [--requests N] [--cpu N]   (one JSON line out)

In this process, one request at a time: the relay's ASGI app is given the body (as uvicorn
gives it, once it is all in) and the clock starts (`time.thread_time`, this thread's CPU); it
stops at the last write of the upstream request to the socket (aiohttp's StreamWriter, and
codexgate's own HTTP/1.1 client's connection where the tree has it, patched to note it). For
codexgate, also the CPU to its transport's `open()`: its own work, without the client's. The
upstream is the bench's fake one (`UPSTREAM_V1`), which answers one text delta at once, so
nothing else runs in between.

`codexgate` is built as `codexgate serve --upstream UPSTREAM_V1 --no-discover` builds it, with
the defaults of everything else (the SQLite store under a fresh XDG_DATA_HOME, metrics, the
live view), from whichever `codexgate` is imported (PYTHONPATH); `bare` is bench/bare_relay.py.
The garbage collector is tuned as `serve` tunes it.

The requests are the three kinds bench/per_core.py runs: the 16 turns of one growing session
(47-86 KB) in order, again and again; distinct ~50 KB sessions, each seen once (nothing
remembered helps: a session's first request); and a 1 MB history one turn further each time
(what codexgate remembers of a conversation is used). Each kind runs twice (REGIMES): `busy`,
each request right after the one before, and `idle`, after the core idled 2 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH.parent), str(BENCH)]

import orjson  # noqa: E402
from aiohttp import http_writer  # noqa: E402
from workload import Scenario, codex_request, growing, growing_session  # noqa: E402

ANSWER = Scenario("text", 1, 4, 0)
_GC_THRESHOLD = 20_000  # as server/serve.py tunes it

App = Callable[..., Any]


class Clock:
    """Marks of this thread's CPU time: the body given, the transport opened, the last write."""

    def __init__(self) -> None:
        self.given = self.opened = self.written = 0.0

    def patch_writer(self) -> None:
        """Note the time each write is called, whichever client writes: aiohttp's StreamWriter,
        or (in trees that have it) codexgate's own client's connection."""
        targets: list[tuple[Any, str]] = [
            (http_writer.StreamWriter, "_write"),
            (http_writer.StreamWriter, "_writelines"),
        ]
        try:
            from codexgate.backends.http import h1
        except ImportError:  # a tree before codexgate's own client
            pass
        else:
            targets.append((h1._Connection, "write_request"))
        for owner, name in targets:
            original = getattr(owner, name)

            def noted(writer: Any, *args: Any, _original: Any = original) -> Any:
                self.written = time.thread_time()
                return _original(writer, *args)

            setattr(owner, name, noted)


def _scope(size: int) -> dict[str, Any]:
    headers = [
        (b"host", b"127.0.0.1:8080"),
        (b"content-type", b"application/json"),
        (b"accept", b"text/event-stream"),
        (b"authorization", b"Bearer bench"),
        (b"content-length", str(size).encode()),
    ]
    return {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
        "method": "POST", "scheme": "http", "path": "/v1/responses", "raw_path": b"/v1/responses",
        "root_path": "", "query_string": b"", "headers": headers, "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080), "state": {},
    }  # fmt: skip


async def one_request(app: App, body: bytes, clock: Clock) -> bool:
    """Serve one request in this process; whether it completed."""
    done = asyncio.Event()
    given = False
    out: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal given
        if not given:
            given = True
            fresh = bytes(bytearray(body))  # just in from the socket, as uvicorn gives it: in cache
            clock.given = time.thread_time()
            return {"type": "http.request", "body": fresh, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            out.append(message.get("body", b""))
            if not message.get("more_body"):
                done.set()

    await app(_scope(len(body)), receive, send)
    done.set()
    return b"response.completed" in b"".join(out)


async def lifespan(app: App) -> Callable[[], Any]:
    """Start the app; the coroutine that stops it."""
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    task = asyncio.create_task(app({"type": "lifespan", "asgi": {"version": "3.0"}}, inbox.get, outbox.put))
    await inbox.put({"type": "lifespan.startup"})
    started = await outbox.get()
    if started["type"] != "lifespan.startup.complete":
        raise RuntimeError(f"the app did not start: {started}")

    async def stop() -> None:
        await inbox.put({"type": "lifespan.shutdown"})
        await outbox.get()
        await task

    return stop


def codexgate_app(upstream_v1: str, clock: Clock) -> App:
    from codexgate.app import build_app
    from codexgate.cli import _settings_from, build_parser

    try:  # the gateway's default transport: aiohttp's alone before codexgate's own client
        from codexgate.backends.http.h1 import DefaultTransport as Default
    except ImportError:
        try:  # the tree's transport module moved (backends/transport.py before 0c3f...)
            from codexgate.backends.http.transport import AiohttpTransport as Default  # type: ignore[assignment]
        except ImportError:
            from codexgate.backends.transport import AiohttpTransport as Default  # type: ignore[no-redef]

    class Noted(Default):  # type: ignore[misc, valid-type]
        async def open(self, *args: Any, **kwargs: Any) -> Any:
            clock.opened = time.thread_time()
            return await super().open(*args, **kwargs)

    args = build_parser().parse_args(["serve", "--upstream", upstream_v1, "--no-discover"])
    return build_app(_settings_from(args), transport=Noted())  # type: ignore[no-any-return]


def bare_app(upstream_v1: str) -> App:
    from bare_relay import BareRelay

    return BareRelay(upstream_v1)


def bodies(kind: str, count: int, tag: str = "") -> list[bytes]:
    """`count` requests of `kind`; `tag` names the distinct sessions (each run its own, so
    that every request is its session's first)."""
    model = ANSWER.model
    if kind == "growing":
        session = growing_session(ANSWER)
        return [session[i % len(session)] for i in range(count)]
    if kind == "distinct":
        out = []
        for i in range(count):
            req = codex_request(ANSWER, history_bytes=50_000, seed=1000 + i)
            req["prompt_cache_key"] = f"bench-request-{tag}{i:04d}"
            out.append(orjson.dumps(req))
        return out
    big = orjson.dumps({**codex_request(ANSWER, history_bytes=1_000_000, seed=7), "model": model})
    return growing(big, count)


# The two ways a request meets the core: right after the one before (a busy gateway: the
# code and its data still in the caches), or after the core idled 2 ms (a quiet one: on this
# VM the same Python code then costs 2-4x, a cost every relay pays, the floor too).
REGIMES = {"busy": 0.0, "idle": 0.002}


async def measure(relay: str, upstream_v1: str, count: int) -> dict[str, Any]:
    clock = Clock()
    clock.patch_writer()
    app = codexgate_app(upstream_v1, clock) if relay == "codexgate" else bare_app(upstream_v1)
    stop = await lifespan(app)
    gc.collect()
    gc.freeze()
    gc.set_threshold(_GC_THRESHOLD, *gc.get_threshold()[1:])
    out: dict[str, Any] = {}
    try:
        for kind, n in (("growing", count), ("distinct", count // 2), ("1MB", max(8, count // 10))):
            for regime, gap in REGIMES.items():
                out[f"{kind}_{regime}"] = await _run(app, clock, relay, bodies(kind, n + 8, regime), gap)
    finally:
        await stop()
    return out


async def _run(app: App, clock: Clock, relay: str, sent: list[bytes], gap: float) -> dict[str, Any]:
    written: list[float] = []
    opened: list[float] = []
    failed = 0
    for i, body in enumerate(sent):
        clock.opened = clock.written = 0.0
        ok = await one_request(app, body, clock)
        # What the request left to do runs now, not in the next one's time.
        await asyncio.sleep(gap)
        failed += not ok
        if i >= 8:  # the first ones warm the code and the connection
            written.append((clock.written - clock.given) * 1e6)
            opened.append((clock.opened - clock.given) * 1e6)
    return {
        "requests": len(written),
        "failed": failed,
        "bytes": statistics.median(len(b) for b in sent),
        "written_us_p50": statistics.median(written),
        "written_us_mean": statistics.fmean(written),
        "opened_us_p50": statistics.median(opened) if relay == "codexgate" else None,
        "opened_us_mean": statistics.fmean(opened) if relay == "codexgate" else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("relay", choices=("codexgate", "bare"))
    parser.add_argument("upstream", help="the fake upstream's /v1 base URL")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--cpu", type=int, help="run on this CPU alone")
    args = parser.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    import uvloop

    with tempfile.TemporaryDirectory(prefix="request-cpu-") as home:
        os.environ["XDG_DATA_HOME"] = home  # the default store's folder
        result = uvloop.run(measure(args.relay, args.upstream, args.requests))
    print(orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
