"""The live view (observability/live_view.py): its JSON state and event stream against a real gateway and a
fake upstream, its keys, its bounds, and the page itself in headless Chromium (Debian's, driven
by Playwright), with screenshots in the test's temporary directory."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import re
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from codexgate.app import build_app
from codexgate.config import load_settings
from codexgate.observability.live_view import LiveView
from codexgate.routing.router import Router
from codexgate.server.app import GatewayApp
from codexgate.server.exchange import Exchange
from codexgate.wire.responses import ResponsesRequest
from tests.support.fake_upstream import (
    FakeUpstream,
    Reply,
    error_reply,
    openai_error,
    text_reply,
    tool_calls_reply,
)
from tests.support.processes import until
from tests.support.servers import arun_asgi_server

CHROMIUM = Path("/usr/bin/chromium")
ALICE, BOB = "alice-secret-key-1", "bob-secret-key-22"
KEYS = {"CODEXGATE_API_KEYS": f"alice={ALICE},bob={BOB}"}
DEADLINE = 10.0
UPSTREAM_SECRET = "sk-proj-abcdefghijklmnop0123456789"  # a key shape the redactor knows


def reply_for(body: dict[str, Any]) -> Reply:
    """A conversation: ask for files -> a shell call; its result -> a streamed answer; a
    message saying "fail" -> an upstream error."""
    messages = body["messages"]
    last = messages[-1]
    if last["role"] == "tool":
        return text_reply("Here are the files: README.md and src/. " * 4, delay_between_chunks=0.03)
    if "fail" in str(last.get("content")):
        return error_reply(
            400,
            openai_error(
                f"This model's maximum context length is 8 tokens. (key {UPSTREAM_SECRET})",
                code="context_length_exceeded",
            ),
        )
    return tool_calls_reply(
        [("shell", '{"command": ["ls", "-la"], "workdir": "/repo"}')], reasoning="Look first."
    )


@asynccontextmanager
async def gateway(
    environ: Mapping[str, str] | None = None,
) -> AsyncIterator[tuple[str, GatewayApp, LiveView]]:
    async with arun_asgi_server(FakeUpstream(reply_for)) as fake_url:
        settings = load_settings(
            {"upstream": fake_url + "/v1", "discover": False, "store": "none"}, environ={}
        )
        app = build_app(settings, environ=dict(environ or {}))
        view = next(o for o in app.observers.all if isinstance(o, LiveView))
        async with arun_asgi_server(app, lifespan="on") as url:
            yield url, app, view


SHELL_TOOL = {"type": "function", "name": "shell", "parameters": {"type": "object"}}


def first_request(text: str = "list the files") -> dict[str, Any]:
    return {"model": "m", "input": text, "tools": [SHELL_TOOL], "stream": True}


def second_request(call: dict[str, Any]) -> dict[str, Any]:
    return {
        "model": "m",
        "tools": [SHELL_TOOL],
        "stream": True,
        "input": [
            {"type": "message", "role": "user", "content": "list the files"},
            {
                "type": "function_call",
                "call_id": call["call_id"],
                "name": "shell",
                "arguments": call["arguments"],
            },
            {"type": "function_call_output", "call_id": call["call_id"], "output": "README.md\nsrc/\n"},
        ],
    }


def call_of(stream_text: str) -> dict[str, Any]:
    for line in stream_text.splitlines():
        if line.startswith("data: ") and '"response.output_item.done"' in line:
            item = orjson.loads(line[6:])["item"]
            if item["type"] == "function_call":
                return dict(item)
    raise AssertionError("no function call in the stream")


async def settled_state(client: httpx.AsyncClient, headers: Mapping[str, str] | None = None) -> Any:
    """/ui/state once no turn is running: a turn ends a moment after its response does (the
    backend drains the upstream first)."""
    async with asyncio.timeout(DEADLINE):
        while True:
            state = (await client.get("/ui/state", headers=headers)).json()
            if not any(turn["live"] for turn in state["turns"]):
                return state
            await asyncio.sleep(0.002)


def sse_events(text: str) -> list[tuple[str, Any]]:
    found = []
    for block in text.split("\n\n"):
        kind = re.search(r"^event: (.+)$", block, re.M)
        data = re.search(r"^data: (.+)$", block, re.M)
        if kind and data:
            found.append((kind.group(1), orjson.loads(data.group(1))))
    return found


# -- the state and the stream


async def test_each_key_sees_its_day_and_an_admin_every_key_s() -> None:
    limits = {"name": "alice", "key_env": "ALICE", "tokens_per_day": 100_000, "requests_per_minute": 60}
    keys = [limits, {"name": "bob", "key_env": "BOB", "admin": True}]
    async with arun_asgi_server(FakeUpstream(lambda body: text_reply("hi"))) as fake_url:
        flags = {"upstream": fake_url + "/v1", "discover": False, "store": "none", "api_keys": keys}
        environ = {"ALICE": ALICE, "BOB": BOB}
        app = build_app(load_settings(flags, environ=environ), environ=environ)
        view = next(o for o in app.observers.all if isinstance(o, LiveView))
        view.keys_seconds = 0.05
        async with arun_asgi_server(app, lifespan="on") as url, httpx.AsyncClient(base_url=url) as client:
            alice, bob = {"authorization": f"Bearer {ALICE}"}, {"authorization": f"Bearer {BOB}"}
            async with client.stream("GET", "/ui/events", headers=alice) as events:
                lines = events.aiter_lines()
                assert (await anext(lines)).startswith("event: state")
                answered = await client.post(
                    "/v1/responses", json={"model": "m", "input": "x"}, headers=alice
                )
                assert answered.status_code == 200
                async with asyncio.timeout(DEADLINE):
                    while await anext(lines) != "event: keys":
                        pass
                    keys_event = orjson.loads((await anext(lines)).removeprefix("data: "))
            own = (await client.get("/ui/state", headers=alice)).json()["keys"]
            every = (await client.get("/ui/state", headers=bob)).json()["keys"]
    assert [(k["key"], k["requests"]) for k in keys_event["keys"]] == [("alice", 1)]
    assert own == keys_event["keys"] and own[0]["input_tokens"] > 0
    assert own[0]["limits"] == {"requests_per_minute": 60, "tokens_per_day": 100_000}
    assert [(k["key"], k["requests"], k["limits"]) for k in every] == [
        ("alice", 1, own[0]["limits"]),
        ("bob", 0, {}),
    ]


async def test_state_shows_turns_their_tool_calls_and_the_results_the_next_request_carried() -> None:
    async with gateway() as (url, _, view), httpx.AsyncClient(base_url=url) as client:
        first = await client.post("/v1/responses", json=first_request())
        call = call_of(first.text)
        second = await client.post("/v1/responses", json=second_request(call))
        failed = await client.post("/v1/responses", json={"model": "m", "input": "please fail"})
        state = await settled_state(client)
    assert first.status_code == second.status_code == 200 and failed.status_code == 400
    error, answer, asked = state["turns"]  # newest first
    assert error["status"] == 400 and error["outcome"] == "context_length_exceeded"
    assert error["error"]["code"] == "context_length_exceeded"
    assert "maximum context length is 8" in error["error"]["message"]
    assert "abcdefghijklmnop" not in orjson.dumps(error).decode()  # redacted as the response was
    assert (
        asked["user"] == "list the files"
        and asked["tools"] == ["shell"]
        and asked["reasoning"] == "Look first."
    )
    assert asked["calls"] == [
        {
            "call_id": call["call_id"],
            "name": "shell",
            "kind": "function_call",
            "arguments": call["arguments"],
            "arguments_clipped": False,
            "result": "README.md\nsrc/\n",
        }
    ]
    assert answer["carried"] == [{"call_id": call["call_id"], "name": "shell", "output": "README.md\nsrc/\n"}]
    assert answer["text"].startswith("Here are the files") and answer["outcome"] == "completed"
    assert answer["input_tokens"] > 0 and answer["output_tokens"] > 0 and answer["ttft_ms"] is not None
    assert not answer["live"] and answer["duration_ms"] >= answer["ttft_ms"]
    assert set(state["counts"]) == {"default"}
    assert not view.wants_batches(Exchange())  # nobody watching: the stream is not looked at


async def test_events_stream_a_turn_while_it_streams_coalesced() -> None:
    async with gateway() as (url, _, view), httpx.AsyncClient(base_url=url, timeout=DEADLINE) as client:
        first = await client.post("/v1/responses", json=first_request())
        await settled_state(client)  # the first turn has ended: what follows is the second's
        seen: list[tuple[str, Any]] = []
        async with asyncio.timeout(DEADLINE), client.stream("GET", "/ui/events") as events:
            assert events.headers["content-type"].startswith("text/event-stream")
            buffer = ""
            answer: asyncio.Task[httpx.Response] | None = None
            async for chunk in events.aiter_text():
                buffer += chunk
                seen = sse_events(buffer)
                if answer is None and seen and seen[0][0] == "state":
                    answer = asyncio.create_task(
                        client.post("/v1/responses", json=second_request(call_of(first.text)))
                    )
                if any(kind == "finished" for kind, _ in seen):
                    break
            assert answer is not None
            await answer
        await until(lambda: not view._subscribers, DEADLINE, "the browser was not let go")
    kinds = [kind for kind, _ in seen]
    assert kinds[0] == "state" and len(seen[0][1]["turns"]) == 1
    assert kinds[1] == "started" and kinds[-1] == "finished"
    updates = [data["turn"] for kind, data in seen if kind == "updated"]
    partial = [t["text"] for t in updates if t["live"] and t["text"]]
    final = seen[-1][1]["turn"]["text"]
    assert all(final.startswith(text) for text in partial) and len(partial[0]) < len(final)
    # About 45 text deltas over ~1.4 s: coalesced to at most one update per 100 ms.
    duration = seen[-1][1]["turn"]["duration_ms"] / 1000
    assert len(updates) <= duration / view.flush_seconds + 3
    assert "counts" in seen[-1][1]


async def test_data_routes_need_a_key_and_the_page_shell_does_not() -> None:
    async with gateway(KEYS) as (url, _, _view), httpx.AsyncClient(base_url=url) as client:
        alice = {"authorization": f"Bearer {ALICE}"}
        await client.post("/v1/responses", json=first_request("alice's secret plan"), headers=alice)
        refused = [await client.get(path) for path in ("/ui/state", "/ui/events", "/v1/ui", "/v1/ui/state")]
        wrong = await client.get("/ui/state", headers={"authorization": "Bearer not-a-key-at-all"})
        page = await client.get("/ui")
        post_page = await client.post("/ui", json={})
        own = await settled_state(client, alice)
        other = await settled_state(client, {"x-api-key": BOB})
    assert [r.status_code for r in refused] == [401, 401, 401, 401] and wrong.status_code == 401
    assert all(r.json()["error"]["code"] == "invalid_api_key" for r in [*refused, wrong])
    assert page.status_code == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
    assert "secret plan" not in page.text and ALICE not in page.text and "default" not in page.text
    assert post_page.status_code == 401  # the exemption is GET /ui and nothing else
    assert [t["user"] for t in own["turns"]] == ["alice's secret plan"]
    assert other["turns"] == []  # each key sees its own turns


async def test_page_allows_only_its_own_inline_script_and_style() -> None:
    async with gateway() as (url, _, _view), httpx.AsyncClient(base_url=url) as client:
        page = await client.get("/ui")
    policy = page.headers["content-security-policy"]
    (script,) = re.findall(r"<script>(.*?)</script>", page.text, re.S)
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}';" in policy and "default-src 'none'" in policy
    assert "unsafe-inline" not in policy and page.headers["x-frame-options"] == "DENY"


def test_the_view_is_on_by_default_and_off_with_ui_false() -> None:
    on = build_app(load_settings({"discover": False, "store": "none"}, environ={}), environ={})
    off = build_app(load_settings({"discover": False, "store": "none", "ui": False}, environ={}), environ={})
    (view,) = [o for o in on.observers.all if isinstance(o, LiveView)]
    assert {"/ui", "/ui/state", "/ui/events"} <= set(on.routes) and view.close in on.on_stopping
    assert not {"/ui", "/ui/state", "/ui/events"} & set(off.routes)
    assert not [o for o in off.observers.all if isinstance(o, LiveView)]


# -- bounds, without a network


class _Browser:
    """An ASGI client of /ui/events that reads nothing until told to."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.reading = asyncio.Event()
        self.left = asyncio.Event()
        self.ended = False

    async def receive(self) -> dict[str, Any]:
        await self.left.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            self.frames.append(message["body"])
            self.ended = not message.get("more_body", False)
            if len(self.frames) > 1:
                await self.reading.wait()  # a slow browser: the first frame, then nothing


