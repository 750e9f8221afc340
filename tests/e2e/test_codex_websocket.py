"""The real Codex CLI (0.171 and 0.169) over codexgate's WebSocket mode (`supports_websockets = true`).

The gateway (the real app, behind a `CodexTraffic` tap) serves a scripted Chat Completions
upstream; Codex runs a tool loop: `exec_command`, then `apply_patch`, then an answer. The tap
proves Codex never fell back to HTTP and that every request after the first continued the
previous response (`previous_response_id` with only the new items), and the upstream proves the
gateway rebuilt the whole history from those continuations.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.codex_cli import codex_versions, run_tapped
from tests.support.fake_upstream import Reply, text_reply, tool_calls_reply

pytestmark = pytest.mark.e2e

MODEL = "local-coder"
JSON = dict[str, Any]
PATCH = "*** Begin Patch\n*** Add File: notes.txt\n+written over a websocket\n*** End Patch"


def tool_results(body: JSON) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def script(body: JSON) -> Reply:
    """exec_command, then apply_patch, then an answer quoting the command's output."""
    done = sum(1 for m in body["messages"] if m["role"] == "assistant")
    if done == 0:
        return tool_calls_reply([("exec_command", json.dumps({"cmd": "echo hi > a.txt && cat a.txt"}))])
    if done == 1:
        return tool_calls_reply([("apply_patch", json.dumps({"input": PATCH}))])
    first = tool_results(body)[0].strip().splitlines()
    return text_reply(f"Done; the command printed {first[-1] if first else '?'}.")


@codex_versions
def test_a_tool_loop_runs_over_one_websocket_with_continuations(tmp_path: Path, codex_version: str) -> None:
    run, fake, traffic = run_tapped(
        tmp_path,
        script,
        "Write a.txt with a command, then add notes.txt with a patch",
        model=MODEL,
        websockets=True,
        timeout=120,
        version=codex_version,
    )
    assert run.setup is not None and "supports_websockets = true" in run.setup.config_path.read_text()
    assert run.ok, run.describe()
    assert run.final_message == "Done; the command printed hi.", run.describe()
    work = tmp_path / "work"
    assert (work / "a.txt").read_text() == "hi\n"
    assert (work / "notes.txt").read_text() == "written over a websocket\n"
    assert len(run.command_executions) == 1 and "echo hi > a.txt" in run.command_executions[0]["command"]
    assert len(run.file_changes) == 1

    # Only WebSockets: no HTTP request to /v1/responses, no fallback.
    assert traffic.http_posts == 0, traffic.requests
    [(_, handshake)] = traffic.headers[:1]
    assert f"/{codex_version} " in handshake["user-agent"]  # the version under test
    assert handshake["openai-beta"] == "responses_websockets=2026-02-06"
    assert traffic.websocket_connections >= 1
    assert "Falling back" not in run.stderr, run.stderr[-3000:]
    frames = traffic.bodies("websocket")
    assert all(frame["type"] == "response.create" for frame in frames)
    generating = [f for f in frames if f.get("generate", True) is not False]
    assert len(generating) == 3 == len(fake.requests)  # a prewarm does not reach the upstream

    # Every request after the first continues the response the gateway sent just before it,
    # with only the new items: the first request's leading developer message is not resent.
    completed = [
        e["response"]["id"] for e in traffic.websocket_events if e.get("type") == "response.completed"
    ]
    assert len(completed) == len(frames)
    first_item = frames[0]["input"][0]
    for frame, previous in zip(frames[1:], completed, strict=False):
        assert frame.get("previous_response_id") == previous, frame.get("previous_response_id")
        assert first_item not in frame["input"]
    # after the first answer, a continuation carries just the tool's output
    outputs = [[item["type"] for item in frame["input"]] for frame in frames[-2:]]
    assert outputs == [["function_call_output"], ["custom_tool_call_output"]], outputs

    # The gateway rebuilt the whole conversation for the (stateless) upstream.
    last = fake.requests[-1].body["messages"]
    assert last[0]["role"] == "system"
    assert [m["role"] for m in last].count("assistant") == 2
    assert len(tool_results(fake.requests[-1].body)) == 2
    assert "hi" in tool_results(fake.requests[-1].body)[0]
