"""The real Codex CLI (the current release) compacting remotely through codexgate, mid-turn.

The profile names the provider "OpenAI" (`remote_compaction=True`), the only name for which
Codex compacts remotely (codex-contract.md §6; 0.169 and 0.171 alike), and the catalog sets a low
`auto_compact_token_limit`. The scripted upstream reports a large usage for its first answer (a
tool call), so Codex compacts before its next request: it sends the history ending in a
`compaction_trigger`, the gateway asks the upstream for a handoff summary and returns it sealed
in one `compaction` item, and Codex goes on with that item in place of the history, which the
gateway expands back into the summary for the upstream. Runs over WebSockets and over HTTP.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from codexgate.commands.codex_setup.catalog import ModelSpec
from codexgate.translate.compaction import SUMMARY_PROMPT
from tests.e2e.codex_cli import run_tapped
from tests.support.fake_upstream import Reply, Usage, text_reply, tool_calls_reply

pytestmark = pytest.mark.e2e

MODEL = "local-coder"
JSON = dict[str, Any]
WINDOW = 32_768
COMPACT_AT = 20_000  # the catalog's auto_compact_token_limit
SUMMARY = "HANDOFF-7Q2: a.txt was written by a command; notes.txt must still be added with a patch."
PATCH = "*** Begin Patch\n*** Add File: notes.txt\n+after compaction\n*** End Patch"
SMALL = Usage(prompt_tokens=1_000, completion_tokens=20)
LARGE = Usage(prompt_tokens=COMPACT_AT + 2_000, completion_tokens=20)  # over the limit


def text_of(message: JSON) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


def is_summary_request(body: JSON) -> bool:
    """The gateway's summarising request ends with its prompt (which asks for a "handoff
    summary"; the expanded summary later mentions one too, so the whole prompt is compared)."""
    last = body["messages"][-1]
    return bool(last["role"] == "user" and text_of(last) == SUMMARY_PROMPT)


def script(body: JSON) -> Reply:
    """Before compaction: a command (with a usage over the limit). The summarising request: the
    summary. After it (the summary is in the history): a patch, then the answer."""
    if is_summary_request(body):
        return text_reply(SUMMARY, usage=SMALL)
    messages = body["messages"]
    with_summary = [i for i, m in enumerate(messages) if SUMMARY in text_of(m)]
    if not with_summary:
        if not any(m["role"] == "tool" for m in messages):
            call = ("exec_command", json.dumps({"cmd": "echo one > a.txt"}))
            return tool_calls_reply([call], usage=LARGE)
        return text_reply("Finished without compacting.", usage=SMALL)
    after = [m for m in messages[with_summary[-1] :] if m["role"] == "tool"]
    if not after:
        return tool_calls_reply([("apply_patch", json.dumps({"input": PATCH}))], usage=SMALL)
    return text_reply("Finished after compaction.", usage=SMALL)


@pytest.mark.parametrize("websockets", [True, False], ids=["websocket", "http"])
def test_remote_compaction_mid_turn_with_the_upstream_summary(tmp_path: Path, websockets: bool) -> None:
    spec = ModelSpec(MODEL, WINDOW, auto_compact_token_limit=COMPACT_AT)
    run, fake, traffic = run_tapped(
        tmp_path,
        script,
        "Write a.txt with a command, then add notes.txt with a patch",
        model=MODEL,
        specs=[spec],
        websockets=websockets,
        remote_compaction=True,
        timeout=120,
    )
    assert run.setup is not None and 'name = "OpenAI"' in run.setup.config_path.read_text()
    assert run.ok, run.describe()
    assert run.final_message == "Finished after compaction.", run.describe()
    work = tmp_path / "work"
    assert (work / "a.txt").read_text() == "one\n"
    assert (work / "notes.txt").read_text() == "after compaction\n"

    # The transport asked for, and nothing else.
    if websockets:
        assert traffic.http_posts == 0 and traffic.websocket_connections >= 1, traffic.requests
        assert "Falling back" not in run.stderr, run.stderr[-3000:]
    else:
        assert traffic.websocket_connections == 0 and traffic.http_posts >= 1

    # Codex sent exactly one compaction request: its last input item is the trigger.
    bodies = traffic.bodies()
    triggers = [
        i
        for i, b in enumerate(bodies)
        if b.get("input") and b["input"][-1].get("type") == "compaction_trigger"
    ]
    assert len(triggers) == 1, [[item.get("type") for item in b.get("input", [])] for b in bodies]

    # The upstream got, in order: the first turn (with tools), the summarising request (no
    # tools; the whole history, the command's output included, even when Codex sent the trigger
    # as a continuation), then turns whose history holds the summary (the compaction item
    # expanded into a user message).
    kinds = [
        "summary" if is_summary_request(r.body) else "turn" if r.body.get("tools") else "no-tools"
        for r in fake.requests
    ]
    assert kinds == ["turn", "summary", "turn", "turn"], kinds
    summarising = fake.requests[1].body
    assert not summarising.get("tools")
    assert [m["role"] for m in summarising["messages"]][-3:] == ["assistant", "tool", "user"]
    assert summarising["messages"][0]["role"] == "system"
    for request in fake.requests[2:]:
        holding = [m for m in request.body["messages"] if SUMMARY in text_of(m)]
        assert [m["role"] for m in holding] == ["user"], holding

    # Codex received one sealed compaction item and sent it back in place of the history.
    after = bodies[triggers[0] + 1]
    sealed = [item for item in after["input"] if item.get("type") in ("compaction", "compaction_summary")]
    assert len(sealed) == 1, [item.get("type") for item in after["input"]]
    assert str(sealed[0].get("encrypted_content", "")).startswith("cgz1."), sealed
    assert SUMMARY not in json.dumps(sealed)  # compressed and signed, not in clear
    assert not any(item.get("type") == "function_call" for item in after["input"])