def _exchange(number: int) -> Exchange:
    exchange = Exchange(f"req-{number}", "responses")
    exchange.model, exchange.status, exchange.outcome = "m", 200, "completed"
    return exchange


async def test_a_slow_browser_gets_one_resync_instead_of_an_unbounded_queue() -> None:
    view = LiveView(Router(), queue_limit=8, heartbeat_seconds=60)
    browser = _Browser()
    stream = asyncio.create_task(view._events_route({}, browser.receive, browser.send))
    await until(lambda: bool(view._subscribers), DEADLINE)
    view.finished(_exchange(0))
    await until(lambda: len(browser.frames) >= 2, DEADLINE)  # the writer is now stuck in send
    for number in range(1, 100):
        view.finished(_exchange(number))
    (subscriber,) = view._subscribers
    assert subscriber.behind and len(subscriber.pending) == 0
    browser.reading.set()
    await until(lambda: any(b"event: resync" in f for f in browser.frames), DEADLINE)
    browser.left.set()
    async with asyncio.timeout(DEADLINE):
        await stream
    resync = [f for f in browser.frames if f.startswith(b"event: resync")]
    assert len(resync) == 1 and len(orjson.loads(resync[0].split(b"data: ", 1)[1])["turns"]) == 100
    assert browser.ended and not view._subscribers


