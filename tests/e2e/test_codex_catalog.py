"""The real Codex CLI (the current release) accepts the codexgate catalog and profile and sends
what we expect.

A tiny Responses server on loopback logs each request and answers a minimal valid SSE stream, so
these tests check Codex's side only: the tools it advertises (freeform apply_patch, no tool_search,
no web_search), its base prompt as the first developer message, no metadata-fallback warning,
and that `run_codex_exec` lets exec_command and apply_patch write inside the workdir.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.codex_cli import codex_prompt, run_codex_exec

pytestmark = pytest.mark.e2e

JSON = dict[str, Any]
Script = Callable[[JSON], JSON]  # request body -> the one output item to answer with
FINAL_TEXT = "hello from the fake server"


def message(text: str) -> JSON:
    return {
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


class FakeResponses:
    """Loopback `/v1/responses` server: records requests, answers one output item per request."""

    def __init__(self, script: Script) -> None:
        self.requests: list[JSON] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
                n = next(fake._ids)
                with fake._lock:
                    fake.requests.append({"path": self.path, "body": body})
                item = {"id": f"item_{n}", **script(body)}
                rid = f"resp_{n}"
                usage = {"input_tokens": 100, "output_tokens": 10, "total_tokens": 110}
                events = [
                    {"type": "response.created", "response": {"id": rid, "status": "in_progress"}},
                    {"type": "response.output_item.done", "output_index": 0, "item": item},
                    {
                        "type": "response.completed",
                        "response": {"id": rid, "status": "completed", "usage": usage},
                    },
                ]
                data = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)
                raw = data.encode()
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> FakeResponses:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


@pytest.fixture
def fake_answer() -> Iterator[FakeResponses]:
    with FakeResponses(lambda body: message(FINAL_TEXT)) as server:
        yield server


def test_codex_uses_catalog_profile_tools_and_base_prompt(fake_answer: FakeResponses, tmp_path: Path) -> None:
    run = run_codex_exec(
        "hi",
        base_url=fake_answer.base_url,
        model="local-model",
        workdir=tmp_path / "work",
        codex_home=tmp_path / "codex-home",
        timeout=120,
    )

    assert run.ok, run.describe()
    assert run.final_message == FINAL_TEXT
    assert "Model metadata" not in run.stdout + run.stderr, run.describe()
    assert run.errors == [], run.describe()
    assert len(fake_answer.requests) == 1
    request = fake_answer.requests[0]
    assert request["path"] == "/v1/responses"
    body = request["body"]
    assert body["model"] == "local-model"

    tools = body["tools"]
    apply_patch = [t for t in tools if t.get("name") == "apply_patch"]
    assert len(apply_patch) == 1
    assert apply_patch[0]["type"] == "custom"
    assert apply_patch[0]["format"]["type"] == "grammar"
    assert apply_patch[0]["format"]["syntax"] == "lark"
    assert "Begin Patch" in apply_patch[0]["format"]["definition"]
    kinds = {t["type"] for t in tools}
    assert "tool_search" not in kinds and "web_search" not in kinds
    names = {t.get("name") for t in tools}
    assert "exec_command" in names
    # Cut by the profile: goals, sub-agents, view_image (text-only model).
    assert names.isdisjoint({"multi_agent_v1", "get_goal", "create_goal", "view_image"}), names

    first = body["input"][0]
    assert first["type"] == "message" and first["role"] == "developer"
    assert first["content"][0]["text"] == codex_prompt()
    assert "instructions" not in body


def scripted_tool_calls(body: JSON) -> JSON:
    """exec_command, then apply_patch, then a final message: one step per request."""
    kinds = {item.get("type") for item in body["input"]}
    if "function_call_output" not in kinds:
        args = {"cmd": "echo from-exec > exec.txt && cat exec.txt"}
        return {
            "type": "function_call",
            "call_id": "call_exec",
            "name": "exec_command",
            "arguments": json.dumps(args),
            "status": "completed",
        }
    if "custom_tool_call_output" not in kinds:
        patch = "*** Begin Patch\n*** Add File: patched.txt\n+from-apply-patch\n*** End Patch"
        return {
            "type": "custom_tool_call",
            "call_id": "call_patch",
            "name": "apply_patch",
            "input": patch,
            "status": "completed",
        }
    return message("done")


def test_run_codex_exec_lets_tools_write_in_workdir(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    with FakeResponses(scripted_tool_calls) as server:
        run = run_codex_exec(
            "make two files",
            base_url=server.base_url,
            model="local-model",
            workdir=workdir,
            codex_home=tmp_path / "codex-home",
            timeout=120,
        )

    assert run.ok, run.describe()
    assert run.final_message == "done"
    [command] = run.command_executions
    assert command["exit_code"] == 0, command
    assert "from-exec" in command["aggregated_output"]
    assert (workdir / "exec.txt").read_text() == "from-exec\n"
    [change] = run.file_changes
    assert change["status"] == "completed"
    assert change["changes"] == [{"path": str(workdir / "patched.txt"), "kind": "add"}]
    assert (workdir / "patched.txt").read_text() == "from-apply-patch\n"
    assert len(server.requests) == 3
    outputs = [i for i in server.requests[1]["body"]["input"] if i["type"] == "function_call_output"]
    assert isinstance(outputs[0]["output"], str) and "from-exec" in outputs[0]["output"]
    assert run.usage is not None and run.usage["input_tokens"] == 300
