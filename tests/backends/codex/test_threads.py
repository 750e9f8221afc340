"""The Codex backend's threads (backends/codex/threads.py) against the fake app-server, a real
subprocess speaking the protocol (tests/support/fake_app_server.py): which thread a conversation
finds, eviction, the client tool calls a turn waits on and their timeout, generations, and the
inbox's bounds. Waits are on events under a deadline, never sleeps."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from codexgate.backends.codex.app_server import (
    AppServer,
    AppServerGone,
    AppServerLimits,
    ServerRequestRefused,
)
from codexgate.backends.codex.threads import AgentThread, AgentThreads, Gone, Inbox, InboxEvent, ToolCallAsked
from codexgate.errors import Code, InvalidRequest, UpstreamError, UpstreamTimeout
from codexgate.wire.app_server import TOOL_CALL, TURN_START, Notification, ServerRequest, text_output

FAKE = Path(__file__).resolve().parents[2] / "support" / "fake_app_server.py"
LIMITS = AppServerLimits(request_timeout=10.0, start_timeout=10.0, close_grace=2.0, restart_backoff=0.0)
JSON = dict[str, Any]
WEATHER_TURN = {
    "match": "weather",
    "steps": [
        {"text": "Looking."},
        {"tool_call": {"callId": "call_1", "tool": "get_weather", "arguments": {"city": "Oslo"}}},
        {"text": "Oslo: {answer}.", "item": "msg-2"},
    ],
}


@asynccontextmanager
async def fake_threads(
    tmp_path: Path, *, max_threads: int = 8, tool_result_timeout: float = 10.0, turns: tuple[JSON, ...] = ()
) -> AsyncIterator[tuple[AppServer, AgentThreads]]:
    """AgentThreads over a fake app-server whose `item/tool/call` requests they answer."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": list(turns)}))
    threads: AgentThreads | None = None

    async def answer(request: ServerRequest) -> Any:
        if request.method == TOOL_CALL and threads is not None:
            return await threads.tool_call(request.params)
        raise ServerRequestRefused("not in this test")

    env = {"PATH": "/usr/bin:/bin", "FAKE_APP_SERVER_SCRIPT": str(script)}
    server = AppServer([sys.executable, str(FAKE)], env=env, cwd=tmp_path, client_name="t",
                       on_server_request=answer, limits=LIMITS)  # fmt: skip
    threads = AgentThreads(server, max_threads, tool_result_timeout)
    try:
        async with asyncio.timeout(20):
            await server.start()
            yield server, threads
    finally:
        await threads.aclose()
        await server.close()


async def seen(server: AppServer, method: str, count: int = 1) -> None:
    """Until the fake has received `count` messages of `method`."""
    async with asyncio.timeout(10):
        await server.request("wait_for", {"method": method, "count": count})


async def received(server: AppServer, method: str) -> list[JSON]:
    state = await server.request("state")
    return [m["params"] for m in state["received"] if m["method"] == method]


async def next_event(thread: AgentThread) -> InboxEvent:
    return await thread.inbox.get(5.0, asyncio.get_running_loop().time() + 10.0)


async def until_turn_completed(thread: AgentThread) -> list[Notification]:
    notes: list[Notification] = []
    while True:
        event = await next_event(thread)
        assert isinstance(event, Notification), event
        notes.append(event)
        if event.method == "turn/completed":
            return notes


async def start_turn(server: AppServer, thread: AgentThread, text: str) -> None:
    result = await server.request(TURN_START, {"threadId": thread.id, "input": [{"type": "text", "text": text}]},
                                  generation=thread.generation)  # fmt: skip
    thread.turn_id = result["turn"]["id"]


def chain(*keys: int) -> list[tuple[int, int]]:
    """A chain as translate/codex_agent/request.py makes them: (items known, key), root first."""
    return [(n, key) for n, key in enumerate(keys)]


# -- finding, filing, dropping


async def test_a_filed_thread_is_found_by_a_chain_through_its_key_for_its_caller_only(tmp_path: Path) -> None:
    async with fake_threads(tmp_path) as (server, threads):
        thread = await threads.start("alice", 1, {"model": "m"})
        threads.file(thread, "alice", 30)
        assert threads.find("alice", chain(1, 20, 30, 40)) == (thread, 2)  # the longest prefix filed
        assert threads.find("alice", chain(1, 20, 31)) is None  # an earlier item changed
        assert threads.find("bob", chain(1, 20, 30, 40)) is None  # another caller's conversation
        assert threads.find(None, chain(1, 20, 30, 40)) is None
        threads.file(thread, "alice", 50)  # after its next answer: filed anew, not twice
        assert threads.find("alice", chain(1, 20, 30)) is None
        assert threads.find("alice", chain(1, 20, 30, 40, 50)) == (thread, 4)
        assert (await received(server, "thread/start")) == [{"model": "m"}]