async def test_close_ends_every_event_stream() -> None:
    view = LiveView(Router())
    browser = _Browser()
    browser.reading.set()
    stream = asyncio.create_task(view._events_route({}, browser.receive, browser.send))
    await until(lambda: bool(view._subscribers), DEADLINE)
    view.close()
    async with asyncio.timeout(DEADLINE):
        await stream
    assert browser.ended and browser.frames[0].startswith(b"event: state")


async def test_a_conversation_s_user_message_is_found_without_walking_its_whole_history() -> None:
    view = LiveView(Router())
    history: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": "fix the bug"}]
    users = []
    for rounds, said in ((1, None), (1200, None), (1, "now run the tests")):
        if said:
            history.append({"type": "message", "role": "user", "content": said})
        for n in range(rounds):
            call_id = f"call_{len(history)}_{n}"
            history.append({"type": "function_call", "call_id": call_id, "name": "shell", "arguments": "{}"})
            history.append({"type": "function_call_output", "call_id": call_id, "output": "ok"})
        exchange = _exchange(len(users))
        exchange.req = ResponsesRequest(model="m", input=list(history), prompt_cache_key="thread-1")
        view.started(exchange)
        view.finished(exchange)
        users.append(view.snapshot(None)["turns"][0]["user"])
    # The second request's user message is 2,400 items back: the first request's stands.
    assert users == ["fix the bug", "fix the bug", "now run the tests"]


