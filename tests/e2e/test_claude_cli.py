"""The pinned Claude Code, headless, against a recording Messages server: what it sends for a
plain answer and for a Bash call whose output returns, held against the trimmed fixtures in
tests/fixtures/claude_code/<version>/ (the ones the Messages face's tests use), so that a new
pin that changes the wire fails here first.

CODEXGATE_UPDATE_CLAUDE_FIXTURES=1 rewrites the fixtures from this run instead (after a pin
change; then read the diff, and docs/claude-code-wire.md, again)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.claude_cli import (
    CLAUDE_VERSION,
    FIXTURES,
    MessagesRecorder,
    Recorded,
    run_claude,
    shape,
    text,
    tool_use,
    trimmed_request,
)
from tests.support.servers import run_asgi_server

pytestmark = pytest.mark.e2e


def held_against_fixture(name: str, recorded: Recorded, tmp_path: Path) -> dict[str, Any]:
    """The trimmed request, checked to have the fixture's path, header names and body shape."""
    live = trimmed_request(recorded, home=tmp_path / "home", workdir=tmp_path / "work")
    path = FIXTURES / name
    if os.environ.get("CODEXGATE_UPDATE_CLAUDE_FIXTURES") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(live, indent=2, ensure_ascii=False) + "\n")
    fixture = json.loads(path.read_text())
    assert live["path"] == fixture["path"]
    assert sorted(live["headers"]) == sorted(fixture["headers"])
    assert live["headers"]["anthropic-beta"] == fixture["headers"]["anthropic-beta"]
    assert shape(live["body"]) == shape(fixture["body"])
    return live


def test_a_plain_answer_is_one_streamed_request_shaped_as_the_fixture(tmp_path: Path) -> None:
    recorder = MessagesRecorder([text("hi there")])
    with run_asgi_server(recorder) as url:
        run = run_claude(
            "say hi", base_url=url, api_key="sk-test", model="qwen-test",
            home=tmp_path / "home", workdir=tmp_path / "work",
        )  # fmt: skip
    assert run.ok, run.describe()
    assert (run.result, run.num_turns, run.stop_reason) == ("hi there", 1, "end_turn")
    assert run.usage is not None and run.usage["input_tokens"] == 10
    assert {"cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens"} <= set(run.usage)
    [request] = recorder.requests  # nothing else: no /v1/models, no count_tokens, no side request
    assert (request.method, request.path) == ("POST", "/v1/messages?beta=true")
    assert request.headers["x-api-key"] == "sk-test" and "authorization" not in request.headers
    assert request.headers["user-agent"].startswith(f"claude-cli/{CLAUDE_VERSION} ")
    assert (
        request.body is not None and request.body["model"] == "qwen-test" and request.body["stream"] is True
    )
    assert [m["role"] for m in request.body["messages"]] == ["user", "system"]
    held_against_fixture("messages_request.json", request, tmp_path)


def test_a_bash_call_runs_and_its_output_returns_as_a_tool_result(tmp_path: Path) -> None:
    recorder = MessagesRecorder(
        [tool_use("Bash", command="echo hi", description="Say hi"), text("It said hi.")]
    )
    with run_asgi_server(recorder) as url:
        run = run_claude(
            "run echo hi", base_url=url, auth_token="cgk-test", model="qwen-test", allowed_tools=["Bash"],
            home=tmp_path / "home", workdir=tmp_path / "work",
        )  # fmt: skip
    assert run.ok, run.describe()
    assert (run.result, run.num_turns) == ("It said hi.", 2)
    first, second = recorder.messages()
    assert first.headers["authorization"] == "Bearer cgk-test" and "x-api-key" not in first.headers
    assert second.body is not None
    *_, assistant, user = second.body["messages"]
    assert assistant == {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_01", "name": "Bash",
                     "input": {"command": "echo hi", "description": "Say hi"}}],
    }  # fmt: skip
    assert user["role"] == "user"
    [result] = user["content"]
    assert {k: result[k] for k in ("type", "tool_use_id", "content", "is_error")} == {
        "type": "tool_result", "tool_use_id": "toolu_01", "content": "hi", "is_error": False,
    }  # fmt: skip
    held_against_fixture("tool_result_request.json", second, tmp_path)
