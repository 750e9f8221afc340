"""The pinned Claude Code, headless, through a real `codexgate serve` to a scripted Chat
Completions upstream: what only the real client can prove about the Messages face.

Each test serves a FakeUpstream and the gateway on loopback and runs `claude -p ... --output-format
json` (tests/e2e/claude_cli.py) with the tools it may use named (`--allowedTools`: as root it
refuses `--dangerously-skip-permissions`). The upstream answers by looking at the conversation it
receives, as a model would; the commands it asks for print what the command line does not hold
(`echo codexgate-$((40+2))` prints `codexgate-42`), so the marker in the next request's tool
message proves that the command ran and its output came back through the gateway.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.claude_cli import ClaudeRun, run_claude
from tests.support.fake_upstream import (
    ChatReply,
    FakeUpstream,
    RecordedRequest,
    Reply,
    Usage,
    cut_reply,
    error_reply,
    openai_error,
    text_reply,
    tool_calls_reply,
)
from tests.support.key_limits import fresh_window
from tests.support.processes import ServedGateway, serve_process, wait_until
from tests.support.servers import run_asgi_server

pytestmark = pytest.mark.e2e

MODEL = "local-coder"
JSON = dict[str, Any]
BILLING = "x-anthropic-billing-header"
ENVIRONMENT = "Primary working directory"  # in the role: "system" message Claude Code sends


@contextmanager
def gateway(
    tmp_path: Path, script: Callable[[JSON], Reply] | list[Reply], *, config: str = "",
    args: tuple[str, ...] = (), env: dict[str, str] | None = None,
) -> Iterator[tuple[ServedGateway, FakeUpstream]]:  # fmt: skip
    """The fake upstream and `codexgate serve` in front of it (`config`: its TOML file)."""
    upstream = FakeUpstream(script)
    path = tmp_path / "gateway.toml"
    path.write_text(config)
    with run_asgi_server(upstream) as upstream_url:
        environ = {"CODEXGATE_STORE_PATH": str(tmp_path / "store.db"), **(env or {})}
        argv = ("--no-discover", "--upstream", upstream_url + "/v1", "--config", str(path), *args)
        with serve_process(*argv, env=environ) as served:
            yield served, upstream


def claude(tmp_path: Path, gw: ServedGateway, prompt: str, **options: Any) -> ClaudeRun:
    options.setdefault("auth_token", "unused")  # with no [[api_keys]] the gateway asks for none
    return run_claude(
        prompt, base_url=gw.base, model=MODEL, home=tmp_path / "home", workdir=tmp_path / "work",
        timeout=120, **options,
    )  # fmt: skip


def access_lines(gw: ServedGateway) -> list[str]:
    return [line for line in gw.output if "codexgate.access" in line]


def tool_messages(request: RecordedRequest) -> list[str]:
    return [str(m["content"]) for m in request.body["messages"] if m["role"] == "tool"]


def bash(command: str) -> str:
    return json.dumps({"command": command, "description": "Print the marker"})


def by_turn(*steps: Reply) -> Callable[[JSON], Reply]:
    """The n-th reply for a request that holds n-1 tool results: Claude Code sends a request
    once more when it retries, and the reply follows the conversation, not the count."""

    def answer(body: JSON) -> Reply:
        done = sum(1 for m in body["messages"] if m["role"] == "tool")
        return steps[min(done, len(steps) - 1)]

    return answer


def test_a_plain_answer_comes_back_with_the_upstreams_usage_and_its_cache_fields(tmp_path: Path) -> None:
    usage = Usage(prompt_tokens=1200, completion_tokens=30, cached_tokens=1000)
    with gateway(tmp_path, [ChatReply(text="Hello from the gateway.", usage=usage)]) as (gw, upstream):
        run = claude(tmp_path, gw, "say hi")
        access = access_lines(gw)
    assert run.ok, run.describe()
    assert (run.result, run.is_error, run.num_turns, run.stop_reason) == (
        "Hello from the gateway.", False, 1, "end_turn",
    )  # fmt: skip
    assert run.usage is not None
    # Anthropic's input_tokens counts no cache reads: 1200 prompt tokens, 1000 of them cached.
    assert {k: run.usage[k] for k in ("input_tokens", "cache_read_input_tokens",
                                      "cache_creation_input_tokens", "output_tokens")} == {
        "input_tokens": 200, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 0,
        "output_tokens": 30,
    }  # fmt: skip
    [request] = upstream.requests  # no side request reached the upstream
    messages = request.body["messages"]
    assert messages[0]["role"] == "system" and "Claude Agent SDK" in messages[0]["content"]
    everything = json.dumps(messages)
    assert BILLING not in everything  # the billing line changes every run: it stays out
    assert everything.count(ENVIRONMENT) == 1  # the role: "system" message, given once
    assert "DeferredToolPlaceholder" not in [t["function"]["name"] for t in request.body["tools"]]
    [line] = access
    assert "face=messages" in line and f"model={MODEL}" in line and "status=200 outcome=completed" in line


def test_a_bash_call_after_reasoning_runs_and_both_return_to_the_upstream(tmp_path: Path) -> None:
    """Reasoning, then a tool call, then the answer: the thinking block Claude Code sends back
    (`display: "omitted"`: no text, its signature the gateway's blob) returns to the chat upstream
    as the assistant's `reasoning_content`, and the command's output as the tool message."""
    thought = "The user wants the marker: I will compute it with the shell."
    script = by_turn(
        tool_calls_reply([("Bash", bash("echo codexgate-$((40+2))"))], reasoning=thought),
        text_reply("The command printed codexgate-42."),
    )
    with gateway(tmp_path, script) as (gw, upstream):
        run = claude(tmp_path, gw, "print the marker with the shell", allowed_tools=["Bash"])
    assert run.ok, run.describe()
    assert (run.result, run.num_turns) == ("The command printed codexgate-42.", 2)
    first, second = upstream.requests
    assert first.body["messages"][-1]["role"] != "tool"
    [output] = tool_messages(second)
    assert "codexgate-42" in output
    [call] = [m for m in second.body["messages"] if m.get("tool_calls")]
    assert call["tool_calls"][0]["function"]["name"] == "Bash"
    assert json.loads(call["tool_calls"][0]["function"]["arguments"])["command"] == "echo codexgate-$((40+2))"
    assert call.get("reasoning_content") == thought
    # The role: "system" message came as blocks first, then as a string: given once each time.
    assert [json.dumps(r.body["messages"]).count(ENVIRONMENT) for r in (first, second)] == [1, 1]


def test_a_tool_call_the_model_printed_as_text_still_runs(tmp_path: Path) -> None:
    printed = (
        "I will run it.\n<tool_call>\n"
        + json.dumps({"name": "Bash", "arguments": json.loads(bash("echo codexgate-$((50+5))"))})
        + "\n</tool_call>"
    )
    script = by_turn(text_reply(printed, chunk_chars=7), text_reply("It printed codexgate-55."))
    with gateway(tmp_path, script) as (gw, upstream):
        run = claude(tmp_path, gw, "print the other marker", allowed_tools=["Bash"])
    assert run.ok, run.describe()
    assert (run.result, run.num_turns) == ("It printed codexgate-55.", 2)
    [output] = tool_messages(upstream.requests[-1])
    assert "codexgate-55" in output
    [call] = [m for m in upstream.requests[-1].body["messages"] if m.get("tool_calls")]
    assert "<tool_call>" not in str(call.get("content") or "")


def test_a_tool_claude_codes_tool_search_loads_is_offered_from_the_next_request_on(tmp_path: Path) -> None:
    """Claude Code lists its searchable tools with `defer_loading` (and a placeholder never to be
    loaded); the model calls ToolSearch, whose result is a `tool_reference`: the chat model is
    offered the tool from then on, and reads that it was loaded."""
    script = by_turn(
        tool_calls_reply([("ToolSearch", json.dumps({"query": "select:WebFetch", "max_results": 1}))]),
        text_reply("WebFetch is ready."),
    )
    with gateway(tmp_path, script) as (gw, upstream):
        run = claude(tmp_path, gw, "load the web fetch tool", allowed_tools=["ToolSearch"])
    assert run.ok, run.describe()
    assert (run.result, run.num_turns) == ("WebFetch is ready.", 2)
    first, second = ([t["function"]["name"] for t in r.body["tools"]] for r in upstream.requests)
    assert "ToolSearch" in first and "WebFetch" not in first and "DeferredToolPlaceholder" not in first
    assert set(second) - set(first) == {"WebFetch"} and "DeferredToolPlaceholder" not in second
    [output] = tool_messages(upstream.requests[1])
    assert "Tool loaded: WebFetch" in output


def test_an_upstream_500_and_a_stream_cut_mid_answer_are_retried_by_claude_code(tmp_path: Path) -> None:
    """The gateway retries an upstream's 5xx itself before the first byte; with max_retries 0
    the 500 reaches Claude Code (an `api_error`), which sends the request again. The next answer
    is cut after its first words: an `event: error` (`overloaded_error`), after which Claude
    Code sends the words it got back with a note to resume from them; the third is its answer."""
    script = [
        error_reply(500, openai_error("the upstream fell over", error_type="server_error")),
        cut_reply("Half an answ"),
        text_reply("Answered on the third try."),
    ]
    with gateway(tmp_path, script, args=("--max-retries", "0")) as (gw, upstream):
        run = claude(tmp_path, gw, "say hi")
        access = access_lines(gw)
    assert run.ok, run.describe()
    assert run.result == "Answered on the third try."
    assert len(upstream.requests) == 3
    first, retried, resumed = (r.body["messages"] for r in upstream.requests)
    assert retried == first  # after the 500: the same request
    # after the cut: the words that came, and a note to go on from them
    assert resumed[: len(first)] == first
    assert resumed[len(first)] == {"role": "assistant", "content": "Half an answ"}
    assert "cut off mid-stream" in resumed[-1]["content"] and len(resumed) == len(first) + 2
    assert "status=502 outcome=upstream_error" in access[0], access  # the upstream's 500, as a gateway's
    assert "status=200 outcome=failed:upstream_stream_cut" in access[1], access
    assert "status=200 outcome=completed" in access[2] and len(access) == 3, access


WINDOW = 6.0  # rate_window_seconds: Claude Code waits out at most this
KEY = "cgk-claude-limited-0f3a9c"
LIMITED = f"""
rate_window_seconds = {WINDOW:g}
[[api_keys]]
name = "claude"
key_env = "CLAUDE_LIMITED_KEY"
requests_per_minute = 1
"""


@pytest.mark.parametrize("sent_as", ["auth_token", "api_key"], ids=["bearer", "x-api-key"])
def test_a_limited_keys_429_is_waited_out(tmp_path: Path, sent_as: str) -> None:
    """requests_per_minute = 1, spent just before Claude Code starts: its request is refused
    with a 429 `rate_limit_error` that says when to come back (`retry-after`), Claude Code
    waits and sends it again, and the usage ledger holds the key's two answers."""
    usage = Usage(prompt_tokens=900, completion_tokens=20, cached_tokens=800)
    script = lambda body: ChatReply(text="Served within the limit.", usage=usage)  # noqa: E731
    headers = {"x-api-key": KEY} if sent_as == "api_key" else {"authorization": f"Bearer {KEY}"}
    body = {"model": MODEL, "max_tokens": 64, "messages": [{"role": "user", "content": "spend"}]}
    with gateway(tmp_path, script, config=LIMITED, env={"CLAUDE_LIMITED_KEY": KEY}) as (gw, upstream):
        # At least 5 s left of this window: Claude Code (1-2 s to its first request) asks within it.
        fresh_window(WINDOW, 5.0)
        spent = httpx.post(gw.base + "/v1/messages", json=body, headers=headers, timeout=10)
        refused = httpx.post(gw.base + "/v1/messages", json=body, headers=headers, timeout=10)
        run = claude(tmp_path, gw, "say hi", **{"auth_token": None, sent_as: KEY})
        wait_until(lambda: _requests_of(gw, headers) == 2, 10, "the ledger has not both answers")
        rows = httpx.get(gw.base + "/v1/usage", headers=headers, timeout=10).json()["data"]
        access = [line for line in access_lines(gw) if "face=messages" in line]
    assert spent.status_code == 200, spent.text
    assert refused.status_code == 429 and refused.json()["error"]["type"] == "rate_limit_error", refused.text
    assert 1 <= int(refused.headers["retry-after"]) <= WINDOW
    assert run.ok, run.describe()
    assert run.result == "Served within the limit."
    # spent, refused (ours), refused (Claude Code's first), served (its retry)
    assert [line.split("status=")[1].split()[0] for line in access] == ["200", "429", "429", "200"], access
    assert len(upstream.requests) == 2
    assert [(r["key"], r["model"], r["requests"], r["cached_tokens"]) for r in rows] == [
        ("claude", MODEL, 2, 1600)
    ]


def _requests_of(gw: ServedGateway, headers: dict[str, str]) -> int:
    rows = httpx.get(gw.base + "/v1/usage", headers=headers, timeout=10).json()["data"]
    return sum(int(row["requests"]) for row in rows)