def test_the_ring_keeps_the_last_turns_only() -> None:
    view = LiveView(Router(), capacity=5)
    for number in range(12):
        view.finished(_exchange(number))
    turns = view.snapshot(None)["turns"]
    assert [t["request_id"] for t in turns] == [f"req-{n}" for n in range(11, 6, -1)]


# -- the page in a browser


def _need_chromium() -> None:
    if CHROMIUM.exists():
        return
    reason = f"{CHROMIUM} is missing (apt-get install chromium)"
    if os.environ.get("CODEXGATE_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason}; CODEXGATE_REQUIRE_BROWSER=1", pytrace=False)
    pytest.skip(reason)


async def test_the_page_shows_turns_tool_calls_and_errors_as_they_happen(tmp_path: Path) -> None:
    _need_chromium()
    from playwright.async_api import async_playwright, expect

    shots: list[Path] = []
    problems: list[str] = []

    async def shot(page: Any, name: str) -> None:
        path = tmp_path / f"{len(shots) + 1:02d}-{name}.png"
        await page.screenshot(path=str(path), full_page=True)
        shots.append(path)
        print(f"screenshot: {path}")

    alice = {"authorization": f"Bearer {ALICE}"}
    async with (
        gateway(KEYS) as (url, _, _view),
        httpx.AsyncClient(base_url=url, headers=alice, timeout=DEADLINE) as client,
    ):
        _view.keys_seconds = 0.1
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
            try:
                context = await browser.new_context(viewport={"width": 1440, "height": 900})
                page = await context.new_page()
                page.set_default_timeout(DEADLINE * 1000)
                page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
                page.on("pageerror", lambda e: problems.append(str(e)))

                await page.goto(url + "/ui")
                await expect(page.locator("#login")).to_be_visible()
                await page.fill("#key", "not-the-key-at-all")
                await page.press("#key", "Enter")
                await expect(page.locator("#login-err")).to_have_text("That key was refused.")
                await page.fill("#key", ALICE)
                await shot(page, "key-prompt")
                await page.press("#key", "Enter")
                await expect(page.locator("#login")).to_be_hidden()
                await expect(page.locator("#conn-text")).to_have_text("live")

                first = await client.post("/v1/responses", json=first_request())
                row = page.locator("#turns .turn").first
                await expect(row).to_contain_text("shell")
                call = call_of(first.text)
                await expect(page.locator("#turns .turn.st-live")).to_have_count(0)
                await expect(page.locator("#keys .key")).to_have_count(1)  # alice's own day only
                await expect(page.locator("#keys .key")).to_contain_text("alice")
                await expect(page.locator("#keys .key")).to_contain_text("1 req")

                answering = asyncio.create_task(client.post("/v1/responses", json=second_request(call)))
                await expect(page.locator("#turns .turn.st-live")).to_contain_text("streaming")
                await expect(page.locator("#detail .box.answer pre.caret")).to_contain_text("Here are")
                await shot(page, "streaming")
                assert (await answering).status_code == 200
                await expect(page.locator("#turns .turn").first).to_contain_text("200")
                await expect(page.locator("#detail .box.answer")).to_contain_text("README.md and src/.")
                await expect(page.locator("#detail")).to_contain_text("result of shell")
                await shot(page, "answer")

                await page.locator("#turns .turn").nth(1).click()
                await expect(page.locator("#detail .call .name")).to_have_text("shell")
                await expect(page.locator("#detail .call .args")).to_contain_text('"workdir": "/repo"')
                await expect(page.locator("#detail .call .res")).to_contain_text("README.md")
                await expect(page.locator("#detail")).to_contain_text("Look first.")  # reasoning, folded
                await shot(page, "tool-call")

                failed = await client.post("/v1/responses", json={"model": "m", "input": "please fail"})
                assert failed.status_code == 400
                await page.click("#follow")
                bad = page.locator("#turns .turn.st-err")
                await expect(bad).to_contain_text("context_length_exceeded")
                await expect(page.locator("#detail .box.error")).to_contain_text("context_length_exceeded")
                await expect(page.locator("#detail .box.error")).to_contain_text(
                    "maximum context length is 8"
                )
                await expect(page.locator("#t-errors")).to_have_text("1")
                await expect(page.locator("#t-turns")).to_have_text("3")
                await expect(page.locator("#chart-latency rect")).to_have_count(5)  # 3 durations, 2 TTFTs
                await shot(page, "error")

                await context.close()
                dark = await browser.new_context(viewport={"width": 1440, "height": 900}, color_scheme="dark")
                page = await dark.new_page()
                await page.goto(url + "/ui")
                await page.fill("#key", ALICE)
                await page.press("#key", "Enter")
                await page.click("#f-tools")
                await expect(page.locator("#turns .turn")).to_have_count(1)
                await page.locator("#turns .turn").first.click()
                await expect(page.locator("#detail .call .res")).to_contain_text("README.md")
                await shot(page, "dark")
                await dark.close()
            finally:
                await browser.close()
    # A refused key is a console error in Chromium ("401"); anything else is a fault of the page,
    # a Content-Security-Policy refusal included.
    assert [p for p in problems if "401" not in p] == []
    assert all(path.stat().st_size > 10_000 for path in shots)


