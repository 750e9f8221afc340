"""Real processes, loopback only: the real Codex CLI through codexgate (served by uvicorn) to the
scripted Anthropic Messages server (tests/support/fake_messages_upstream.py, served too), which
refuses what Anthropic would: a thinking block that comes back changed or without its
signature, a tool loop whose thinking is missing, turns that do not alternate.

- Codex runs a tool-using, thinking turn on an `anthropic` route, and the thinking blocks come
  back signed on the next request (a lost or altered one is a 400, and the run fails);
  apply_patch goes through as a custom tool with its grammar check.
- A pool of one `anthropic` member and one chat member fails over on a 529.
- The Chat face over an `anthropic` route answers the `openai` SDK.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import openai
import pytest

from codexgate.app import build_app
from codexgate.commands.codex_setup.catalog import ModelSpec
from codexgate.config import load_settings
from tests.e2e.codex_cli import run_codex_in
from tests.support.fake_messages_upstream import (
    FakeMessagesUpstream,
    Reply,
    Text,
    Thinking,
    ToolUse,
    message_reply,
    overloaded,
    sign,
)
from tests.support.fake_upstream import FakeUpstream, text_reply
from tests.support.servers import run_asgi_server

pytestmark = pytest.mark.e2e

JSON = dict[str, Any]
MODEL = "claude-sonnet-4-5"
SPEC = ModelSpec(slug=MODEL, context_window=200_000, supports_reasoning=True, supports_images=True)


@contextmanager
def serving(
    claude: FakeMessagesUpstream, chat: FakeUpstream | None = None, models: list[JSON] | None = None
) -> Iterator[str]:
    """The fake Messages server (and a chat one), and the gateway over them, all on loopback."""
    with run_asgi_server(claude) as claude_url, run_asgi_server(chat or FakeUpstream([])) as chat_url:
        upstreams = [
            {
                "name": "claude",
                "kind": "anthropic",
                "base_url": claude_url + "/v1",
                "api_key_env": "CLAUDE_KEY",
            },
            {"name": "chat", "base_url": chat_url + "/v1"},
        ]
        environ = {"CLAUDE_KEY": "sk-ant-e2e"}
        settings = load_settings(
            {"discover": False, "retry_backoff": 0.05, "upstreams": upstreams, "models": models or [
                {"name": MODEL, "upstream": "claude"},
            ]},
            environ=environ,
        )  # fmt: skip
        with run_asgi_server(build_app(settings, environ=environ), lifespan="on") as gateway:
            yield gateway


def results(body: JSON) -> list[str]:
    """The text of every tool result in a Messages request."""
    found = []
    for message in body["messages"]:
        for block in message["content"] if isinstance(message["content"], list) else ():
            if block.get("type") == "tool_result":
                content = block.get("content", "")
                found.append(
                    content if isinstance(content, str) else " ".join(b.get("text", "") for b in content)
                )
    return found


def by_step(*steps: Callable[[JSON], Reply]) -> Callable[[JSON], Reply]:
    """The n-th request of the run answered by the n-th step (by the tool results so far)."""

    def answer(body: JSON) -> Reply:
        return steps[min(len(results(body)), len(steps) - 1)](body)

    return answer


def test_codex_runs_a_thinking_tool_turn_and_its_signed_thinking_comes_back(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "secret.txt").write_text("the answer is 42\n")
    plan = "The user wants the file's content: read secret.txt with cat."
    patch = "*** Begin Patch\n*** Add File: answer.txt\n+42\n*** End Patch\n"
    steps = by_step(
        lambda _: message_reply(
            Thinking(plan), Text("Reading it."), ToolUse("exec_command", {"cmd": "cat secret.txt"})
        ),
        lambda body: message_reply(
            Thinking("It says 42; write it down."),
            ToolUse("apply_patch", {"input": patch if "42" in results(body)[-1] else "nothing"}),
        ),
        lambda _: message_reply(Thinking("Done."), Text("The file says: 42")),
    )
    fake = FakeMessagesUpstream(steps, api_key="sk-ant-e2e")
    with serving(fake) as gateway:
        run = run_codex_in(
            tmp_path, "What is in secret.txt? Save the answer.", base_url=gateway, model=MODEL, specs=[SPEC]
        )
    assert run.ok, run.describe() + f"\nrefusals: {fake.refusals}"
    assert fake.refusals == []
    assert run.final_message == "The file says: 42"
    assert (tmp_path / "work" / "answer.txt").read_text() == "42\n"
    assert len(fake.requests) == 3
    second, third = fake.bodies[1], fake.bodies[2]
    assert second["thinking"]["type"] == "enabled"  # on, so the fake checked the loop's thinking
    # The first answer's thinking came back whole, signature and all, at the head of its message.
    assistant = next(m for m in second["messages"] if m["role"] == "assistant")
    assert assistant["content"][0] == {"type": "thinking", "thinking": plan, "signature": sign(plan)}
    assert [b["type"] for b in assistant["content"]] == ["thinking", "text", "tool_use"]
    thinking = [
        b
        for m in third["messages"]
        if m["role"] == "assistant"
        for b in m["content"]
        if b["type"] == "thinking"
    ]
    assert [b["signature"] for b in thinking] == [sign(plan), sign("It says 42; write it down.")]
    calls = [
        b
        for m in third["messages"]
        for b in m["content"]
        if isinstance(b, dict) and b.get("type") == "tool_use"
    ]
    assert calls[1]["name"] == "apply_patch" and calls[1]["input"] == {"input": patch}
    assert all(r.headers["x-api-key"] == "sk-ant-e2e" for r in fake.requests)


def test_a_pool_of_an_anthropic_and_a_chat_member_fails_over_on_a_529(tmp_path: Path) -> None:
    claude = FakeMessagesUpstream([overloaded()] * 4, api_key="sk-ant-e2e")
    chat = FakeUpstream(lambda body: text_reply("Answered by the chat member."))
    route = {"name": "coder", "upstreams": [{"name": "claude", "model": MODEL}, {"name": "chat", "model": "qwen"}],
             "balance": "round_robin", "sticky": False}  # fmt: skip
    with (
        serving(claude, chat, [route]) as gateway,
        openai.OpenAI(base_url=gateway + "/v1", api_key="unused", max_retries=0) as client,
    ):
        answers = [client.responses.create(model="coder", input="Hi.").output_text for _ in range(2)]
        health = client.get("/healthz", cast_to=object)
    assert answers == ["Answered by the chat member."] * 2
    assert len(claude.requests) == 1  # its 529 failed over at once, and it cooled down
    assert json.loads(json.dumps(health))["upstreams"]["claude"]["usable"] is False


def test_the_chat_face_over_an_anthropic_route_answers(tmp_path: Path) -> None:
    fake = FakeMessagesUpstream(
        [message_reply(Text("Hello from Claude.")), message_reply(Thinking("Hm."), Text("Streamed hello."))],
        api_key="sk-ant-e2e",
    )
    with (
        serving(fake) as gateway,
        openai.OpenAI(base_url=gateway + "/v1", api_key="unused", max_retries=0) as client,
    ):
        whole = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}])
        stream = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Hi again"}],
            stream=True,
            reasoning_effort="low",
        )
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert whole.choices[0].message.content == "Hello from Claude."
    assert text == "Streamed hello."
    assert fake.bodies[1]["thinking"] == {"type": "enabled", "budget_tokens": 4096}
    assert whole.usage is not None and whole.usage.prompt_tokens > 0
