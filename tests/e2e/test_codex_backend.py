"""The Codex agent as a model: the official `openai` SDK talks to codexgate (chat and Responses
faces), whose upstream of kind `codex` drives the real `codex app-server` (the current release;
one turn on 0.169 too), whose own model provider is a second codexgate over a scripted chat
upstream. The scripted model reads the
conversation it gets and answers as a model would: it calls Codex's tools (a command, a patch),
the client's own tool, or answers."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from codexgate.app import build_app
from codexgate.backends.codex.backend import CodexBackend
from codexgate.commands.codex_setup.catalog import ModelSpec, write_codex_setup
from codexgate.config import load_settings
from codexgate.translate.codex_agent.events import AgentReader
from tests.e2e.codex_cli import CODEX_VERSION, codex_binary, codex_versions, sandbox_mode
from tests.support.asgi_client import StreamingASGITransport, asgi_lifespan
from tests.support.fake_upstream import FakeUpstream, text_reply, tool_calls_reply
from tests.support.servers import arun_asgi_server
from tests.support.tools import WEATHER, the_tool_call, with_tool_result

pytestmark = pytest.mark.e2e

MODEL = "local-coder"
JSON = dict[str, Any]
PATCH = "*** Begin Patch\n*** Add File: notes.txt\n+written by codex\n*** End Patch\n"


def prompt_of(body: JSON) -> str:
    """The user's own words in what Codex sent (the last user message that is not Codex's
    environment context)."""
    for message in reversed(body["messages"]):
        content = message.get("content")
        text = content if isinstance(content, str) else json.dumps(content)
        if message["role"] == "user" and "environment_context" not in text:
            return text
    return ""


def tool_results(body: JSON) -> list[str]:
    return [str(m.get("content")) for m in body["messages"] if m["role"] == "tool"]


def model(body: JSON) -> Any:
    """The scripted model behind Codex."""
    prompt, results = prompt_of(body), tool_results(body)
    if "weather" in prompt:
        if not results:
            return tool_calls_reply([("get_weather", json.dumps({"city": "Oslo"}))])
        return text_reply(f"Oslo: {results[-1]}.")
    if "hello file" in prompt:
        if not results:
            return tool_calls_reply([("exec_command", json.dumps({"cmd": "echo hello > hello.txt"}))])
        return text_reply("Done.")
    if "patch" in prompt:
        if not results:
            return tool_calls_reply([("apply_patch", json.dumps({"input": PATCH}))])
        return text_reply("Patched.")
    if "clash" in prompt:  # the client's own tool named like one of Codex's: offered prefixed
        if not results:
            return tool_calls_reply([("client_apply_patch", json.dumps({"diff": "x"}))])
        return text_reply(f"Client said: {results[-1]}")
    if "look up" in prompt:  # a tool of the MCP server in Codex's config (tests/support/fake_mcp_server.py)
        if not results:
            return tool_calls_reply([("mcp__notes__lookup", json.dumps({"key": "color"}))])
        return text_reply("Notes: " + results[-1].rsplit("\n", 1)[-1])
    if "slow" in prompt:
        return text_reply("word " * 400, delay_between_chunks=0.05)
    if "Write that handoff summary" in prompt:  # the gateway's compaction request (SUMMARY_PROMPT)
        return text_reply("SUMMARY: the user said one.")
    if "echo" in prompt:
        return text_reply("answer " + prompt.rsplit("echo", 1)[1].strip(" \"'"))
    return text_reply("Hi.")


@dataclass
class Agent:
    chat: openai.AsyncOpenAI
    fake: FakeUpstream
    workdir: Path
    backend: CodexBackend


@asynccontextmanager
async def codex_agent(
    tmp_path: Path, script: Any = model, *, version: str = CODEX_VERSION, config: str = "", **upstream: Any
) -> AsyncIterator[Agent]:
    """codexgate (in process) -> codex app-server `version` -> codexgate (loopback) -> FakeUpstream.
    `config` is more of Codex's config.toml."""
    fake = FakeUpstream(script)
    async with arun_asgi_server(fake) as fake_url:
        inner = load_settings({"upstream": fake_url + "/v1", "discover": False}, environ={})
        async with arun_asgi_server(build_app(inner, environ={}), lifespan="on") as inner_url:
            home, work = tmp_path / "home", tmp_path / "work"
            work.mkdir()
            setup = write_codex_setup(home, inner_url, [ModelSpec(slug=MODEL, context_window=32768)],
                                      codex_home=home, base_instructions="Be brief.")  # fmt: skip
            # `codex app-server` takes no --profile: the profile layer becomes the config itself.
            (home / "config.toml").write_text(setup.config_path.read_text() + config)
            sandbox = "workspace-write" if sandbox_mode() == "workspace-write" else "danger-full-access"
            config = tmp_path / "codexgate.toml"
            table = {"name": "codex", "kind": "codex", "codex_bin": str(codex_binary(version)), "codex_home": str(home),
                     "workdir": str(work), "sandbox": sandbox, **upstream}  # fmt: skip
            lines = ["[[upstreams]]", *(f"{k} = {json.dumps(v)}" for k, v in table.items())]
            lines += ["[[models]]", 'name = "codex-agent"', 'upstream = "codex"', f'model = "{MODEL}"']
            config.write_text("\n".join(lines) + "\n")
            app = build_app(load_settings({"discover": False}, config, environ={}), environ=_environ())
            async with asgi_lifespan(app):
                http = httpx.AsyncClient(
                    transport=StreamingASGITransport(app), base_url="http://gw/v1", timeout=90
                )
                async with http:
                    client = openai.AsyncOpenAI(
                        api_key="x", base_url="http://gw/v1", http_client=http, max_retries=0
                    )
                    backend = app.router.backends["codex"]
                    assert isinstance(backend, CodexBackend)
                    yield Agent(client, fake, work, backend)


