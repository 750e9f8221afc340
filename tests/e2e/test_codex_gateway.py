"""The real Codex CLI (the current release; a tool turn on 0.169 too) through codexgate to a scripted
Chat Completions upstream.

Each test serves a FakeUpstream and the gateway (the real app, aiohttp client, uvicorn) on
loopback, writes the catalog and profile with codex_setup, and runs `codex exec --json`. The
upstream answers by looking at the conversation it receives, as a model would.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

from codexgate.server.faces import responses as face
from tests.e2e.codex_cli import CODEX_VERSION, CodexRun, codex_versions, run_codex_in, serving_tapped
from tests.support.fake_upstream import (
    FakeUpstream,
    Reply,
    cut_reply,
    error_reply,
    openai_error,
    text_reply,
    tool_calls_reply,
)

pytestmark = pytest.mark.e2e

MODEL = "local-coder"
JSON = dict[str, Any]


RETRY_BACKOFF = 0.05  # seconds: retries come at once


@contextmanager
def serving(script: Any) -> Iterator[tuple[str, FakeUpstream]]:
    with serving_tapped(script, retry_backoff=RETRY_BACKOFF) as (gateway, fake, _):
        yield gateway, fake


def codex(
    tmp_path: Path, gateway: str, prompt: str, *extra: str, timeout: float = 120, version: str = CODEX_VERSION
) -> CodexRun:
    return run_codex_in(
        tmp_path, prompt, base_url=gateway, model=MODEL, extra_args=extra, timeout=timeout, version=version
    )


def tool_results(body: JSON) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def by_step(*steps: Callable[[JSON], Reply]) -> Callable[[JSON], Reply]:
    """Answer the n-th turn request with the n-th step; the step sees the request body."""

    def script(body: JSON) -> Reply:
        done = sum(1 for m in body["messages"] if m["role"] == "assistant")
        return steps[min(done, len(steps) - 1)](body)

    return script


def exec_call(cmd: str) -> tuple[str, str]:
    return ("exec_command", json.dumps({"cmd": cmd}))


def test_plain_answer(tmp_path: Path) -> None:
    with serving([text_reply("Hello from a local model.")]) as (gateway, fake):
        run = codex(tmp_path, gateway, "Say hello")
    assert run.ok, run.describe()
    assert run.final_message == "Hello from a local model."
    request = fake.requests[0].body
    assert request["model"] == MODEL and request["stream"] is True
    assert request["messages"][0]["role"] == "system"  # Codex's developer messages, merged
    assert {t["function"]["name"] for t in request["tools"]} >= {"exec_command", "apply_patch"}
    assert run.usage is not None and run.usage["input_tokens"] > 0


# What each release sends in `accept-encoding` (docs/codex-versions.md): 0.171 added it.
ACCEPT_ENCODING = {"0.171.0": "zstd,gzip", "0.169.0": None}


@codex_versions
def test_exec_command_then_an_answer_from_its_output(tmp_path: Path, codex_version: str) -> None:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "secret.txt").write_text("the answer is 42\n")

    def answer(body: JSON) -> Reply:
        output = tool_results(body)[-1]
        return text_reply("The file says: " + ("42" if "the answer is 42" in output else "???"))

    steps = by_step(lambda _: tool_calls_reply([exec_call("cat secret.txt")]), answer)
    with serving_tapped(steps, retry_backoff=RETRY_BACKOFF) as (gateway, fake, traffic):
        run = codex(tmp_path, gateway, "What is in secret.txt?", version=codex_version)
    assert run.ok, run.describe()
    assert [c["command"] for c in run.command_executions][0].endswith(
        "cat secret.txt'"
    ) or "cat secret.txt" in run.command_executions[0]["command"]
    assert run.final_message == "The file says: 42"
    assert len(fake.requests) == 2
    # The version under test sent plain JSON bodies, and was answered with a plain event stream
    # whatever it accepts (an encoding it cannot read, or a buffered stream, would fail the run).
    sent = [headers for transport, headers in traffic.headers if transport == "http"]
    assert len(sent) == 2 and all(f"codex_exec/{codex_version} " in h["user-agent"] for h in sent)
    assert [h.get("accept-encoding") for h in sent] == [ACCEPT_ENCODING[codex_version]] * 2
    assert not any("content-encoding" in h for h in sent)
    assert not any("unparsed" in body for body in traffic.bodies("http"))
    assert not any("content-encoding" in h for h in traffic.response_headers)
    assert all(h["content-type"].startswith("text/event-stream") for h in traffic.response_headers)


@codex_versions
def test_codex_bodies_are_read_from_the_remembered_bytes_from_the_third_request(
    tmp_path: Path, codex_version: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # wire/known_body.py only splices bodies written as orjson writes their items: Codex's
    # own serializer must be one of them, or its turns are always decoded whole.

    spliced: list[int] = []
    tools_again: list[bool] = []  # whether the fields before the last were decoded again
    whole = face.splice

    def counted(body: bytes, known: Any) -> Any:
        got = whole(body, known)
        if got is not None:
            assert got[0] == orjson.loads(body)
            spliced.append(got[1])
            tools_again.append(got[2] is None or got[2].before_last is not known.before_last)
        return got

    monkeypatch.setattr(face, "splice", counted)
    steps = by_step(
        lambda _: tool_calls_reply([exec_call("echo one")]),
        lambda _: tool_calls_reply([exec_call("echo two")]),
        lambda _: tool_calls_reply([exec_call("echo three")]),
        lambda _: text_reply("Done."),
    )
    with serving_tapped(steps, retry_backoff=RETRY_BACKOFF, history_cache_min_kb=0) as (gateway, fake, _):
        run = codex(tmp_path, gateway, "Do the three steps", version=codex_version)
    assert run.ok, run.describe()
    assert len(fake.requests) == 4
    # The first request is not remembered, the second is learned, the next two are spliced,
    # each on all the items of the one before.
    assert len(spliced) == 2 and all(count > 1 for count in spliced), spliced
    # Only the last field (client_metadata) is read again, if anything: not the tools.
    assert tools_again == [False, False]


def patch_call(patch: str) -> tuple[str, str]:
    return ("apply_patch", json.dumps({"input": patch}))


def test_apply_patch_creates_then_edits_a_file(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "app.py").write_text("def greet():\n    return 'hi'\n")
    create = "*** Begin Patch\n*** Add File: notes.txt\n+first line\n+second line\n*** End Patch"
    edit = (
        "*** Begin Patch\n*** Update File: app.py\n@@\n def greet():\n-    return 'hi'\n"
        "+    return 'hello'\n*** End Patch"
    )
    steps = by_step(
        lambda _: tool_calls_reply([patch_call(create)]),
        lambda _: tool_calls_reply([patch_call(edit)]),
        lambda _: text_reply("Patched both files."),
    )
    with serving(steps) as (gateway, fake):
        run = codex(tmp_path, gateway, "Create notes.txt and make greet say hello")
    assert run.ok, run.describe()
    assert (work / "notes.txt").read_text() == "first line\nsecond line\n"
    assert (work / "app.py").read_text() == "def greet():\n    return 'hello'\n"
    assert len(run.file_changes) == 2
    # the custom tool call went back upstream as a function call with the raw patch as input
    history = fake.requests[-1].body["messages"]
    calls = [c for m in history if m["role"] == "assistant" for c in m.get("tool_calls", ())]
    assert [json.loads(c["function"]["arguments"])["input"] for c in calls] == [create, edit]


def test_a_three_step_tool_loop(tmp_path: Path) -> None:
    steps = by_step(
        lambda _: tool_calls_reply([exec_call("echo one > a.txt")]),
        lambda _: tool_calls_reply([exec_call("cat a.txt && echo two >> a.txt")]),
        lambda _: tool_calls_reply([exec_call("wc -l < a.txt")]),
        lambda body: text_reply(f"Lines: {tool_results(body)[-1].strip().splitlines()[-1]}"),
    )
    with serving(steps) as (gateway, fake):
        run = codex(tmp_path, gateway, "Do the three steps")
    assert run.ok, run.describe()
    assert len(run.command_executions) == 3
    assert run.final_message == "Lines: 2"
    assert len(fake.requests) == 4


def test_two_parallel_tool_calls(tmp_path: Path) -> None:
    def answer(body: JSON) -> Reply:
        outputs = tool_results(body)
        return text_reply(
            f"{len(outputs)} results: " + " | ".join(o.strip().splitlines()[-1] for o in outputs)
        )

    steps = by_step(lambda _: tool_calls_reply([exec_call("echo alpha"), exec_call("echo beta")]), answer)
    with serving(steps) as (gateway, fake):
        run = codex(tmp_path, gateway, "Run both")
    assert run.ok, run.describe()
    assert len(run.command_executions) == 2
    assert run.final_message == "2 results: alpha | beta"
    assistant = [m for m in fake.requests[1].body["messages"] if m["role"] == "assistant"]
    assert len(assistant) == 1 and len(assistant[0]["tool_calls"]) == 2


def test_reasoning_is_shown_and_replayed_upstream(tmp_path: Path) -> None:
    steps = by_step(
        lambda _: tool_calls_reply([exec_call("echo hi")], reasoning="I should run echo first."),
        lambda _: text_reply("Done.", reasoning="The command worked."),
    )
    with serving(steps) as (gateway, fake):
        run = codex(tmp_path, gateway, "Think, then act")
    assert run.ok, run.describe()
    shown = [i.get("text", "") for i in run.items("reasoning")]
    assert any("I should run echo first." in text for text in shown), run.describe()
    # the second request carries the first turn's reasoning back as reasoning_content
    assistant = [m for m in fake.requests[1].body["messages"] if m["role"] == "assistant"]
    assert assistant[0]["reasoning_content"] == "I should run echo first."


def test_upstream_429_then_success(tmp_path: Path) -> None:
    replies = [
        error_reply(
            429, openai_error("Too many requests", error_type="rate_limit_error"), {"retry-after": "1"}
        ),
        text_reply("Made it after a retry."),
    ]
    with serving(replies) as (gateway, fake):
        run = codex(tmp_path, gateway, "hello")
    assert run.ok, run.describe()
    assert run.final_message == "Made it after a retry."
    assert len(fake.requests) == 2


def test_context_length_error_ends_cleanly_without_retries(tmp_path: Path) -> None:
    body = {
        "error": {
            "code": 400,
            "message": "the request exceeds the available context size, try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": 40000,
            "n_ctx": 8192,
        }
    }
    with serving([error_reply(400, body)]) as (gateway, fake):
        run = codex(tmp_path, gateway, "hello", timeout=60)
    assert not run.ok and not run.timed_out, run.describe()
    assert len(fake.requests) == 1  # Codex does not retry context_length_exceeded
    assert any("context window" in error.lower() for error in run.errors), run.describe()


def test_a_cut_stream_ends_as_a_failure(tmp_path: Path) -> None:
    with serving(lambda body: cut_reply("This answer is cut off in the mid")) as (gateway, fake):
        run = codex(
            tmp_path, gateway, "hello", "-c", "model_providers.codexgate.stream_max_retries=1", timeout=60
        )
    assert not run.ok and not run.timed_out, run.describe()
    # The turn fails (the partial text, closed as an incomplete item, is not a completion).
    assert run.of_type("turn.failed") and not run.of_type("turn.completed"), run.describe()
    assert any("before the model finished" in error for error in run.errors), run.describe()
    assert len(fake.requests) == 2  # the first try and Codex's one retry
