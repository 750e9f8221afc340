"""Open models as they really behave, through the whole app: tool calls and reasoning written as
text, broken arguments, malformed patches. The upstream here is the scripted fake."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.server.test_app import UPSTREAM, gateway, terminal
from tests.support.fake_upstream import FakeUpstream, text_reply, tool_calls_reply
from tests.support.sse import stream_events

EXEC = {
    "type": "function",
    "name": "exec_command",
    "description": "Run a command.",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
}
GRAMMAR = (Path(__file__).resolve().parents[1] / "fixtures" / "apply_patch.lark").read_text()
APPLY_PATCH = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Edit files.",
    "format": {"type": "grammar", "syntax": "lark", "definition": GRAMMAR},
}


def request(**extra: Any) -> dict[str, Any]:
    return {"model": "m", "input": "go", "tools": [EXEC, APPLY_PATCH], **extra}


def outputs(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    last = terminal(events)
    assert last["type"] == "response.completed", last
    return list(last["response"]["output"])


@pytest.mark.parametrize(
    "text",
    [
        'Let me look.\n<tool_call>\n{"name": "exec_command", "arguments": {"cmd": "ls -la"}}\n</tool_call>',
        "<tool_call>\n<function=exec_command>\n<parameter=cmd>\nls -la\n</parameter>\n</function>\n</tool_call>",
        '[TOOL_CALLS][{"name": "exec_command", "arguments": {"cmd": "ls -la"}}]',
    ],
)
async def test_tool_calls_written_as_text_become_function_calls(text: str) -> None:
    async with gateway([text_reply(text, chunk_chars=3)]) as (client, _, _):
        events = await stream_events(client, request())
    items = outputs(events)
    calls = [i for i in items if i["type"] == "function_call"]
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [("exec_command", {"cmd": "ls -la"})]
    assert calls[0]["call_id"].startswith("call_")
    assert all("tool_call" not in json.dumps(i) for i in items if i["type"] == "message")


async def test_a_call_to_a_tool_that_was_not_advertised_stays_text() -> None:
    text = '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>'
    async with gateway([text_reply(text)]) as (client, _, _):
        events = await stream_events(client, request())
    [message] = outputs(events)
    assert message["content"][0]["text"] == text


async def test_think_tags_become_a_reasoning_item() -> None:
    async with gateway(
        [text_reply("<think>\nThe user wants a greeting.\n</think>\n\nHello!", chunk_chars=2)]
    ) as (client, _, _):
        events = await stream_events(client, request())
    reasoning, message = outputs(events)
    assert reasoning["summary"][0]["text"] == "The user wants a greeting."
    assert message["content"][0]["text"] == "Hello!"


async def test_start_inside_think_is_configurable_per_upstream(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(f'[[upstreams]]\nname = "qwq"\nbase_url = "{UPSTREAM}"\nthink_tags = "start_inside"\n')
    fake = FakeUpstream(
        [
            text_reply(
                "a long chain of thought about the answer, well over sixty-four characters\n</think>\n\n42"
            )
        ]
    )
    async with gateway(fake=fake, config=config) as (client, _, _):
        events = await stream_events(client, request())
    reasoning, message = outputs(events)
    assert reasoning["summary"][0]["text"].startswith("a long chain of thought")
    assert message["content"][0]["text"] == "42"


async def test_text_tool_calls_can_be_turned_off_per_model(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        f'[[upstreams]]\nname = "u"\nbase_url = "{UPSTREAM}"\n'
        '[[models]]\nname = "m"\ntext_tool_calls = "off"\n'
    )
    text = '<tool_call>{"name": "exec_command", "arguments": {"cmd": "ls"}}</tool_call>'
    fake = FakeUpstream([text_reply(text)])
    async with gateway(fake=fake, config=config) as (client, _, _):
        events = await stream_events(client, request())
    [message] = outputs(events)
    assert message["content"][0]["text"] == text


async def test_broken_structured_arguments_are_repaired_and_counted() -> None:
    reply = tool_calls_reply([("exec_command", "{'cmd': 'ls',}")])
    async with gateway([reply]) as (client, _, _):
        events = await stream_events(client, request())
        health = (await client.get("/healthz")).json()
    [call] = outputs(events)
    assert json.loads(call["arguments"]) == {"cmd": "ls"}
    assert health["counts"]["default"]["arguments.repaired"] == 1


async def test_a_unified_diff_for_apply_patch_is_repaired_to_the_patch_format() -> None:
    diff = "--- a/hello.txt\n+++ b/hello.txt\n@@ -1 +1 @@\n-hello\n+hello world\n"
    reply = tool_calls_reply([("apply_patch", json.dumps({"input": diff}))])
    async with gateway([reply]) as (client, _, _):
        events = await stream_events(client, request())
    [call] = outputs(events)
    assert call["type"] == "custom_tool_call"
    assert call["input"] == (
        "*** Begin Patch\n*** Update File: hello.txt\n@@\n-hello\n+hello world\n*** End Patch\n"
    )


async def test_an_unrepairable_patch_is_passed_on_unchanged() -> None:
    reply = tool_calls_reply([("apply_patch", json.dumps({"input": "please edit hello.txt"}))])
    async with gateway([reply]) as (client, _, _):
        events = await stream_events(client, request())
    [call] = outputs(events)
    assert call["input"] == "please edit hello.txt"


async def test_a_request_that_cannot_fit_the_known_window_is_refused_before_it_is_sent(
    tmp_path: Path,
) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        f'[[upstreams]]\nname = "u"\nbase_url = "{UPSTREAM}"\n'
        '[[models]]\nname = "small"\ncontext_window = 1000\n'
        '[[models]]\nname = "roomy"\nmodel = "small"\ncontext_window = 8000\n'
    )
    fake = FakeUpstream([text_reply("fits")])
    history = "word " * 2000  # 10 kB: at least ~1700 tokens by any tokenizer
    async with gateway(fake=fake, config=config) as (client, _, _):
        refused = await client.post(
            "/v1/responses", json={"model": "small", "input": history, "stream": True}
        )
        accepted = await stream_events(client, {"model": "roomy", "input": history})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "context_length_exceeded"
    assert terminal(accepted)["type"] == "response.completed"
    assert len(fake.requests) == 1  # only the request that fits went upstream
