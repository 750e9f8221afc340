"""A stand-in for llama.cpp's `llama-server`, for tests of the embedded model's supervision
(backends/llama_process.py) that need no build: it takes the same flags, answers `/health`,
`/v1/models` and a streamed `/v1/chat/completions` whose text names its PID (or repeats a user
message that starts with `echo:`), and logs its argv.

    fake_llama_executable(tmp_path)  -> an executable file to give as `llama_server`

Standard library only: it runs as its own process.
"""

from __future__ import annotations

import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def fake_llama_executable(directory: Path) -> Path:
    """An executable that runs this module with the arguments it is given."""
    path = directory / "llama-server"
    path.write_text(f'#!/bin/sh\nexec {sys.executable} {Path(__file__).resolve()} "$@"\n')
    path.chmod(0o755)
    return path


def _flag(argv: list[str], name: str, default: str) -> str:
    return argv[argv.index(name) + 1] if name in argv else default


class _Handler(BaseHTTPRequestHandler):
    alias = "fake"

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def _json(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._json(200, {"status": "ok"})
        elif self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": self.alias, "object": "model"}]})
        else:
            self._json(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path != "/v1/chat/completions":
            self._json(404, {"error": {"message": "not found"}})
            return
        text = f"hello from pid {os.getpid()}"
        last = (body.get("messages") or [{}])[-1].get("content")
        if isinstance(last, str) and last.startswith("echo:"):  # say what the test wants said
            text = last.removeprefix("echo:")
        if last == "max_tokens?":  # what the gateway capped the answer at
            text = str(body.get("max_tokens"))
        chunks = [
            {"choices": [{"index": 0, "delta": {"role": "assistant", "content": text}}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}},
        ]
        if not body.get("stream"):
            message = {"role": "assistant", "content": text}
            self._json(200, {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(
                b"data: " + json.dumps({"object": "chat.completion.chunk", **chunk}).encode() + b"\n\n"
            )
        self.wfile.write(b"data: [DONE]\n\n")


def main(argv: list[str]) -> None:
    print("fake llama-server argv:", json.dumps(argv), flush=True)
    _Handler.alias = _flag(argv, "--alias", "fake")
    server = ThreadingHTTPServer(
        (_flag(argv, "--host", "127.0.0.1"), int(_flag(argv, "--port", "8080"))), _Handler
    )
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
