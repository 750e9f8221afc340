"""The real Codex CLI through codexgate to upstreams that behave like open models: tool calls
printed as text, patches written as unified diffs, no usage in the stream."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.test_codex_gateway import JSON, by_step, codex, serving, tool_results
from tests.support.fake_upstream import Reply, text_reply, tool_calls_reply

pytestmark = pytest.mark.e2e


def answer_from_output(body: JSON) -> Reply:
    output = tool_results(body)[-1]
    return text_reply("The marker says: " + ("found-it" if "found-it" in output else "nothing"))


@pytest.mark.parametrize(
    "written_call",
    [
        'I will read it.\n<tool_call>\n{"name": "exec_command", "arguments": {"cmd": "cat marker.txt"}}\n</tool_call>',
        "<tool_call>\n<function=exec_command>\n<parameter=cmd>\ncat marker.txt\n</parameter>\n</function>\n</tool_call>",
    ],
    ids=["hermes", "qwen3_coder_xml"],
)
def test_a_tool_call_written_as_text_runs_and_codex_answers_from_its_output(
    tmp_path: Path, written_call: str
) -> None:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "marker.txt").write_text("found-it\n")
    steps = by_step(lambda _: text_reply(written_call, chunk_chars=5), answer_from_output)
    with serving(steps) as (gateway, fake):
        run = codex(tmp_path, gateway, "What does marker.txt say?")
    assert run.ok, run.describe()
    assert len(run.command_executions) == 1 and "cat marker.txt" in run.command_executions[0]["command"]
    assert run.final_message == "The marker says: found-it"
    assert all("<tool_call>" not in message for message in run.agent_messages)
    # On the way back the call is structured, as chat templates expect
    history = fake.requests[1].body["messages"]
    assert [
        c["function"]["name"] for m in history if m["role"] == "assistant" for c in m.get("tool_calls", ())
    ] == ["exec_command"]


def test_apply_patch_given_as_a_unified_diff_is_repaired_and_applied(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "greet.py").write_text("def greet():\n    return 'hi'\n")
    diff = "--- a/greet.py\n+++ b/greet.py\n@@ -1,2 +1,2 @@\n def greet():\n-    return 'hi'\n+    return 'hello'\n"
    steps = by_step(
        lambda _: tool_calls_reply([("apply_patch", json.dumps({"input": diff}))]),
        lambda _: text_reply("Updated greet."),
    )
    with serving(steps) as (gateway, _):
        run = codex(tmp_path, gateway, "Make greet say hello")
    assert run.ok, run.describe()
    assert (work / "greet.py").read_text() == "def greet():\n    return 'hello'\n"
    assert len(run.file_changes) == 1


def test_without_upstream_usage_codex_still_gets_usage(tmp_path: Path) -> None:
    with serving([text_reply("No usage from me.", usage=False)]) as (gateway, fake):
        run = codex(tmp_path, gateway, "hello")
    assert run.ok, run.describe()
    assert run.usage is not None
    # Codex's prompt is several thousand tokens: the estimate must be in that range, not zero
    assert 1000 < run.usage["input_tokens"] < 100_000 and run.usage["output_tokens"] > 0


def test_a_looping_model_is_stopped_and_codex_says_why(tmp_path: Path) -> None:
    loop = "I'm sure you'll find them all to your liking.\n\n"
    # One retry of the turn, not Codex's five (6 s of backoff): the retry is what this shows.
    retry_once = ("-c", "model_providers.codexgate.stream_max_retries=1")
    with serving(lambda _: text_reply("Sure.\n\n" + loop * 3000, chunk_chars=8)) as (gateway, fake):
        run = codex(tmp_path, gateway, "hello", *retry_once)
    assert not run.ok
    assert any(
        "codexgate stopped the model" in e and "find them all to your liking" in e for e in run.errors
    ), run.describe()
    assert len(fake.requests) >= 2  # Codex retried the turn: a new sample may escape the loop
    assert fake.disconnects >= 1  # each looping generation was cancelled, not run to its end
