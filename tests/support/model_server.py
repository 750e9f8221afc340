"""A stand-in model server as a process of its own, for the pools' tests with real processes
(routing/): it can be killed outright, and several of them stand behind one gateway.

    python -m tests.support.model_server NAME PORT [--context-chars N] [--hang]

Every chat request is answered "from NAME" (streamed); `GET /stats` says how many chat
requests came and with which first user message, the conversation's mark in these tests (JSON:
{"chat": n, "keys": {first message: n}}). With
`--context-chars N` a request whose messages hold more than N characters is refused as llama.cpp
refuses a prompt past its window; with `--hang` it accepts connections and never answers.

    with model_server("a") as a: ... a.url ... a.stats() ... a.kill()
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.processes import free_port, stop, wait_until

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class ModelServer:
    name: str
    port: int
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/stats", timeout=5) as response:
            stats: dict[str, Any] = json.loads(response.read())
            return stats

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(10)


def _up(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=1):
            return True
    except OSError:
        return False


@contextmanager
def model_server(name: str, *args: str) -> Iterator[ModelServer]:
    """The server on a free port, once it answers; stopped (by its PID) at the end."""
    port = free_port()
    command = [sys.executable, "-m", "tests.support.model_server", name, str(port), *args]
    process = subprocess.Popen(command, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        if "--hang" not in args:
            wait_until(lambda: _up(port), 20, f"model server {name} to answer")
        yield ModelServer(name, port, process)
    finally:
        if process.poll() is None:
            stop(process)


def _app(name: str, context_chars: int | None) -> Any:
    from tests.support.fake_upstream import error_reply, openai_error, text_reply

    keys: Counter[str] = Counter()

    def reply(body: dict[str, Any]) -> Any:
        messages = body.get("messages") or []
        first = next((m.get("content") for m in messages if m.get("role") == "user"), "")
        keys[str(first)] += 1
        size = sum(len(str(m.get("content") or "")) for m in messages)
        if context_chars is not None and size > context_chars:
            message = f"the request exceeds the available context size ({size} > {context_chars})"
            return error_reply(400, openai_error(message, code="exceed_context_size_error"))
        return text_reply(f"from {name}")

    from tests.support.fake_upstream import FakeUpstream

    fake = FakeUpstream(reply, models=["m"])

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/stats":
            body = json.dumps({"chat": sum(keys.values()), "keys": dict(keys)}).encode()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": body})
            return
        await fake(scope, receive, send)

    return app


async def _hang(port: int) -> None:
    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(3600)

    server = await asyncio.start_server(never_answer, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("name")
    parser.add_argument("port", type=int)
    parser.add_argument("--context-chars", type=int)
    parser.add_argument("--hang", action="store_true")
    args = parser.parse_args()
    if args.hang:
        asyncio.run(_hang(args.port))
        return
    import uvicorn

    uvicorn.run(_app(args.name, args.context_chars), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
