"""The Messages face as served: the real gateway (`build_app`) on loopback, the official
`anthropic` SDK as its client, over each kind of backend (a chat upstream, a Responses upstream,
the Codex agent, a pool with a dead member and a fallback), and the errors a Messages client
reads before the first byte and after it, in Anthropic's shape.

The SDK is Anthropic's own (its HTTP client is `httpx2`): its stream helper accumulates the
whole message from the gateway's events, so a block out of order, a missing signature or a
usage without its cache fields fails here as it would fail a user."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import shlex
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from codexgate.app import build_app
from codexgate.config import load_settings
from codexgate.server.faces.messages import MessagesFace, MessagesSSE
from codexgate.translate.messages_face.context_edits import CLEARED_RESULT
from tests.support import fake_app_server
from tests.support._exchange import ASGIApp
from tests.support.fake_responses import ScriptedResponses, response_resource, sse_reply, usage
from tests.support.fake_upstream import (
    ChatReply,
    FakeUpstream,
    Usage,
    cut_reply,
    stall_reply,
    text_reply,
    tool_calls_reply,
)
from tests.support.pdfs import text_pdf
from tests.support.processes import free_port
from tests.support.servers import arun_asgi_server
from tests.support.tools import BASH

JSON = dict[str, Any]
USAGE = Usage(prompt_tokens=1200, completion_tokens=42, cached_tokens=1000, reasoning_tokens=7)
ALICE, LIMITED = "alice-messages-key-01", "limited-messages-key-02"
KEYS = {"ALICE_KEY": ALICE, "LIMITED_KEY": LIMITED}


@asynccontextmanager
async def served(
    upstreams: Mapping[str, ASGIApp], config: str, tmp_path: Path, environ: Mapping[str, str] | None = None,
    **flags: Any,
) -> AsyncIterator[str]:  # fmt: skip
    """Each upstream served, `config` (a TOML file; `{name}` is upstream `name`'s URL) and
    `flags` the gateway's settings, the gateway served with its lifespan; its URL."""
    async with AsyncExitStack() as stack:
        urls = {
            name: await stack.enter_async_context(arun_asgi_server(app)) for name, app in upstreams.items()
        }
        path = tmp_path / "gateway.toml"
        path.write_text(config.format(**urls))
        environ = dict(environ or {})
        settings = load_settings(
            {"discover": False, "retry_backoff": 0.01, "store_path": str(tmp_path / "store.db"), **flags},
            path, environ=environ,
        )  # fmt: skip
        yield await stack.enter_async_context(
            arun_asgi_server(build_app(settings, environ=environ), lifespan="on")
        )


def over_chat(upstream: FakeUpstream, tmp_path: Path, extra: str = "", **flags: Any) -> Any:
    config = '[[upstreams]]\nname = "local"\nbase_url = "{chat}/v1"\n' + extra
    return served({"chat": upstream}, config, tmp_path, **flags)


def sdk(url: str, key: str = "unused") -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=url, api_key=key, max_retries=0)


def ask(**fields: Any) -> JSON:
    return {"model": "coder", "max_tokens": 4096, "messages": [{"role": "user", "content": "list the files"}],
            **fields}  # fmt: skip


# -- over a chat upstream


