"""Real processes, loopback only: the real Claude Code CLI through codexgate's Messages face to an
`anthropic` upstream (the scripted Messages server of tests/support/fake_messages_upstream.py,
which refuses a thinking block that comes back changed or unsigned, as Anthropic does).

Over an `anthropic` route the Messages face passes the client's own body through
(`ResponsesRequest.native`): every block Claude Code sends, its `cache_control` marks, the
thinking blocks with their signatures, reach the upstream byte for byte, with its betas; and the
upstream's blocks reach Claude Code as the upstream gave them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

from codexgate.app import build_app
from codexgate.config import load_settings
from codexgate.server.asgi import App, Receive, Scope, Send
from tests.e2e.claude_cli import run_claude
from tests.support.fake_messages_upstream import (
    FakeMessagesUpstream,
    Reply,
    Text,
    Thinking,
    ToolUse,
    message_reply,
)
from tests.support.servers import run_asgi_server

pytestmark = pytest.mark.e2e

JSON = dict[str, Any]
MODEL = "claude-sonnet-4-5"


def recording(app: App, bodies: list[JSON]) -> App:
    """`app`, with the JSON body of every POST /v1/messages it is sent kept in `bodies`."""

    async def recorded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != "/v1/messages":
            await app(scope, receive, send)
            return
        messages = []
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request" or not message.get("more_body"):
                break
        bodies.append(orjson.loads(b"".join(m.get("body", b"") for m in messages)))
        replay = iter(messages)

        async def again() -> Any:
            return next(replay, None) or await receive()

        await app(scope, again, send)

    return recorded


@contextmanager
def serving(claude: FakeMessagesUpstream, inbound: list[JSON]) -> Iterator[str]:
    with run_asgi_server(claude) as claude_url:
        upstreams = [
            {
                "name": "claude",
                "kind": "anthropic",
                "base_url": claude_url + "/v1",
                "api_key_env": "CLAUDE_KEY",
            }
        ]
        environ = {"CLAUDE_KEY": "sk-ant-e2e"}
        settings = load_settings(
            {"discover": False, "upstreams": upstreams, "models": [{"name": MODEL, "upstream": "claude"}]},
            environ=environ,
        )
        app = recording(build_app(settings, environ=environ), inbound)
        with run_asgi_server(app, lifespan="on") as gateway:
            yield gateway


def tool_results(body: JSON) -> list[Any]:
    return [
        block
        for message in body["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]


def test_claude_code_to_an_anthropic_upstream_keeps_its_blocks_and_signatures_byte_for_byte(
    tmp_path: Path,
) -> None:
    marker = f"cg-{uuid.uuid4().hex[:8]}"
    plan = "The user wants the marker printed: run echo."

    def answer(body: JSON) -> Reply:
        if not tool_results(body):
            command = {"command": f"echo {marker}", "description": "Print the marker"}
            return message_reply(Thinking(plan), Text("Running it."), ToolUse("Bash", command))
        return message_reply(Thinking("It printed the marker."), Text(f"Printed {marker}."))

    claude = FakeMessagesUpstream(answer, models=[MODEL], api_key="sk-ant-e2e")
    inbound: list[JSON] = []
    with serving(claude, inbound) as gateway:
        run = run_claude(
            "Print the marker with the Bash tool.",
            base_url=gateway,
            home=tmp_path / "home",
            workdir=tmp_path / "work",
            model=MODEL,
            api_key="sk-gateway-unused",
            allowed_tools=["Bash"],
        )
    assert run.ok, run.describe() + f"\nrefusals: {claude.refusals}"
    assert claude.refusals == []  # every signature came back as the upstream gave it
    assert run.result == f"Printed {marker}."
    assert len(claude.requests) == len(inbound) == 2
    for sent, forwarded in zip(inbound, claude.bodies, strict=True):
        # Byte for byte: what Claude Code sent is what the upstream got, but the model's name.
        for key in ("messages", "system", "tools", "thinking", "metadata", "context_management"):
            assert orjson.dumps(forwarded.get(key)) == orjson.dumps(sent.get(key)), key
    # The upstream's thinking came to Claude Code as the upstream gave it, and went back so.
    assistant = next(m for m in inbound[1]["messages"] if m["role"] == "assistant")
    thinking = assistant["content"][0]
    assert thinking["type"] == "thinking" and not thinking["signature"].startswith("cgs1:")
    assert marker in str(tool_results(inbound[1])[-1]["content"])
    betas = claude.requests[1].headers["anthropic-beta"].split(",")
    assert "claude-code-20250219" in [b.strip() for b in betas]  # the client's betas, passed on
