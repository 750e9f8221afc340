"""Each face's CPU for one request, from its body given to the gateway to its first text delta.

    python bench/face_request_cpu.py UPSTREAM_V1 [--requests N] [--cpu N]   (one JSON line out)

What a face adds to the first token, measured as CPU rather than as time (bench/faces.py's
`latency` measures the time, which on a shared machine moves by more than the 0.2 ms the
issue's target allows). In this process, one request at a time, the faces alternated request
by request: codexgate's ASGI app (built as `codexgate serve --upstream UPSTREAM_V1
--no-discover` builds it, its defaults otherwise, as bench/request_cpu.py does) is given the
body and the clock starts (`time.thread_time`, this thread's CPU); it is read at the upstream
request's last write ("to upstream") and when the first text delta is handed to the server to
send ("to first token"); the thread's waits for the upstream are not counted. The requests are
the turns of one growing session (bench/face_workload.py, 44-90 KB) in both dialects, in order,
again and again, each answered by the fake upstream with 200 deltas at once. Two regimes, as in
bench/request_cpu.py: `busy`, each request right after the one before, and `idle`, after the
core idled 2 ms (on this VM the same code then costs 2-4 times as much).
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
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH.parent), str(BENCH)]

import orjson  # noqa: E402
from face_workload import FACES, MESSAGES, headers_for  # noqa: E402
from face_workload import growing_session as face_session  # noqa: E402
from request_cpu import _GC_THRESHOLD, REGIMES, Clock, codexgate_app, lifespan  # noqa: E402
from workload import AT_ONCE, Scenario  # noqa: E402

ANSWER = Scenario("text", 200, 4, AT_ONCE)
_FIRST = {"responses": b"event: response.output_text.delta\n", MESSAGES: b'"delta":{"type":"text_delta"'}
_END = {"responses": b"event: response.completed\n", MESSAGES: b"event: message_stop\n"}


def _scope(face: str, size: int) -> dict[str, Any]:
    headers = [
        (b"host", b"127.0.0.1:8080"),
        (b"content-type", b"application/json"),
        (b"accept", b"text/event-stream"),
        (b"authorization", b"Bearer bench"),
        (b"content-length", str(size).encode()),
    ]
    headers += [
        (name.encode(), value.encode()) for name, value in headers_for(face, "bench-one-session").items()
    ]
    path = f"/v1/{face}"
    return {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
        "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "",
        "query_string": b"", "headers": headers, "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080), "state": {},
    }  # fmt: skip


async def one_request(app: Any, face: str, body: bytes, clock: Clock) -> tuple[bool, float]:
    """Serve one request in this process: whether it completed, and the thread's CPU when its
    first text delta was handed over."""
    done = asyncio.Event()
    given = False
    out: list[bytes] = []
    first = 0.0

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
        nonlocal first
        if message["type"] == "http.response.body":
            chunk = message.get("body", b"")
            if not first and _FIRST[face] in chunk:
                first = time.thread_time()
            out.append(chunk)
            if not message.get("more_body"):
                done.set()

    await app(_scope(face, len(body)), receive, send)
    done.set()
    return _END[face] in b"".join(out), first


async def measure(upstream_v1: str, count: int) -> dict[str, Any]:
    clock = Clock()
    clock.patch_writer()
    app = codexgate_app(upstream_v1, clock)
    stop = await lifespan(app)
    gc.collect()
    gc.freeze()
    gc.set_threshold(_GC_THRESHOLD, *gc.get_threshold()[1:])
    turns = face_session(ANSWER.model)
    out: dict[str, Any] = {}
    try:
        for regime, gap in REGIMES.items():
            upstream: dict[str, list[float]] = {face: [] for face in FACES}
            first: dict[str, list[float]] = {face: [] for face in FACES}
            failed = dict.fromkeys(FACES, 0)
            for n in range(count + 16):
                for face in FACES if n % 2 else FACES[::-1]:
                    clock.written = 0.0
                    ok, first_at = await one_request(app, face, turns[face][n % len(turns[face])], clock)
                    await asyncio.sleep(gap)  # what the request left to do runs now
                    failed[face] += not ok
                    if n >= 16:  # the first ones warm the code, the memories and the connection
                        upstream[face].append((clock.written - clock.given) * 1e6)
                        first[face].append((first_at - clock.given) * 1e6)
            for face in FACES:
                out[f"{face}_{regime}"] = {
                    "requests": len(first[face]),
                    "failed": failed[face],
                    "to_upstream_us_p50": statistics.median(upstream[face]),
                    "to_first_token_us_p50": statistics.median(first[face]),
                }
    finally:
        await stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("upstream", help="the fake upstream's /v1 base URL")
    parser.add_argument("--requests", type=int, default=200, help="per face and regime")
    parser.add_argument("--cpu", type=int, help="run on this CPU alone")
    args = parser.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    import uvloop

    with tempfile.TemporaryDirectory(prefix="face-request-cpu-") as home:
        os.environ["XDG_DATA_HOME"] = home  # the default store's folder
        result = uvloop.run(measure(args.upstream, args.requests))
    print(orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