async def test_with_no_page_open_a_turn_is_made_after_its_upstream_request_goes() -> None:
    # started() runs before the upstream request is written; the turn, and what it shows of
    # the request, are made at the loop's next turn (the request's task writes before it waits).
    view = LiveView(Router())
    exchange = _exchange(1)
    exchange.req = ResponsesRequest(model="m", input=[{"type": "message", "role": "user", "content": "hi"}])
    view.started(exchange)
    assert view.snapshot(None)["turns"] == []
    await asyncio.sleep(0)
    turns = view.snapshot(None)["turns"]
    assert [(t["user"], t["live"]) for t in turns] == [("hi", True)]
    view.finished(exchange)
    assert [(t["user"], t["live"]) for t in view.snapshot(None)["turns"]] == [("hi", False)]


async def test_an_exchange_that_ends_before_its_turn_was_made_is_shown_whole() -> None:
    view = LiveView(Router())
    exchange = _exchange(1)
    exchange.req = ResponsesRequest(model="m", input=[{"type": "message", "role": "user", "content": "hi"}])
    view.started(exchange)
    view.finished(exchange)  # before the loop's next turn
    await asyncio.sleep(0)  # the deferred start finds nothing left to do
    turns = view.snapshot(None)["turns"]
    assert [(t["user"], t["live"], t["outcome"]) for t in turns] == [("hi", False, "completed")]