def _environ() -> dict[str, str]:
    """The test's environment without Codex's own variables (tests may run inside Codex)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("CODEX_")}


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


@codex_versions
async def test_a_streamed_chat_turn_runs_a_command_in_the_workdir(tmp_path: Path, codex_version: str) -> None:
    async with codex_agent(tmp_path, version=codex_version) as agent:
        stream = await agent.chat.chat.completions.create(
            model="codex-agent", messages=user("make the hello file"), stream=True,
            stream_options={"include_usage": True},
        )  # fmt: skip
        chunks = [chunk async for chunk in stream]
        user_agent = agent.backend.app_server.server_info.get("userAgent", "")
    assert f"/{codex_version} " in user_agent  # the app-server of the version under test
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    work = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks if c.choices)
    assert text == "Done."
    assert "echo hello > hello.txt" in work and "[exit code 0]" in work  # the agent's work, as reasoning
    assert (agent.workdir / "hello.txt").read_text() == "hello\n"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0


async def test_a_chat_turn_writes_a_file_with_apply_patch_not_streamed(tmp_path: Path) -> None:
    async with codex_agent(tmp_path) as agent:
        answer = await agent.chat.chat.completions.create(
            model="codex-agent", messages=user("apply the patch")
        )
    assert answer.choices[0].message.content == "Patched."
    assert (agent.workdir / "notes.txt").read_text() == "written by codex\n"
    assert "notes.txt" in (getattr(answer.choices[0].message, "reasoning_content", None) or "")


async def test_the_clients_tool_is_called_inside_the_codex_turn(tmp_path: Path) -> None:
    async with codex_agent(tmp_path) as agent:
        messages: list[Any] = user("what is the weather in Oslo?")
        first = await agent.chat.chat.completions.create(
            model="codex-agent", messages=messages, tools=[WEATHER]
        )
        call = the_tool_call(first)
        assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", {"city": "Oslo"})
        messages += with_tool_result(first, "sunny, 21 C")
        second = await agent.chat.chat.completions.create(
            model="codex-agent", messages=messages, tools=[WEATHER]
        )
        threads = len(agent.backend.threads)
    assert second.choices[0].message.content == "Oslo: sunny, 21 C."
    assert "sunny, 21 C" in tool_results(agent.fake.requests[-1].body)  # the result reached the model
    assert threads == 1  # the same Codex turn went on in the same thread


async def test_a_conversation_continues_its_thread_over_the_responses_face(tmp_path: Path) -> None:
    async with codex_agent(tmp_path) as agent:
        first = await agent.chat.responses.create(model="codex-agent", input="echo one")
        assert first.output_text == "answer one"
        history: list[Any] = [{"role": "user", "content": "echo one"}]
        history += [item.model_dump(exclude_none=True) for item in first.output]
        history.append({"role": "user", "content": "echo two"})
        second = await agent.chat.responses.create(model="codex-agent", input=history)
        threads = len(agent.backend.threads)
    assert second.output_text == "answer two"
    assert threads == 1
    last = agent.fake.requests[-1].body["messages"]
    assert any("answer one" in str(m.get("content")) for m in last if m["role"] == "assistant")


async def test_stored_responses_and_compaction_work_over_codex(tmp_path: Path) -> None:
    async with codex_agent(tmp_path) as agent:
        first = await agent.chat.responses.create(model="codex-agent", input="echo one")
        second = await agent.chat.responses.create(
            model="codex-agent", input="echo two", previous_response_id=first.id
        )
        carried = agent.fake.requests[-1].body["messages"]
        compacted = await agent.chat.responses.create(
            model="codex-agent",
            input=[{"role": "user", "content": "echo one"}, {"type": "compaction_trigger"}],  # type: ignore[list-item]
        )
        item = compacted.output[0].model_dump()
        third = await agent.chat.responses.create(
            model="codex-agent",
            input=[item, {"role": "user", "content": "echo three"}],  # type: ignore[list-item]
        )
        summary_seen = agent.fake.requests[-1].body["messages"]
    assert second.output_text == "answer two"
    assert any("answer one" in str(m.get("content")) for m in carried if m["role"] == "assistant")
    assert [i.type for i in compacted.output] == ["compaction"]
    assert third.output_text == "answer three"
    assert any("SUMMARY: the user said one." in str(m.get("content")) for m in summary_seen)


async def test_four_conversations_run_at_once(tmp_path: Path) -> None:
    async with codex_agent(tmp_path) as agent:

        async def ask(n: int) -> str | None:
            answer = await agent.chat.chat.completions.create(model="codex-agent", messages=user(f"echo {n}"))
            return answer.choices[0].message.content

        answers = await asyncio.gather(*(ask(n) for n in range(4)))
        threads = len(agent.backend.threads)
    assert answers == [f"answer {n}" for n in range(4)]
    assert threads == 4


async def test_a_killed_app_server_fails_its_turn_clearly_and_the_next_one_runs(tmp_path: Path) -> None:
    async with codex_agent(tmp_path) as agent:
        stream = await agent.chat.chat.completions.create(
            model="codex-agent", messages=user("slow"), stream=True
        )
        with pytest.raises(openai.APIError) as info:
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    pid = agent.backend.app_server.pid
                    assert pid is not None
                    os.killpg(pid, signal.SIGKILL)
        assert "app-server" in str(info.value.message)
        again = await agent.chat.chat.completions.create(model="codex-agent", messages=user("echo back"))
    assert again.choices[0].message.content == "answer back"


async def test_what_codex_cannot_honour_is_a_400(tmp_path: Path) -> None:
    async with codex_agent(tmp_path) as agent:
        with pytest.raises(openai.BadRequestError) as info:
            await agent.chat.chat.completions.create(
                model="codex-agent", messages=user("hi"), temperature=0.3
            )
    assert info.value.body["param"] == "temperature"  # type: ignore[index]


async def test_a_streamed_responses_turn_runs_a_command_and_calls_the_clients_tool(tmp_path: Path) -> None:
    weather = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
               "parameters": WEATHER["function"]["parameters"]}  # type: ignore[index]  # fmt: skip
    async with codex_agent(tmp_path) as agent:
        stream = await agent.chat.responses.create(
            model="codex-agent", input="make the hello file", stream=True
        )
        events = [event async for event in stream]
        assert events[-1].type == "response.completed"
        done = [e.item for e in events if e.type == "response.output_item.done"]
        assert [i.type for i in done] == ["reasoning", "message"]
        work = "".join(part.text for part in done[0].summary)  # type: ignore[union-attr]
        assert "echo hello > hello.txt" in work
        assert (agent.workdir / "hello.txt").read_text() == "hello\n"

        first = await agent.chat.responses.create(
            model="codex-agent", input="weather in Oslo?", tools=[weather]
        )
        [call] = [item for item in first.output if item.type == "function_call"]
        assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Oslo"})
        history: list[Any] = [{"role": "user", "content": "weather in Oslo?"}]
        history += [item.model_dump(exclude_none=True) for item in first.output]
        history.append({"type": "function_call_output", "call_id": call.call_id, "output": "windy"})
        second = await agent.chat.responses.create(model="codex-agent", input=history, tools=[weather])
    assert second.output_text == "Oslo: windy."


async def test_a_client_tool_named_like_one_of_codexs_own_still_reaches_the_client(tmp_path: Path) -> None:
    mine = {"type": "function", "function": {"name": "apply_patch", "description": "The client's own patcher.",
            "parameters": {"type": "object", "properties": {"diff": {"type": "string"}}}}}  # fmt: skip
    async with codex_agent(tmp_path) as agent:
        messages: list[Any] = user("the clash")
        first = await agent.chat.chat.completions.create(model="codex-agent", messages=messages, tools=[mine])
        [call] = first.choices[0].message.tool_calls or []
        assert call.function.name == "apply_patch"  # the client's name, not the prefixed one
        messages += [first.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": "applied"}]  # fmt: skip
        second = await agent.chat.chat.completions.create(
            model="codex-agent", messages=messages, tools=[mine]
        )
    assert second.choices[0].message.content == "Client said: applied"
    offered = [t["function"]["name"] for t in agent.fake.requests[0].body["tools"]]
    assert "apply_patch" in offered and "client_apply_patch" in offered  # Codex's own and the client's
    assert not (agent.workdir / "x").exists()


MCP_SERVER = Path(__file__).resolve().parents[1] / "support" / "fake_mcp_server.py"
MCP_CONFIG = f"""
[mcp_servers.notes]
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(MCP_SERVER))}]
default_tools_approval_mode = "approve"
"""


async def test_an_mcp_tool_call_of_the_agent_is_shown_as_its_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 0.171's mcpToolCall items carry `environmentId` (null here): read through to the answer.
    items: list[JSON] = []
    feed = AgentReader.feed

    def spy(reader: AgentReader, method: str, params: dict[str, Any]) -> bool:
        if method == "item/completed":
            items.append(params.get("item") or {})
        return feed(reader, method, params)

    monkeypatch.setattr(AgentReader, "feed", spy)
    async with codex_agent(tmp_path, config=MCP_CONFIG) as agent:
        answer = await agent.chat.chat.completions.create(
            model="codex-agent", messages=user("look up the color")
        )
    message = answer.choices[0].message
    assert message.content == "Notes: value of color"
    assert "[notes] lookup" in (getattr(message, "reasoning_content", None) or "")
    [call] = [item for item in items if item.get("type") == "mcpToolCall"]
    assert call["status"] == "completed" and call["server"] == "notes" and call["tool"] == "lookup"
    assert "environmentId" in call, call  # what 0.171 added (docs/codex-versions.md)
