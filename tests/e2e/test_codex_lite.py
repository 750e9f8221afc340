"""The real Codex CLI (the current release) with its default kind of model (Responses Lite,
code mode, multi-agent v2; codex-contract.md §12) through codexgate to a scripted Chat upstream.

The catalog entry is the bundled `gpt-6.1-sol` under a local slug, `use_responses_lite` and
`multi_agent_version` kept, so Codex sends no `tools` and no `instructions`: its tools come as
an `additional_tools` input item (a `functions` namespace holding the custom `exec` tool, the
`collaboration` namespace of sub-agent tools). Sub-agents are switched back on (the codexgate
profile turns them off for small local models).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.e2e.codex_cli import CodexRun, codex_binary, run_codex_in
from tests.e2e.test_codex_gateway import JSON, serving, tool_results
from tests.support.fake_upstream import Reply, text_reply, tool_calls_reply

pytestmark = pytest.mark.e2e

SLUG = "lite-sol"
EXEC_TOOL = "functions__exec"
SPAWN_TOOL = "collaboration__spawn_agent"
WAIT_TOOL = "collaboration__wait_agent"
TASK_HEADER = "[Message from /root to /root/worker]"
ANSWER_HEADER = "[Message from /root/worker to /root]"


def lite_catalog(path: Path) -> Path:
    """The bundled gpt-6.1-sol entry under SLUG, as Codex itself lists it (no network)."""
    out = subprocess.run(
        [str(codex_binary()), "debug", "models", "--bundled"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    entry = next(m for m in json.loads(out)["models"] if m["slug"] == "gpt-6.1-sol")
    assert entry["use_responses_lite"] is True and entry["multi_agent_version"] == "v2"
    path.write_text(json.dumps({"models": [dict(entry, slug=SLUG, display_name=SLUG)]}))
    return path


def run_lite(tmp_path: Path, gateway: str, prompt: str, timeout: float = 150) -> CodexRun:
    catalog = lite_catalog(tmp_path / "lite-models.json")
    return run_codex_in(
        tmp_path,
        prompt,
        base_url=gateway,
        model=SLUG,
        extra_args=["-c", f"model_catalog_json={json.dumps(str(catalog))}", "-c", "agents.enabled=true"],
        timeout=timeout,
    )


def tool_names(body: JSON) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools", ())]


def user_texts(body: JSON) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "user" and isinstance(m["content"], str)]


def test_code_mode_exec_runs_a_command_and_its_output_goes_back_as_a_tool_message(tmp_path: Path) -> None:
    code = 'const r = await tools.exec_command({cmd: "echo LITE > lite.txt && cat lite.txt"});\ntext(JSON.stringify(r));'

    def script(body: JSON) -> Reply:
        if not tool_results(body):
            return tool_calls_reply([(EXEC_TOOL, json.dumps({"input": code}))])
        return text_reply("The file is written.")

    with serving(script) as (gateway, fake):
        run = run_lite(tmp_path, gateway, "Write LITE into lite.txt")
    assert run.ok, run.describe()
    first = fake.requests[0]
    # Lite: no tools field from Codex, yet the upstream is offered the namespaced tools
    assert EXEC_TOOL in tool_names(first.body) and SPAWN_TOOL in tool_names(first.body)
    assert first.body["parallel_tool_calls"] is False
    assert (tmp_path / "work" / "lite.txt").read_text() == "LITE\n"
    assert any("echo LITE" in c["command"] for c in run.command_executions), run.describe()
    second = fake.requests[1].body
    [call] = [c for m in second["messages"] if m["role"] == "assistant" for c in m.get("tool_calls", ())]
    assert call["function"]["name"] == EXEC_TOOL  # the same flat name when it comes back in history
    [output] = tool_results(second)
    assert isinstance(output, str) and "LITE" in output, output
    assert run.final_message == "The file is written."


def test_spawn_agent_round_trip_reaches_the_worker_and_back(tmp_path: Path) -> None:
    def script(body: JSON) -> Reply:
        users = user_texts(body)
        if any(t.startswith(TASK_HEADER) for t in users):  # the sub-agent
            return text_reply("PONG from the worker")
        done = len(tool_results(body))
        if done == 0:
            task = {"task_name": "worker", "message": "Say the word PONG.", "fork_turns": "none"}
            return tool_calls_reply([(SPAWN_TOOL, json.dumps(task))])
        if not any(t.startswith(ANSWER_HEADER) for t in users) and done < 4:
            return tool_calls_reply([(WAIT_TOOL, json.dumps({"timeout_ms": 10000}))])
        return text_reply("The worker said PONG.")

    with serving(script) as (gateway, fake):
        run = run_lite(tmp_path, gateway, "Ask a worker to say PONG")
    assert run.ok, run.describe()
    bodies = [r.body for r in fake.requests]
    worker = [b for b in bodies if any(t.startswith(TASK_HEADER) for t in user_texts(b))]
    assert worker, [user_texts(b)[-1:] for b in bodies]
    task_text = next(t for t in user_texts(worker[0]) if t.startswith(TASK_HEADER))
    assert "Say the word PONG." in task_text  # readable, not an opaque blob
    parent_final = bodies[-1]
    answers = [t for t in user_texts(parent_final) if t.startswith(ANSWER_HEADER)]
    assert answers and "PONG from the worker" in answers[0], user_texts(parent_final)
    assert run.final_message == "The worker said PONG."
