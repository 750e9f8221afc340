"""A tiny stand-in for `codex app-server`, run as a subprocess by the client's tests.

    AppServer([sys.executable, FAKE_APP_SERVER], env=fake_env(tmp_path), ...)

It speaks the same stdio framing (newline-delimited JSON-RPC without "jsonrpc"), answers
`initialize` like the real server (and -32600 "Not initialized" before it), and obeys test
commands sent as requests:

- `state` -> {pid, initialized, clientInfo, capabilities, answers: [replies to its requests]}
- `echo` {..., defer?} -> {"params": ...}; with `defer: true` the answer waits for `flush`
- `flush` -> answers the deferred echoes in reverse order, then {"flushed": n}
- `thread/start` -> {"thread": {"id": "thr-N"}}, then a `thread/started` notification
- `chatter` {threads, count} -> `count` deltas per thread, round-robin, one process-wide
  `configWarning`, then {"sent": n}
- `ask` {method, params} -> sends that server request (ids from 0, as Codex does), and answers
  `ask` with {"answer": <the client's reply without its id>} once the client replied
- `die` {code, stderr} -> writes the stderr lines and exits with `code` (pending requests stay
  unanswered)
- `hang` -> never answered
- `big` {size} -> {"data": "x" * size}: one line of about `size` bytes
- `stderr_flood` {lines} -> writes that many stderr lines, then {"written": lines}
- `garbage` -> writes a line that is not JSON and one that is not an object, then {}
- `spawn_child` -> starts `sleep 300` holding its stdout and stderr, {"child": pid}
- anything else -> error -32600, as the real server answers unknown methods

Environment: FAKE_APP_SERVER_STATE (a file counting starts), FAKE_APP_SERVER_FAIL_STARTS=N (the
first N starts write "fatal: cannot start" to stderr and exit 3 before reading anything),
FAKE_APP_SERVER_IGNORE_INITIALIZE=1 (`initialize` is never answered).
Stdlib only, so it starts in a few tens of milliseconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

JSON = dict[str, Any]


def _count_start() -> int:
    state = os.environ.get("FAKE_APP_SERVER_STATE")
    if not state:
        return 1
    path = Path(state)
    starts = int(path.read_text() or "0") + 1 if path.exists() else 1
    path.write_text(str(starts))
    return starts


class FakeAppServer:
    def __init__(self) -> None:
        self.initialized = False
        self.client_info: JSON = {}
        self.capabilities: JSON = {}
        self.answers: list[JSON] = []
        self.deferred: list[tuple[Any, JSON]] = []
        self.asked: dict[int, Any] = {}  # server request id -> id of the `ask` it answers
        self.next_server_id = 0
        self.threads = 0

    def send(self, message: JSON) -> None:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()

    def result(self, request_id: Any, result: Any) -> None:
        self.send({"id": request_id, "result": result})

    def error(self, request_id: Any, code: int, message: str) -> None:
        self.send({"id": request_id, "error": {"code": code, "message": message}})

    def notify(self, method: str, params: JSON) -> None:
        self.send({"method": method, "params": params, "emittedAtMs": 1})

    def handle(self, message: JSON) -> None:
        method = message.get("method")
        request_id = message.get("id")
        params = message.get("params") or {}
        if method is None:  # the client's answer to one of our requests
            original = self.asked.pop(request_id, None)
            reply = {k: v for k, v in message.items() if k != "id"}
            self.answers.append(reply)
            if original is not None:
                self.result(original, {"answer": reply})
            return
        if request_id is None:  # a notification
            if method == "initialized":
                self.initialized = True
            return
        if method == "initialize":
            if os.environ.get("FAKE_APP_SERVER_IGNORE_INITIALIZE"):
                return
            self.client_info = params.get("clientInfo") or {}
            self.capabilities = params.get("capabilities") or {}
            result = {"userAgent": "fake/0.0", "codexHome": "/fake", "platformFamily": "unix"}
            self.result(request_id, {**result, "platformOs": "linux", "pid": os.getpid()})
            return
        if not self.initialized:
            self.error(request_id, -32600, "Not initialized")
            return
        getattr(self, "do_" + method.replace("/", "_"), self.do_unknown)(request_id, params)

    def do_unknown(self, request_id: Any, params: JSON) -> None:
        self.error(request_id, -32600, "Invalid request: unknown variant")

    def do_state(self, request_id: Any, params: JSON) -> None:
        state = {"pid": os.getpid(), "initialized": self.initialized, "answers": self.answers}
        self.result(request_id, {**state, "clientInfo": self.client_info, "capabilities": self.capabilities})

    def do_echo(self, request_id: Any, params: JSON) -> None:
        if params.get("defer"):
            self.deferred.append((request_id, params))
        else:
            self.result(request_id, {"params": params})

    def do_flush(self, request_id: Any, params: JSON) -> None:
        for deferred_id, deferred in reversed(self.deferred):
            self.result(deferred_id, {"params": deferred})
        self.result(request_id, {"flushed": len(self.deferred)})
        self.deferred.clear()

    def do_thread_start(self, request_id: Any, params: JSON) -> None:
        self.threads += 1
        thread = {"id": f"thr-{self.threads}"}
        self.result(request_id, {"thread": thread})
        self.notify("thread/started", {"thread": thread})

    def do_chatter(self, request_id: Any, params: JSON) -> None:
        threads, count = params["threads"], params["count"]
        for k in range(count):
            for thread in threads:
                delta = {"threadId": thread, "turnId": "turn-1", "itemId": "item-1", "delta": str(k)}
                self.notify("item/agentMessage/delta", delta)
        self.notify("configWarning", {"summary": "process-wide"})
        self.result(request_id, {"sent": count * len(threads)})

    def do_ask(self, request_id: Any, params: JSON) -> None:
        server_id = self.next_server_id
        self.next_server_id += 1
        self.asked[server_id] = request_id
        self.send({"id": server_id, "method": params["method"], "params": params.get("params") or {}})

    def do_die(self, request_id: Any, params: JSON) -> None:
        for line in params.get("stderr") or []:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(int(params.get("code", 1)))

    def do_hang(self, request_id: Any, params: JSON) -> None:
        pass

    def do_big(self, request_id: Any, params: JSON) -> None:
        self.result(request_id, {"data": "x" * int(params["size"])})

    def do_stderr_flood(self, request_id: Any, params: JSON) -> None:
        lines = int(params["lines"])
        for k in range(lines):
            sys.stderr.write(f"2026-01-01T00:00:00Z  WARN fake: flood line {k}\n")
        sys.stderr.flush()
        self.result(request_id, {"written": lines})

    def do_garbage(self, request_id: Any, params: JSON) -> None:
        sys.stdout.write("this is not json\n[1, 2, 3]\n")
        self.result(request_id, {})

    def do_spawn_child(self, request_id: Any, params: JSON) -> None:
        child = subprocess.Popen(["sleep", "300"])  # inherits stdout and stderr
        self.result(request_id, {"child": child.pid})


def main() -> None:
    if _count_start() <= int(os.environ.get("FAKE_APP_SERVER_FAIL_STARTS", "0")):
        sys.stderr.write("fatal: cannot start\n")
        sys.stderr.flush()
        sys.exit(3)
    server = FakeAppServer()
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        try:
            message = json.loads(line)
        except ValueError:
            continue  # as the real server: a line that is not JSON is ignored
        server.handle(message)


if __name__ == "__main__":
    main()
