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

The Codex backend's side of the protocol, driven by a script (below):
- `thread/start` {..} -> also remembers the thread's params (`threads` in `state`)
- `thread/inject_items` {threadId, items} -> {} (the items are kept for `state`)
- `thread/unsubscribe` {threadId} -> {"status": "unsubscribed"}
- `turn/start` {threadId, input} -> `turn/started`, the answer {turn: {id, status}}, then the
  steps of the first scripted turn whose `match` is in the input's text (default: one agent
  message "answer <input>"). On a thread whose turn is waiting, the input is steered into it
  and that turn's id answered, as the real server does.
- `turn/interrupt` {threadId, turnId} -> {}; a turn waiting on anything completes
  "interrupted" (and a server request it waits on stays unanswered by the server's side)
- `model/list` -> {data: [{id, model, ...}]} of the script's `models` (default "fake-model")
- `wait_for` {method, count?} -> {"seen": n} once `count` (default 1) requests or
  notifications of `method` have arrived: a test waits on it, not on a sleep
- `release` {name} -> {} and the turn holding on `name` goes on
- `script` {..} -> replaces the script, {}
- `state` also gives `received` (every message the client sent: method, params), `threads`,
  `replies` (the client's answers to server requests with their method) and `injected`

A script is JSON, from the file FAKE_APP_SERVER_SCRIPT or the `script` command:
`{"turns": [{"match": "weather", "steps": [...]}, ...], "models": ["a", "b"]}`; a turn with
`"steer": "refuse"` refuses input steered into it (-32600, as a turn that cannot be steered). Steps:
- {"text": "...", "item"?: id}: an `item/agentMessage/delta` ("{answer}" is replaced by the
  text of the last answer to a server request, "{input}" by the turn's input text)
- {"reasoning": "..."}: an `item/reasoning/summaryTextDelta`
- {"notify": method, "params": {...}}: any notification (threadId and turnId filled in; with
  "scoped": false not: a process-wide one, as `thread/search/partial` of 0.171)
- {"usage": {inputTokens, ...}}: `thread/tokenUsage/updated` with that `last`
- {"tool_call": {callId, tool, arguments, namespace?}}: an `item/tool/call` server request;
  the turn waits for its answer
- {"tool_calls": [{...}, ...]}: parallel calls, written at once; the turn waits for every
  answer ("{answer}" is then their texts joined with " / ")
- {"request": method, "params": {...}}: any server request; the turn waits for its answer
- {"wait": "interrupt"}: the turn waits for `turn/interrupt`
- {"hold": name}: the turn waits for `release` {name}
- {"complete": "completed" | "failed" | "interrupted", "error"?: {...}}: `turn/completed`
  (a script without one completes "completed" after its last step)
- {"die": code, "stderr": [...]}: the process exits mid-turn

Environment: FAKE_APP_SERVER_STATE (a file counting starts), FAKE_APP_SERVER_FAIL_STARTS=N (the
first N starts write "fatal: cannot start" to stderr and exit 3 before reading anything),
FAKE_APP_SERVER_IGNORE_INITIALIZE=1 (`initialize` is never answered), FAKE_APP_SERVER_SCRIPT
(a script file, above).
Stdlib only, so it starts in a few tens of milliseconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

JSON = dict[str, Any]
# What a running turn waits on: ("answer", server request id), ("interrupt",), ("hold", name).
Wait = tuple[Any, ...]


def _count_start() -> int:
    state = os.environ.get("FAKE_APP_SERVER_STATE")
    if not state:
        return 1
    path = Path(state)
    starts = int(path.read_text() or "0") + 1 if path.exists() else 1
    path.write_text(str(starts))
    return starts


def _load_script() -> JSON:
    path = os.environ.get("FAKE_APP_SERVER_SCRIPT")
    if not path:
        return {}
    loaded: JSON = json.loads(Path(path).read_text())
    return loaded


@dataclass
class _Turn:
    """A scripted turn as it runs: a generator of steps that yields what it waits on."""

    id: str
    thread: str
    text: str
    steps: Generator[Wait, Any, None] | None = None
    waiting: Wait | None = None
    last_answer: str = ""
    steered: list[Any] = field(default_factory=list)
    steerable: bool = True
    replies: dict[int, str] = field(default_factory=dict)  # server request id -> its answer's text


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
        self.script: JSON = _load_script()
        self.received: list[JSON] = []  # every message from the client: method, params
        self.thread_params: dict[str, JSON] = {}
        self.injected: dict[str, list[Any]] = {}
        self.replies: list[JSON] = []  # the client's answers to server requests, with their method
        self.server_methods: dict[int, str] = {}  # server request id -> its method
        self.running: dict[str, _Turn] = {}  # thread id -> its turn, while it runs or waits
        self.turns = 0
        self.waiters: list[tuple[Any, str, int]] = []  # (request id, method, count) of `wait_for`

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
            self.replies.append({"method": self.server_methods.get(request_id), **reply})
            if original is not None:
                self.result(original, {"answer": reply})
            self.answered(request_id, reply)
            return
        self.received.append({"method": method, "params": params})
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
        self.wake_waiters()

    def do_unknown(self, request_id: Any, params: JSON) -> None:
        self.error(request_id, -32600, "Invalid request: unknown variant")

    def do_state(self, request_id: Any, params: JSON) -> None:
        state = {"pid": os.getpid(), "initialized": self.initialized, "answers": self.answers}
        state |= {"received": self.received, "threads": self.thread_params, "replies": self.replies}
        state |= {"injected": self.injected, "running": sorted(self.running)}
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
        self.thread_params[thread["id"]] = params
        self.result(request_id, {"thread": thread})
        self.notify("thread/started", {"thread": thread})

    # -- the Codex backend's side: threads, turns, scripts

    def do_thread_inject_items(self, request_id: Any, params: JSON) -> None:
        self.injected.setdefault(str(params.get("threadId")), []).extend(params.get("items") or [])
        self.result(request_id, {})

    def do_thread_unsubscribe(self, request_id: Any, params: JSON) -> None:
        self.result(request_id, {"status": "unsubscribed"})

    def do_model_list(self, request_id: Any, params: JSON) -> None:
        models = self.script.get("models") or ["fake-model"]
        data = [{"id": m, "model": m, "displayName": m, "hidden": False, "isDefault": i == 0}
                for i, m in enumerate(models)]  # fmt: skip
        self.result(request_id, {"data": data, "nextCursor": None})

    def do_script(self, request_id: Any, params: JSON) -> None:
        self.script = params
        self.result(request_id, {})

    def do_wait_for(self, request_id: Any, params: JSON) -> None:
        self.waiters.append((request_id, str(params["method"]), int(params.get("count", 1))))

    def wake_waiters(self) -> None:
        for waiter in list(self.waiters):
            request_id, method, count = waiter
            seen = sum(1 for m in self.received if m["method"] == method)
            if seen >= count:
                self.waiters.remove(waiter)
                self.result(request_id, {"seen": seen})

    def do_release(self, request_id: Any, params: JSON) -> None:
        self.result(request_id, {})
        for turn in list(self.running.values()):
            if turn.waiting == ("hold", params.get("name")):
                self.resume(turn, None)

    def do_turn_start(self, request_id: Any, params: JSON) -> None:
        thread_id = str(params.get("threadId"))
        inputs = params.get("input") or []
        running = self.running.get(thread_id)
        if running is not None and not running.steerable:
            self.error(request_id, -32600, "activeTurnNotSteerable")
            return
        if running is not None:  # steered into the waiting turn
            running.steered.extend(inputs)
            self.result(request_id, {"turn": {"id": running.id, "status": "inProgress", "items": []}})
            return
        self.turns += 1
        text = " ".join(
            str(i.get("text", "")) for i in inputs if isinstance(i, dict) and i.get("type") == "text"
        )
        turn = _Turn(f"turn-{self.turns}", thread_id, text)
        info = {"id": turn.id, "status": "inProgress", "items": []}
        self.notify("turn/started", {"threadId": thread_id, "turn": info})
        self.result(request_id, {"turn": info})
        self.running[thread_id] = turn
        scripted = self.turn_for(text)
        turn.steerable = scripted.get("steer", "accept") != "refuse"
        turn.steps = self.run_steps(turn, list(scripted.get("steps") or []))
        self.resume(turn, None)

    def do_turn_interrupt(self, request_id: Any, params: JSON) -> None:
        self.result(request_id, {})
        turn = self.running.get(str(params.get("threadId")))
        if turn is not None and turn.id == params.get("turnId") and turn.waiting is not None:
            if turn.steps is not None:
                turn.steps.close()
            self.complete(turn, "interrupted")

    def turn_for(self, text: str) -> JSON:
        for scripted in self.script.get("turns") or ():
            if scripted.get("match", "") in text:
                return dict(scripted)
        return {"steps": [{"text": "answer " + text}]}

    def answered(self, server_id: Any, reply: JSON) -> None:
        items = (reply.get("result") or {}).get("contentItems") or []
        text = "".join(str(i.get("text", "")) for i in items if isinstance(i, dict)) or json.dumps(reply)
        for turn in list(self.running.values()):
            turn.replies[server_id] = text
            if turn.waiting == ("answer", server_id):
                turn.last_answer = text
                self.resume(turn, reply)

    def resume(self, turn: _Turn, value: Any) -> None:
        """Run `turn` until it waits again or ends."""
        assert turn.steps is not None
        turn.waiting = None
        try:
            turn.waiting = turn.steps.send(value) if value is not None else next(turn.steps)
        except StopIteration:
            if self.running.get(turn.thread) is turn:  # no `complete` step: it completes
                self.complete(turn, "completed")

    def complete(self, turn: _Turn, status: str, error: Any = None) -> None:
        turn.waiting = None
        if self.running.get(turn.thread) is turn:
            del self.running[turn.thread]
        info = {"id": turn.id, "status": status, "items": [], "error": error}
        self.notify("turn/completed", {"threadId": turn.thread, "turn": info})

    def server_request(self, method: str, params: JSON) -> int:
        return self.server_requests([(method, params)])[0]

    def server_requests(self, requests: list[tuple[str, JSON]]) -> list[int]:
        """Server requests written at once (one write: they reach the client together)."""
        ids, lines = [], []
        for method, params in requests:
            server_id = self.next_server_id
            self.next_server_id += 1
            self.server_methods[server_id] = method
            ids.append(server_id)
            lines.append(json.dumps({"id": server_id, "method": method, "params": params}) + "\n")
        sys.stdout.write("".join(lines))
        sys.stdout.flush()
        return ids

    def run_steps(self, turn: _Turn, steps: list[JSON]) -> Generator[Wait, Any, None]:
        scope = {"threadId": turn.thread, "turnId": turn.id}
        for k, step in enumerate(steps):
            if "text" in step:
                text = str(step["text"]).replace("{answer}", turn.last_answer).replace("{input}", turn.text)
                item = step.get("item", f"msg-{turn.id}")
                self.notify("item/agentMessage/delta", {**scope, "itemId": item, "delta": text})
            elif "reasoning" in step:
                delta = {**scope, "itemId": f"rs-{turn.id}", "delta": step["reasoning"], "summaryIndex": 0}
                self.notify("item/reasoning/summaryTextDelta", delta)
            elif "notify" in step:
                where = scope if step.get("scoped", True) else {}
                self.notify(step["notify"], {**where, **(step.get("params") or {})})
            elif "usage" in step:
                self.notify("thread/tokenUsage/updated", {**scope, "tokenUsage": {"last": step["usage"]}})
            elif "tool_call" in step:
                call = {"callId": f"call-{turn.id}-{k}", "namespace": None, "arguments": {}}
                call |= step["tool_call"]
                yield ("answer", self.server_request("item/tool/call", {**scope, **call}))
            elif "tool_calls" in step:  # parallel calls: asked together, each waited for
                calls = [{"callId": f"call-{turn.id}-{k}-{n}", "namespace": None, "arguments": {}} | call
                         for n, call in enumerate(step["tool_calls"])]  # fmt: skip
                ids = self.server_requests([("item/tool/call", {**scope, **call}) for call in calls])
                for server_id in ids:
                    if server_id not in turn.replies:
                        yield ("answer", server_id)
                turn.last_answer = " / ".join(turn.replies[server_id] for server_id in ids)
            elif "request" in step:
                params = {**scope, "itemId": f"item-{turn.id}-{k}", **(step.get("params") or {})}
                yield ("answer", self.server_request(step["request"], params))
            elif step.get("wait") == "interrupt":
                yield ("interrupt",)
            elif "hold" in step:
                yield ("hold", step["hold"])
            elif "complete" in step:
                self.complete(turn, step["complete"], step.get("error"))
                return
            elif "die" in step:
                for line in step.get("stderr") or []:
                    sys.stderr.write(line + "\n")
                sys.stderr.flush()
                sys.stdout.flush()
                os._exit(int(step["die"]))

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
