"""The fake Chat Completions upstream (tests/support/fake_upstream.py) as its own process.

    python bench/fake_upstream_server.py --port 18001

Served by uvicorn on uvloop + httptools, as in the tests. Replies are chosen by the request's
model name (see bench/workload.py). Extra routes for the benchmark:
`GET /bench/stats` (chat requests answered, SSE events sent, replies completed),
`GET /bench/last` (size and hash of the last chat body received, and `at`, the monotonic
clock when its last byte was in: bench/per_core.py times a relay's way to the upstream) and
`GET /bench/last-body` (that body, byte for byte: the direct client sends exactly what the
gateway sent, captured here, so the benchmark does not depend on the gateway's internals). Only
the last body is kept.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import orjson  # noqa: E402
import uvicorn  # noqa: E402
from tests.support.fake_upstream import FakeUpstream  # noqa: E402
from workload import Scenario, reply_for  # noqa: E402


class BenchUpstream:
    def __init__(self) -> None:
        self.fake = FakeUpstream(self._script)
        self.requests = 0
        self.events = 0
        self.last: dict[str, Any] = {}
        self.last_body = b""

    def _script(self, body: dict[str, Any]) -> Any:
        self.fake.requests.clear()  # keep no history
        self.requests += 1
        self.events += Scenario.parse(str(body.get("model"))).upstream_events()
        return reply_for(body)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/bench/"):
            content_type = b"application/json"
            if scope["path"] == "/bench/stats":
                data = orjson.dumps(
                    {
                        "requests": self.requests,
                        "events": self.events,
                        "completed": self.fake.completed,
                        "disconnects": self.fake.disconnects,
                        "errors": len(self.fake.errors),
                    }
                )
            elif scope["path"] == "/bench/last-body":
                data, content_type = self.last_body, b"application/octet-stream"
            else:
                data = orjson.dumps(self.last)
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-type", content_type)]}
            )
            await send({"type": "http.response.body", "body": data})
            return
        if scope["type"] == "http" and scope["path"].endswith("/chat/completions"):
            receive = await self._capture(receive)
        await self.fake(scope, receive, send)

    async def _capture(self, receive: Any) -> Any:
        """Read the whole request body, keep it, and replay it to the fake upstream."""
        chunks = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return _replay([message], receive)
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        at = time.monotonic()
        raw = b"".join(chunks)
        self.last_body = raw
        self.last = {"bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest(), "at": at}
        return _replay([{"type": "http.request", "body": raw, "more_body": False}], receive)


def _replay(messages: list[dict[str, Any]], receive: Any) -> Any:
    async def replayed() -> Any:
        return messages.pop(0) if messages else await receive()

    return replayed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(
        BenchUpstream(),
        host=args.host,
        port=args.port,
        loop="uvloop",
        http="httptools",
        ws="none",
        lifespan="on",
        log_level="warning",
        access_log=False,
        timeout_keep_alive=300,
        backlog=4096,
    )


if __name__ == "__main__":
    main()
