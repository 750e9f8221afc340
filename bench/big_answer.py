"""Peak memory of the gateway for one very large answer (default 50 MB of text).

The answer's final text appears in four `done` events (output_text.done, content_part.done,
output_item.done, response.completed); this measures what that costs. Each mode runs in its
own process so `ru_maxrss` (the peak resident set) is that mode's alone. The gateway runs
in-process as an ASGI app; the client side only counts the bytes it receives, and the
upstream sends pre-encoded chunks of random text (random, so the loop guard stays quiet), so
the numbers are the gateway's.

    uv run python bench/big_answer.py [--mb 50] [--delta-chars 1024]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

import orjson  # noqa: E402
from tests.support._exchange import ExchangeOptions  # noqa: E402
from tests.support.asgi_upstream import ASGIUpstreamTransport  # noqa: E402

from codexgate.app import build_app  # noqa: E402
from codexgate.config import load_settings  # noqa: E402


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kilobytes


class BigUpstream:
    """Streams `total` characters of text in `delta`-character chunks, then finishes."""

    def __init__(self, total: int, delta: int) -> None:
        self.total, self.delta = total, delta

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        if not scope["path"].endswith("/chat/completions"):  # context-window probes
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": b"{}"})
            return
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for _ in range(self.total // self.delta):
            delta = {"content": base64.b64encode(os.urandom(self.delta * 3 // 4)).decode()}
            chunk = b"data: " + orjson.dumps({"choices": [{"index": 0, "delta": delta}]}) + b"\n\n"
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        end = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
        await send({"type": "http.response.body", "body": end})


async def _run(stream: bool, total: int, delta: int) -> tuple[int, float]:
    settings = load_settings(
        {"upstream": "http://upstream.test/v1", "discover": False, "max_output_bytes": 2 * total},
        environ={},
    )
    transport = ASGIUpstreamTransport(BigUpstream(total, delta), options=ExchangeOptions(buffer_chunks=2))
    app = build_app(settings, transport=transport, environ={})
    body = orjson.dumps({"model": "m", "input": "hi", "stream": stream})
    received = 0
    finished = asyncio.Event()
    request_sent = False

    async def receive() -> dict[str, Any]:
        nonlocal request_sent
        if not request_sent:
            request_sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await finished.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal received
        if message["type"] == "http.response.body":
            received += len(message.get("body", b""))
            if not message.get("more_body"):
                finished.set()

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/responses",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        "query_string": b"",
    }
    started = time.perf_counter()
    await app(scope, receive, send)
    return received, time.perf_counter() - started


def _child(mode: str, total: int, delta: int) -> None:
    baseline = _rss_mb()
    received, seconds = asyncio.run(_run(mode == "stream", total, delta))
    print(
        orjson.dumps(
            {"baseline": baseline, "peak": _rss_mb(), "received": received, "seconds": seconds}
        ).decode()
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=50.0, help="size of the answer in MB (default 50)")
    parser.add_argument("--delta-chars", type=int, default=1024, help="characters per upstream delta")
    parser.add_argument("--child", choices=("stream", "json"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    total = int(args.mb * 1024 * 1024)
    if args.child:
        _child(args.child, total, args.delta_chars)
        return
    print(f"answer: {args.mb:g} MB in {args.delta_chars}-character deltas")
    print(f"{'mode':<8} {'peak RSS MB':>12} {'over baseline':>14} {'bytes sent MB':>14} {'seconds':>8}")
    for mode in ("stream", "json"):
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--mb",
                str(args.mb),
                "--delta-chars",
                str(args.delta_chars),
                "--child",
                mode,
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        r = orjson.loads(out.strip().splitlines()[-1])
        print(
            f"{mode:<8} {r['peak']:>12.0f} {r['peak'] - r['baseline']:>14.0f} "
            f"{r['received'] / 1048576:>14.1f} {r['seconds']:>8.2f}"
        )


if __name__ == "__main__":
    main()