async def test_a_busy_thread_is_not_found(tmp_path: Path) -> None:
    async with fake_threads(tmp_path) as (_, threads):
        thread = await threads.start(None, 1, {})
        threads.file(thread, None, 9)
        thread.busy = True
        assert threads.find(None, chain(1, 9)) is None
        thread.busy = False
        assert threads.find(None, chain(1, 9)) == (thread, 1)


async def test_a_dropped_thread_is_forgotten_and_unsubscribed(tmp_path: Path) -> None:
    async with fake_threads(tmp_path) as (server, threads):
        thread = await threads.start(None, 1, {})
        threads.file(thread, None, 9)
        threads.drop(thread)
        assert len(threads) == 0 and threads.find(None, chain(1, 9)) is None
        await seen(server, "thread/unsubscribe")
        assert await received(server, "thread/unsubscribe") == [{"threadId": thread.id}]
        assert await received(server, "turn/interrupt") == []  # it had no turn to interrupt


async def test_the_least_recently_used_idle_thread_is_evicted_at_max_threads(tmp_path: Path) -> None:
    async with fake_threads(tmp_path, max_threads=3) as (server, threads):
        first, second, third = [await threads.start(None, 1, {}) for _ in range(3)]
        for key, thread in ((10, first), (20, second), (30, third)):
            threads.file(thread, None, key)
        assert threads.find(None, chain(1, 10)) == (first, 1)  # the first is used again
        third.busy = True  # a response reads it
        fourth = await threads.start(None, 1, {})
        assert len(threads) == 3
        assert threads.find(None, chain(1, 20)) is None  # the second went: idle, and used least lately
        assert threads.find(None, chain(1, 10)) == (first, 1)
        await seen(server, "thread/unsubscribe")
        assert await received(server, "thread/unsubscribe") == [{"threadId": second.id}]
        assert fourth.id not in (first.id, second.id, third.id)


async def test_threads_in_use_are_not_evicted_the_bound_gives_way(tmp_path: Path) -> None:
    async with fake_threads(tmp_path, max_threads=1) as (_, threads):
        busy = await threads.start(None, 1, {})
        busy.busy = True
        other = await threads.start(None, 1, {})
        assert len(threads) == 2 and busy.id != other.id


# -- client tool calls


async def test_a_tool_call_waits_for_the_clients_result_and_the_turn_goes_on(tmp_path: Path) -> None:
    async with fake_threads(tmp_path, turns=(WEATHER_TURN,)) as (server, threads):
        thread = await threads.start(None, 1, {})
        thread.busy = True
        await start_turn(server, thread, "weather in Oslo?")
        before: list[Notification] = []
        while not isinstance(event := await next_event(thread), ToolCallAsked):
            assert isinstance(event, Notification)
            before.append(event)
        assert event == ToolCallAsked("call_1", "get_weather", None, {"city": "Oslo"})
        assert [n.params.get("delta") for n in before if n.method == "item/agentMessage/delta"] == [
            "Looking."
        ]
        assert list(thread.pending) == ["call_1"]
        thread.answer("call_1", text_output("sunny"))
        notes = await until_turn_completed(thread)
        assert [n.params["delta"] for n in notes if n.method == "item/agentMessage/delta"] == ["Oslo: sunny."]
        assert thread.pending == {}
        replies = (await server.request("state"))["replies"]
        assert replies == [{"method": TOOL_CALL, "result": text_output("sunny")}]


async def test_a_result_that_never_comes_fails_the_call_interrupts_the_turn_and_is_refused_later(
    tmp_path: Path,
) -> None:
    async with fake_threads(tmp_path, tool_result_timeout=0.2, turns=(WEATHER_TURN,)) as (server, threads):
        thread = await threads.start("alice", 1, {})
        threads.file(thread, "alice", 9)
        await start_turn(server, thread, "weather in Oslo?")
        while not isinstance(await next_event(thread), ToolCallAsked):
            pass
        # the response that read the call ended: nobody reads the thread while the client runs the tool
        await seen(server, "turn/interrupt")
        assert await received(server, "turn/interrupt") == [{"threadId": thread.id, "turnId": thread.turn_id}]
        await seen(server, "thread/unsubscribe")
        assert len(threads) == 0 and threads.find("alice", chain(1, 9)) is None
        [reply] = (await server.request("state"))["replies"]
        assert reply["method"] == TOOL_CALL and reply["result"]["success"] is False  # the model is told
        late = [{"type": "function_call_output", "call_id": "call_1", "output": "sunny"}]
        with pytest.raises(InvalidRequest) as caught:
            threads.refuse_expired("alice", late)
        assert caught.value.param == "input" and "call_1" in caught.value.message
        threads.refuse_expired("bob", late)  # another caller's call of the same id is not refused
        threads.refuse_expired("alice", [{"type": "function_call_output", "call_id": "call_2", "output": ""}])