async def test_the_sdk_streams_thinking_text_and_tool_use_from_a_chat_upstream_and_sends_them_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The SDK's stream helper gets the thinking block (with the gateway's signature), the text,
    the tool_use with its input parsed, the stop reason and the usage with its cache fields;
    sent back, the thinking returns to the chat upstream as `reasoning_content` and the tool
    result as a tool message."""
    caplog.set_level(logging.INFO, logger="codexgate.access")
    upstream = FakeUpstream(
        [
            tool_calls_reply(
                [("Bash", '{"command": "ls -la"}')],
                text="Listing them.",
                reasoning="The user wants the files.",
                usage=USAGE,
            ),  # fmt: skip
            text_reply("Two files."),
        ]
    )
    async with over_chat(upstream, tmp_path) as url, sdk(url) as client:
        thinking = {"type": "enabled", "budget_tokens": 8000}
        async with client.messages.stream(**ask(tools=[BASH], thinking=thinking)) as stream:
            message = await stream.get_final_message()
        history = [
            {"role": "user", "content": "list the files"},
            {"role": "assistant", "content": [block.to_dict() for block in message.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": message.content[2].id,  # type: ignore[union-attr]
                                          "content": "a.txt\nb.txt"}]},
        ]  # fmt: skip
        answer = await client.messages.create(**ask(messages=history, tools=[BASH], thinking=thinking))
    thought, text, tool = message.content
    assert thought.type == "thinking" and thought.thinking == "The user wants the files."
    assert thought.signature.startswith("cgs1:")
    assert text.type == "text" and text.text == "Listing them."
    assert tool.type == "tool_use" and (tool.name, tool.input) == ("Bash", {"command": "ls -la"})
    assert message.stop_reason == "tool_use" and message.model == "coder"
    got = message.usage
    assert (got.input_tokens, got.cache_read_input_tokens, got.cache_creation_input_tokens, got.output_tokens) == (
        200, 1000, 0, 42,
    )  # fmt: skip
    assert [b.type for b in answer.content] == ["text"] and answer.content[0].text == "Two files."  # type: ignore[union-attr]
    assert answer.stop_reason == "end_turn"
    second = upstream.requests[1].body["messages"]
    [assistant] = [m for m in second if m["role"] == "assistant"]
    assert assistant["reasoning_content"] == "The user wants the files."
    assert assistant["tool_calls"][0]["id"] == tool.id
    assert second[-1] == {"role": "tool", "tool_call_id": tool.id, "content": "a.txt\nb.txt"}
    assert upstream.requests[0].body["tools"][0]["function"]["parameters"].get("$schema") is None
    access = [r.getMessage() for r in caplog.records if r.name == "codexgate.access"]
    assert len(access) == 2 and all("face=messages" in line and "status=200" in line for line in access)


async def test_the_non_streamed_message_is_the_streamed_one(tmp_path: Path) -> None:
    def reply() -> ChatReply:
        return tool_calls_reply(
            [("Bash", '{"command": "ls"}')], text="Looking.", reasoning="Files.", usage=USAGE
        )

    async with over_chat(FakeUpstream([reply(), reply()]), tmp_path) as url, sdk(url) as client:
        thinking = {"type": "enabled", "budget_tokens": 2000}
        async with client.beta.messages.stream(
            **ask(tools=[BASH], thinking=thinking)
        ) as stream:  # ?beta=true
            streamed = await stream.get_final_message()
        whole = await client.messages.create(**ask(tools=[BASH], thinking=thinking))

    def same(message: Any) -> JSON:
        data: JSON = message.to_dict(exclude_none=True)
        data.pop("id")
        data.pop("stop_details", None)  # the stream helper's own, from message_delta
        for block in data["content"]:
            block.pop("id", None)  # the tool_use ids are the upstream's, new per answer
        return data

    assert same(streamed) == same(whole)
    assert [b["type"] for b in same(whole)["content"]] == ["thinking", "text", "tool_use"]


async def test_with_thinking_omitted_the_block_has_no_text_and_its_signature_still_returns_it(
    tmp_path: Path,
) -> None:
    """What Claude Code asks of a model it does not know: adaptive thinking, display omitted."""
    upstream = FakeUpstream([text_reply("Hi.", reasoning="A greeting is due."), text_reply("Again.")])
    async with over_chat(upstream, tmp_path) as url, sdk(url) as client:
        thinking = {"type": "adaptive", "display": "omitted"}
        async with client.messages.stream(
            **ask(thinking=thinking, output_config={"effort": "high"})
        ) as stream:
            message = await stream.get_final_message()
        history = [{"role": "user", "content": "hi"},
                   {"role": "assistant", "content": [b.to_dict() for b in message.content]},
                   {"role": "user", "content": "again"}]  # fmt: skip
        await client.messages.create(**ask(messages=history, thinking=thinking))
    block = message.content[0]
    assert block.type == "thinking" and block.thinking == "" and block.signature.startswith("cgs1:")
    [assistant] = [m for m in upstream.requests[1].body["messages"] if m["role"] == "assistant"]
    assert assistant["reasoning_content"] == "A greeting is due."


# -- over the other backends


def _responses_turn(reasoning_blob: str) -> list[JSON]:
    reasoning = {"id": "rs_up1", "type": "reasoning", "summary": [], "encrypted_content": reasoning_blob}
    text = {"id": "msg_up1", "type": "message", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": "From Responses.", "annotations": []}]}  # fmt: skip
    summary = {"type": "summary_text", "text": "Thinking upstream."}
    return [
        {"type": "response.created", "response": response_resource("in_progress", [])},
        {"type": "response.output_item.added", "output_index": 0, "item": {**reasoning, "summary": []}},
        {"type": "response.reasoning_summary_text.delta", "item_id": "rs_up1", "output_index": 0,
         "summary_index": 0, "delta": "Thinking upstream."},  # fmt: skip
        {"type": "response.output_item.done", "output_index": 0, "item": {**reasoning, "summary": [summary]}},
        {"type": "response.output_item.added", "output_index": 1, "item": {**text, "content": []}},
        {"type": "response.output_text.delta", "item_id": "msg_up1", "output_index": 1, "content_index": 0,
         "delta": "From Responses."},  # fmt: skip
        {"type": "response.output_item.done", "output_index": 1, "item": text},
        {"type": "response.completed",
         "response": response_resource("completed", [{**reasoning, "summary": [summary]}, text], usage(30, 5, 20))},
    ]  # fmt: skip


async def test_a_responses_upstream_answers_the_sdk_and_gets_its_reasoning_blob_back(tmp_path: Path) -> None:
    upstream = ScriptedResponses(
        [sse_reply(_responses_turn("gAAAA-opaque")), sse_reply(_responses_turn("x"))]
    )
    config = '[[upstreams]]\nname = "oa"\nkind = "responses"\nbase_url = "{oa}/v1"\n'
    async with served({"oa": upstream}, config, tmp_path) as url, sdk(url) as client:
        thinking = {"type": "enabled", "budget_tokens": 20000}
        async with client.messages.stream(**ask(thinking=thinking)) as stream:
            message = await stream.get_final_message()
        history = [{"role": "user", "content": "hi"},
                   {"role": "assistant", "content": [b.to_dict() for b in message.content]},
                   {"role": "user", "content": "again"}]  # fmt: skip
        await client.messages.create(**ask(messages=history, thinking=thinking))
    thought, text = message.content
    assert thought.type == "thinking" and thought.thinking == "Thinking upstream."
    assert text.type == "text" and text.text == "From Responses."
    got = message.usage
    assert (got.input_tokens, got.cache_read_input_tokens, got.output_tokens) == (10, 20, 5)
    first, second = upstream.requests
    assert first["reasoning"] == {"effort": "high", "summary": "auto"}
    assert first["include"] == ["reasoning.encrypted_content"]
    assert [i for i in second["input"] if i["type"] == "reasoning"] == [
        {"type": "reasoning", "encrypted_content": "gAAAA-opaque",
         "summary": [{"type": "summary_text", "text": "Thinking upstream."}]}
    ]  # fmt: skip


def _codex_wrapper(tmp_path: Path) -> Path:
    """A `codex` executable that runs the fake app-server."""
    path = tmp_path / "bin" / "codex"
    path.parent.mkdir(exist_ok=True)
    path.write_text(
        f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(fake_app_server.__file__)} "$@"\n'
    )
    path.chmod(0o755)
    return path


async def test_the_codex_agent_answers_the_sdk(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [{"match": "files", "steps": [{"text": "The agent looked."}]}],
                                  "models": ["gpt-agent"]}))  # fmt: skip
    (tmp_path / "work").mkdir()
    config = (
        f'[[upstreams]]\nname = "codex"\nkind = "codex"\ncodex_bin = "{_codex_wrapper(tmp_path)}"\n'
        f'workdir = "{tmp_path / "work"}"\n[[models]]\nname = "coder"\nupstream = "codex"\nmodel = "gpt-agent"\n'
    )
    environ = {"PATH": "/usr/bin:/bin", "FAKE_APP_SERVER_SCRIPT": str(script)}
    async with asyncio.timeout(60), served({}, config, tmp_path, environ) as url, sdk(url) as client:
        message = await client.messages.create(**ask())
        async with client.messages.stream(**ask()) as stream:
            streamed = await stream.get_final_message()
    assert [b.to_dict() for b in message.content] == [{"type": "text", "text": "The agent looked."}]
    assert message.stop_reason == "end_turn" and message.model == "coder"
    assert [b.to_dict() for b in streamed.content] == [{"type": "text", "text": "The agent looked."}]


POOL = """
[[upstreams]]
name = "dead"
base_url = "http://127.0.0.1:{dead}/v1"
[[upstreams]]
name = "gone"
base_url = "http://127.0.0.1:{gone}/v1"
[[upstreams]]
name = "live"
base_url = "{{live}}/v1"
[[models]]
name = "coder"
upstreams = ["dead", "live"]
model = "qwen"
[[models]]
name = "solo"
upstream = "gone"
model = "qwen"
fallbacks = ["coder"]
"""


async def test_a_pool_fails_over_from_its_dead_member_and_a_dead_route_falls_back(tmp_path: Path) -> None:
    upstream = FakeUpstream(lambda body: text_reply("Live answers."))
    config = POOL.format(dead=free_port(), gone=free_port())
    async with served({"live": upstream}, config, tmp_path) as url, sdk(url) as client:
        pooled = [await client.messages.with_raw_response.create(**ask()) for _ in range(2)]
        fallen = await client.messages.with_raw_response.create(**ask(model="solo"))
        health = httpx.get(url + "/healthz", timeout=10).json()
    # Two requests with no conversation start at each member in turn: one began at the dead one.
    for raw in pooled:  # (parsed after the gateway stopped: the body was read whole)
        assert raw.headers["x-codexgate-upstream"] == "live"
        assert (await raw.parse()).content[0].text == "Live answers."  # type: ignore[union-attr]
    assert health["upstreams"]["dead"]["failures"] >= 1
    assert fallen.headers["x-codexgate-route"] == "coder"
    message = await fallen.parse()
    assert message.model == "solo" and message.content[0].text == "Live answers."  # type: ignore[union-attr]
    assert {r.body["model"] for r in upstream.requests} == {"qwen"}


# -- errors before the first byte, in Anthropic's shape

GUARDED = """
max_body_bytes = 20000
[[upstreams]]
name = "local"
base_url = "{chat}/v1"
[[models]]
name = "coder"
upstream = "local"
[[models]]
name = "tiny"
upstream = "local"
context_window = 64
[[models]]
name = "other"
upstream = "local"
[[api_keys]]
name = "alice"
key_env = "ALICE_KEY"
models = ["coder", "tiny"]
[[api_keys]]
name = "limited"
key_env = "LIMITED_KEY"
requests_per_minute = 1
"""


def post(
    url: str, path: str = "/v1/messages?beta=true", key: str | None = ALICE, **body: Any
) -> httpx.Response:
    headers = {"anthropic-version": "2023-06-01"}
    if key is not None:
        headers["x-api-key"] = key
    return httpx.post(url + path, json=body, headers=headers, timeout=10)


@pytest.mark.parametrize(
    ("case", "status", "error_type", "words"),
    [
        ("no max_tokens", 400, "invalid_request_error", "max_tokens: Field required"),
        ("no key", 401, "authentication_error", "API key"),
        ("a wrong key", 401, "authentication_error", "API key"),
        ("a model the key may not use", 403, "permission_error", "other"),
        ("an unknown route", 404, "not_found_error", "/v1/messages/x"),
        ("a body too large", 413, "request_too_large", "20000"),
        ("a context too long", 400, "invalid_request_error", "prompt is too long: "),
    ],
)
async def test_an_error_before_the_first_byte_is_anthropics(
    tmp_path: Path, case: str, status: int, error_type: str, words: str
) -> None:
    upstream = FakeUpstream(lambda body: text_reply("never"))
    fields = ask()
    key: str | None = ALICE
    path = "/v1/messages?beta=true"
    if case == "no max_tokens":
        del fields["max_tokens"]
    elif case == "no key":
        key = None
    elif case == "a wrong key":
        key = "not-a-key"
    elif case == "a model the key may not use":
        fields["model"] = "other"
    elif case == "an unknown route":
        path = "/v1/messages/x"
    elif case == "a body too large":
        fields["messages"][0]["content"] = "x" * 30000
    else:
        fields.update(model="tiny", messages=[{"role": "user", "content": "word " * 200}])
    async with served({"chat": upstream}, GUARDED, tmp_path, KEYS) as url:
        answer = await asyncio.to_thread(post, url, path, key, **fields)
    assert answer.status_code == status, answer.text
    assert answer.json()["type"] == "error"
    assert answer.json()["error"]["type"] == error_type
    assert words in answer.json()["error"]["message"]
    assert not upstream.requests


async def test_a_context_too_long_for_the_route_says_both_sizes_as_claude_code_reads_them(
    tmp_path: Path,
) -> None:
    """Claude Code reads N and M of "prompt is too long: N tokens > M maximum" to know how much
    to drop when it compacts."""
    async with served({"chat": FakeUpstream()}, GUARDED, tmp_path, KEYS) as url, sdk(url, ALICE) as client:
        with pytest.raises(anthropic.BadRequestError) as caught:
            await client.messages.create(
                **ask(model="tiny", messages=[{"role": "user", "content": "word " * 200}])
            )
    assert caught.value.body["error"]["message"].startswith("prompt is too long: ")  # type: ignore[index]
    assert caught.value.body["error"]["message"].endswith(" tokens > 64 maximum")  # type: ignore[index]


async def test_a_key_past_its_limit_is_a_429_rate_limit_error_with_retry_after(tmp_path: Path) -> None:
    async with (
        served({"chat": FakeUpstream([text_reply("first")])}, GUARDED, tmp_path, KEYS) as url,
        sdk(url, LIMITED) as client,
    ):
        first = await client.messages.create(**ask(model="other"))
        with pytest.raises(anthropic.RateLimitError) as caught:
            await client.messages.create(**ask(model="other"))
    assert first.content[0].text == "first"  # type: ignore[union-attr]
    assert caught.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    assert 1 <= int(caught.value.response.headers["retry-after"]) <= 60


# -- after the first byte


async def test_a_failure_mid_stream_is_an_error_event_the_sdk_raises(tmp_path: Path) -> None:
    async with over_chat(FakeUpstream([cut_reply("Half an answer that")]), tmp_path) as url:
        seen: list[str] = []
        with pytest.raises(anthropic.APIStatusError) as caught:
            async with sdk(url) as client, client.messages.stream(**ask()) as stream:
                async for event in stream:
                    seen.append(event.type)
    assert "text" in seen  # the answer had started
    assert caught.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]


async def test_a_silent_upstream_gets_pings_and_the_answer_is_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(MessagesSSE, "keepalive_seconds", 0.05)
    upstream = FakeUpstream([stall_reply("Hello after a pause.", 0.6), stall_reply("Again.", 0.3)])
    async with over_chat(upstream, tmp_path) as url:
        async with httpx.AsyncClient(timeout=10) as http:
            async with http.stream("POST", url + "/v1/messages", json=ask(stream=True)) as answer:
                raw = (await answer.aread()).decode()
        async with sdk(url) as client, client.messages.stream(**ask()) as stream:
            message = await stream.get_final_message()
    kinds = [line.removeprefix("event: ") for line in raw.splitlines() if line.startswith("event: ")]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    pings = [n for n, kind in enumerate(kinds) if kind == "ping"]
    assert pings and 0 < pings[0] < kinds.index("message_delta")
    assert 'data: {"type":"ping"}' in raw
    assert message.content[0].text == "Again."  # type: ignore[union-attr]


# -- context editing


def _tool_loop(calls: int) -> list[JSON]:
    messages: list[JSON] = [{"role": "user", "content": "fix the build"}]
    for n in range(calls):
        use = {"type": "tool_use", "id": f"toolu_{n}", "name": "Bash", "input": {"command": f"ls {n}"}}
        result = {
            "type": "tool_result",
            "tool_use_id": f"toolu_{n}",
            "content": f"{n}: " + "output line\n" * 40,
        }
        messages += [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]
    return messages


async def test_claude_codes_tool_result_clearing_is_done_for_a_chat_upstream(tmp_path: Path) -> None:
    """The edit Claude Code builds when its tool-result clearing is on: the chat model reads
    the old results as a placeholder, and the stream reports what was cleared, on each request
    of the session (the client keeps its whole history; the edits are made anew)."""
    management = {"edits": [{
        "type": "clear_tool_uses_20250919", "trigger": {"type": "tool_uses", "value": 4},
        "keep": {"type": "tool_uses", "value": 2}, "clear_at_least": {"type": "input_tokens", "value": 100},
    }]}  # fmt: skip
    upstream = FakeUpstream([text_reply("Done."), text_reply("Done again.")])
    headers = {"X-Claude-Code-Session-Id": "edits-session"}
    async with over_chat(upstream, tmp_path) as url, sdk(url) as client:
        answers = []
        for calls in (6, 7):
            async with client.messages.stream(
                model="coder", max_tokens=1024, messages=_tool_loop(calls),  # type: ignore[arg-type]
                extra_body={"context_management": management}, extra_headers=headers,
            ) as stream:  # fmt: skip
                raw = [event.model_dump() async for event in stream]
                answers.append((raw, await stream.get_final_message()))
    for (raw, message), request, calls in zip(answers, upstream.requests, (6, 7), strict=True):
        outputs = [str(m["content"]) for m in request.body["messages"] if m["role"] == "tool"]
        assert outputs[: calls - 2] == [CLEARED_RESULT] * (calls - 2)
        assert [o.split(":")[0] for o in outputs[calls - 2 :]] == [str(calls - 2), str(calls - 1)]
        [delta] = [e for e in raw if e["type"] == "message_delta"]
        [report] = delta["context_management"]["applied_edits"]
        assert report["type"] == "clear_tool_uses_20250919" and report["cleared_tool_uses"] == calls - 2
        assert message.content[0].text in ("Done.", "Done again.")  # type: ignore[union-attr]


async def test_a_context_strategy_the_gateway_lacks_is_refused_before_anything_is_sent(
    tmp_path: Path,
) -> None:
    upstream = FakeUpstream([text_reply("never")])
    async with over_chat(upstream, tmp_path) as url:
        answer = await asyncio.to_thread(
            post, url, key=None, **ask(context_management={"edits": [{"type": "compact_20260112"}]})
        )
    assert answer.status_code == 400 and answer.json()["error"]["type"] == "invalid_request_error"
    assert (
        "does not support the compact_20260112 context management strategy"
        in answer.json()["error"]["message"]
    )
    assert not upstream.requests


# -- count_tokens and the model list


async def test_count_tokens_answers_the_sdk(tmp_path: Path) -> None:
    async with over_chat(FakeUpstream(), tmp_path) as url, sdk(url) as client:
        small = await client.messages.count_tokens(
            model="coder", messages=[{"role": "user", "content": "hi"}]
        )
        large = await client.messages.count_tokens(
            model="coder",
            messages=[{"role": "user", "content": "hi " * 400}],
            tools=[BASH],  # type: ignore[list-item]
        )
    assert 0 < small.input_tokens < large.input_tokens


async def test_count_tokens_reads_a_pdf_in_a_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PDF is read to be counted (about 1 ms a page): off the event loop, which serves every
    other stream meanwhile (bench/pdf_loop.py)."""
    on_a_loop: list[bool] = []
    count = MessagesFace.count_tokens

    def recorded(face: MessagesFace, *args: Any) -> Any:
        try:
            asyncio.get_running_loop()
            on_a_loop.append(True)
        except RuntimeError:  # a worker thread runs no loop
            on_a_loop.append(False)
        return count(face, *args)

    monkeypatch.setattr(MessagesFace, "count_tokens", recorded)
    pdf = text_pdf([["The quick brown fox jumps over the lazy dog. " * 4] * 40] * 3)
    source = {"type": "base64", "media_type": "application/pdf", "data": base64.b64encode(pdf).decode()}
    async with over_chat(FakeUpstream(), tmp_path) as url, sdk(url) as client:
        bare = await client.messages.count_tokens(model="coder", messages=[{"role": "user", "content": "hi"}])
        with_pdf = await client.messages.count_tokens(
            model="coder",
            messages=[{"role": "user", "content": [{"type": "document", "source": source}]}],  # type: ignore[list-item]
        )
    assert on_a_loop == [False, False]
    # Its text (3 pages of 40 lines, ~12,200 characters as read): ~3,050 tokens, not its
    # bytes (~31,000 in base64: ~7,800).
    assert 2500 < with_pdf.input_tokens - bare.input_tokens < 4000


async def test_the_model_list_is_anthropics_when_asked_with_anthropic_version(tmp_path: Path) -> None:
    extra = '[[models]]\nname = "coder"\nupstream = "local"\n[[models]]\nname = "claude-local"\nupstream = "local"\n'
    async with over_chat(FakeUpstream(), tmp_path, extra) as url:
        async with sdk(url) as client:
            page = await client.models.list()
        openai_shaped = httpx.get(url + "/v1/models", timeout=10).json()
    assert [(m.id, m.type, m.display_name) for m in page.data] == [
        ("coder", "model", "coder"), ("claude-local", "model", "claude-local"),
    ]  # fmt: skip
    assert openai_shaped["object"] == "list" and openai_shaped["data"][0]["object"] == "model"