async def test_a_dropped_thread_fails_the_calls_it_waits_on(tmp_path: Path) -> None:
    async with fake_threads(tmp_path, turns=(WEATHER_TURN,)) as (server, threads):
        thread = await threads.start(None, 1, {})
        await start_turn(server, thread, "weather in Oslo?")
        while not isinstance(await next_event(thread), ToolCallAsked):
            pass
        threads.drop(thread, interrupt=True)
        await seen(server, "turn/interrupt")
        [reply] = (await server.request("state"))["replies"]
        assert reply["result"]["success"] is False


async def test_a_tool_call_for_no_thread_is_answered_at_once_with_a_failure(tmp_path: Path) -> None:
    async with fake_threads(tmp_path) as (_, threads):
        result = await threads.tool_call({"threadId": "thr-none", "callId": "c", "tool": "t"})
    assert result["success"] is False


# -- generations


async def test_threads_of_an_older_app_server_are_forgotten(tmp_path: Path) -> None:
    async with fake_threads(tmp_path) as (server, threads):
        thread = await threads.start(None, 1, {})
        threads.file(thread, None, 9)
        with pytest.raises(AppServerGone):
            await server.request("die", {"code": 1})
        while not isinstance(gone := await next_event(thread), Gone):  # after what came before
            assert isinstance(gone, Notification)
        assert isinstance(gone.error, AppServerGone)  # a reader learns that its thread is gone
        assert await server.start() == 2
        assert threads.find(None, chain(1, 9)) is None  # its id means nothing to the new process
        threads.forget_older_than(2)
        assert len(threads) == 0
        assert await received(server, "thread/unsubscribe") == []  # nothing is sent to the new process


# -- the inbox


async def test_the_inbox_gives_up_after_its_idle_timeout() -> None:
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(5):
        with pytest.raises(UpstreamTimeout) as caught:
            await Inbox().get(0.05, loop.time() + 60)
    assert caught.value.code == Code.UPSTREAM_TIMEOUT


async def test_the_inbox_gives_up_at_the_total_deadline_whatever_the_idle_timeout() -> None:
    loop = asyncio.get_running_loop()
    inbox = Inbox()
    note = Notification("item/agentMessage/delta", {"delta": "x"})
    async with asyncio.timeout(5):  # the idle timeout (60 s) would never fire in time
        for _ in range(3):
            loop.call_soon(inbox.put, note)
            assert await inbox.get(60, loop.time() + 60) == note  # events keep coming...
        with pytest.raises(UpstreamTimeout) as caught:
            await inbox.get(60, loop.time() + 0.05)  # ...until the response's budget is spent
    assert caught.value.code == Code.UPSTREAM_TIMEOUT
    with pytest.raises(UpstreamTimeout):
        await inbox.get(60, loop.time() - 1)  # a budget already spent


async def test_an_event_before_the_idle_timeout_is_delivered() -> None:
    loop = asyncio.get_running_loop()
    inbox = Inbox()
    note = Notification("turn/completed", {})
    loop.call_later(0.05, inbox.put, note)
    async with asyncio.timeout(5):
        assert await inbox.get(2.0, loop.time() + 60) == note


async def test_an_inbox_nobody_reads_is_given_up_when_full() -> None:
    inbox = Inbox(capacity=3)
    for n in range(4):
        inbox.put(Notification("item/agentMessage/delta", {"delta": str(n)}))
    inbox.put(Notification("turn/completed", {}))  # ignored: the thread is given up
    loop = asyncio.get_running_loop()
    for _ in range(2):  # every reader is told, the events are gone
        event = await inbox.get(1.0, loop.time() + 5)
        assert isinstance(event, Gone) and isinstance(event.error, UpstreamError)


def test_parallel_tool_calls_are_taken_together_from_the_head_only() -> None:
    inbox = Inbox()
    first, second = ToolCallAsked("c1", "t", None, {}), ToolCallAsked("c2", "t", None, {})
    note = Notification("item/started", {})
    for event in (first, second, note, ToolCallAsked("c3", "t", None, {})):
        inbox.put(event)
    assert inbox.take_tool_calls() == [first, second]
    assert inbox.take_tool_calls() == []
