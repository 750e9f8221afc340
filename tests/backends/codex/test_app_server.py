"""The supervised app-server client, against a fake app-server process and the real Codex (0.171,
0.169).

The fake (tests/support/fake_app_server.py) is a real subprocess speaking the same framing, so
the pipes, the reader, stderr draining, exits and restarts are exercised for real. Waits are on
events under a deadline, never sleeps.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from codexgate.backends.codex import app_server as client_module
from codexgate.backends.codex.app_server import (
    AppServer,
    AppServerClosed,
    AppServerGone,
    AppServerLimits,
    AppServerOverflow,
    AppServerRpcError,
    AppServerStartError,
    AppServerTimeout,
    ServerRequestRefused,
    ThreadSubscription,
)
from codexgate.wire import app_server as wire
from codexgate.wire.app_server import ErrorCode, Notification, ServerRequest
from tests.e2e.codex_cli import codex_versions
from tests.support.processes import wait_for_exit

FAKE = Path(__file__).resolve().parents[2] / "support" / "fake_app_server.py"
FAST = AppServerLimits(
    request_timeout=10.0,
    start_timeout=10.0,
    close_grace=2.0,
    restart_backoff=0.0,
    server_request_timeout=5.0,
)
JSON = dict[str, Any]


async def refuse(request: ServerRequest) -> Any:
    raise ServerRequestRefused("no handler in this test")


def fake_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", ""), "FAKE_APP_SERVER_STATE": str(tmp_path / "starts")}
    return {**env, **extra}


def starts(tmp_path: Path) -> int:
    return int((tmp_path / "starts").read_text())


@asynccontextmanager
async def fake_server(
    tmp_path: Path,
    *,
    on_server_request: Callable[[ServerRequest], Awaitable[Any]] = refuse,
    on_notification: Callable[[Notification], None] | None = None,
    limits: AppServerLimits = FAST,
    **env: str,
) -> AsyncIterator[AppServer]:
    server = AppServer(
        [sys.executable, str(FAKE)],
        env=fake_env(tmp_path, **env),
        cwd=tmp_path,
        client_name="codexgate-test",
        on_server_request=on_server_request,
        on_notification=on_notification,
        limits=limits,
    )
    try:
        yield server
    finally:
        await server.close()


async def collect(subscription: ThreadSubscription, count: int, timeout: float = 10.0) -> list[Notification]:
    notes: list[Notification] = []
    async with asyncio.timeout(timeout):
        async for note in subscription:
            notes.append(note)
            if len(notes) == count:
                break
    return notes


async def collect_deltas(
    subscription: ThreadSubscription, count: int, timeout: float = 10.0
) -> list[Notification]:
    """A thread's notifications until `count` agent-message deltas came (what came with them too)."""
    notes: list[Notification] = []
    async with asyncio.timeout(timeout):
        async for note in subscription:
            notes.append(note)
            if sum(n.method == "item/agentMessage/delta" for n in notes) == count:
                break
    return notes


# -- start ---------------------------------------------------------------------------------------


async def test_start_initializes_with_experimental_api_and_quiet_notifications(tmp_path: Path) -> None:
    async with fake_server(tmp_path) as server:
        assert server.generation == 0 and not server.running
        assert await server.start() == 1
        state = await server.request("state")
    assert state["initialized"] is True
    assert state["clientInfo"]["name"] == "codexgate-test"
    assert state["capabilities"]["experimentalApi"] is True
    assert state["capabilities"]["optOutNotificationMethods"] == list(wire.DEFAULT_OPT_OUT_NOTIFICATIONS)
    assert server.server_info["userAgent"] == "fake/0.0"


async def test_the_first_request_starts_the_process(tmp_path: Path) -> None:
    async with fake_server(tmp_path) as server:
        assert (await server.request("echo", {"a": 1}))["params"] == {"a": 1}
        assert server.generation == 1 and server.running


async def test_start_gives_up_after_bounded_attempts_with_the_exit_and_stderr(tmp_path: Path) -> None:
    async with fake_server(tmp_path, FAKE_APP_SERVER_FAIL_STARTS="99") as server:
        with pytest.raises(AppServerStartError) as caught:
            await server.start()
    assert starts(tmp_path) == FAST.start_attempts
    assert caught.value.exit_code == 3
    assert "fatal: cannot start" in caught.value.stderr_tail
    assert "fatal: cannot start" in str(caught.value)


async def test_a_start_that_fails_once_is_retried(tmp_path: Path) -> None:
    async with fake_server(tmp_path, FAKE_APP_SERVER_FAIL_STARTS="1") as server:
        assert await server.start() == 1
        assert starts(tmp_path) == 2


async def test_a_process_that_never_answers_initialize_is_killed_and_retried(tmp_path: Path) -> None:
    limits = AppServerLimits(start_timeout=0.3, start_attempts=2, restart_backoff=0.0, close_grace=2.0)
    async with fake_server(tmp_path, limits=limits, FAKE_APP_SERVER_IGNORE_INITIALIZE="1") as server:
        with pytest.raises(AppServerStartError, match="initialize"):
            await server.start()
        pid = server.pid
        assert pid is not None and starts(tmp_path) == 2
        await wait_for_exit(pid)
        assert server.generation == 0


async def test_close_before_a_start_runs_wins(tmp_path: Path) -> None:
    async with fake_server(tmp_path) as server:
        starting = asyncio.create_task(server.start())
        await server.close()
        with pytest.raises(AppServerClosed):
            await starting
    assert not (tmp_path / "starts").exists()


async def test_a_binary_that_cannot_run_is_a_start_error(tmp_path: Path) -> None:
    server = AppServer(
        [str(tmp_path / "no-such-codex"), "app-server"],
        env={},
        cwd=tmp_path,
        client_name="t",
        on_server_request=refuse,
        limits=FAST,
    )
    with pytest.raises(AppServerStartError, match="cannot run"):
        await server.request("model/list")
    await server.close()


# -- requests and notifications ------------------------------------------------------------------


async def test_answers_find_their_requests_whatever_their_order(tmp_path: Path) -> None:
    async with fake_server(tmp_path) as server:
        await server.start()
        deferred = [asyncio.create_task(server.request("echo", {"n": n, "defer": True})) for n in range(20)]
        await server.request("echo", {"barrier": True})  # all 20 were read before it
        assert (await server.request("flush"))["flushed"] == 20  # answers come in reverse
        results = await asyncio.gather(*deferred)
    assert [r["params"]["n"] for r in results] == list(range(20))


async def test_notifications_reach_their_threads_subscriber_and_the_rest_the_handler(tmp_path: Path) -> None:
    unrouted: list[Notification] = []
    async with fake_server(tmp_path, on_notification=unrouted.append) as server:
        generation = await server.start()
        first = (await server.request("thread/start", generation=generation))["thread"]["id"]
        second = (await server.request("thread/start", generation=generation))["thread"]["id"]
        a = server.subscribe(first, generation=generation)
        b = server.subscribe(second)
        answer = await server.request("chatter", {"threads": [first, second, "thr-unknown"], "count": 50})
        assert answer == {"sent": 150}
        # `thread/started` follows the answer to thread/start, as on Codex: it reaches a thread's
        # subscriber when the subscription came first, else the handler.
        got_a, got_b = await collect_deltas(a, 50), await collect_deltas(b, 50)
    deltas_a = [n for n in got_a if n.method == "item/agentMessage/delta"]
    assert [n.params["delta"] for n in deltas_a] == [str(k) for k in range(50)]
    assert {n.thread_id for n in got_a} == {first} and {n.thread_id for n in got_b} == {second}
    methods = [n.method for n in unrouted]
    started = methods + [n.method for n in got_a + got_b]
    # Unknown threads and process-wide notes go to the handler.
    assert started.count("thread/started") == 2 and methods.count("configWarning") == 1
    assert methods.count("item/agentMessage/delta") == 50


async def test_a_json_rpc_error_answer_keeps_its_code(tmp_path: Path) -> None:
    async with fake_server(tmp_path) as server:
        with pytest.raises(AppServerRpcError) as caught:
            await server.request("no/such/method")
        assert caught.value.rpc_code == ErrorCode.INVALID_REQUEST
        assert caught.value.method == "no/such/method"
        assert (await server.request("echo"))["params"] == {}


async def test_a_request_without_answer_times_out_and_the_process_stays_usable(tmp_path: Path) -> None:
    async with fake_server(tmp_path) as server:
        with pytest.raises(AppServerTimeout):
            await server.request("hang", timeout=0.2)
        assert (await server.request("echo", {"still": "here"}))["params"] == {"still": "here"}
        assert server.generation == 1


async def test_lines_that_are_not_json_rpc_are_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with fake_server(tmp_path) as server:
        assert await server.request("garbage") == {}
        assert (await server.request("echo"))["params"] == {}
    assert sum("not JSON-RPC" in r.getMessage() for r in caplog.records) == 2


async def test_a_large_line_arrives_whole(tmp_path: Path) -> None:
    limits = AppServerLimits(max_line_bytes=8 * 1024 * 1024, restart_backoff=0.0)
    async with fake_server(tmp_path, limits=limits) as server:
        result = await server.request("big", {"size": 6_000_000})
    assert len(result["data"]) == 6_000_000


async def test_a_line_over_the_limit_stops_the_process_clearly(tmp_path: Path) -> None:
    limits = AppServerLimits(max_line_bytes=1024 * 1024, restart_backoff=0.0, close_grace=2.0)
    async with fake_server(tmp_path, limits=limits) as server:
        with pytest.raises(AppServerGone, match="over 1048576 bytes"):
            await server.request("big", {"size": 2 * 1024 * 1024})
        assert (await server.request("echo"))["params"] == {}
        assert server.generation == 2


async def test_subscribing_to_a_generation_that_is_not_live_fails(tmp_path: Path) -> None:
    async with fake_server(tmp_path) as server:
        with pytest.raises(AppServerGone):
            server.subscribe("thr-1")  # nothing started yet
        await server.start()
        with pytest.raises(AppServerGone):
            server.subscribe("thr-1", generation=7)


async def test_a_second_subscription_to_a_thread_ends_the_first(tmp_path: Path) -> None:
    async with fake_server(tmp_path) as server:
        await server.start()
        first = server.subscribe("thr-1")
        second = server.subscribe("thr-1")
        await server.request("chatter", {"threads": ["thr-1"], "count": 3})
        assert [n async for n in first] == []
        assert len(await collect(second, 3)) == 3


async def test_a_subscriber_that_falls_behind_is_cut_alone(tmp_path: Path) -> None:
    limits = AppServerLimits(subscription_queue=5, restart_backoff=0.0)
    async with fake_server(tmp_path, limits=limits) as server:
        await server.start()
        slow = server.subscribe("thr-1")
        other = server.subscribe("thr-2")
        await server.request("chatter", {"threads": ["thr-1", "thr-2"], "count": 5})
        await server.request("chatter", {"threads": ["thr-1"], "count": 1})
        received: list[Notification] = []
        with pytest.raises(AppServerOverflow):
            async for note in slow:
                received.append(note)
        assert len(received) == 5
        assert len(await collect(other, 5)) == 5
        assert (await server.request("echo"))["params"] == {}


# -- server requests -----------------------------------------------------------------------------


async def test_a_server_request_is_answered_with_the_callbacks_result(tmp_path: Path) -> None:
    seen: list[ServerRequest] = []

    async def answer(request: ServerRequest) -> Any:
        seen.append(request)
        return wire.text_output("Sunny, 21 C")

    call = {"threadId": "thr-1", "turnId": "t", "callId": "c1", "tool": "get_weather", "arguments": {}}
    async with fake_server(tmp_path, on_server_request=answer) as server:
        reply = await server.request("ask", {"method": wire.TOOL_CALL, "params": call})
    assert reply["answer"] == {"result": wire.text_output("Sunny, 21 C")}
    assert seen[0].method == wire.TOOL_CALL and seen[0].thread_id == "thr-1" and seen[0].id == 0


@pytest.mark.parametrize(
    ("failure", "code"),
    [
        (ValueError("handler bug"), ErrorCode.INTERNAL_ERROR),
        (ServerRequestRefused("declined", code=-32050), -32050),
    ],
)
async def test_a_failing_callback_is_answered_with_a_json_rpc_error(
    tmp_path: Path, failure: Exception, code: int
) -> None:
    async def answer(request: ServerRequest) -> Any:
        raise failure

    async with fake_server(tmp_path, on_server_request=answer) as server:
        reply = await server.request("ask", {"method": wire.COMMAND_APPROVAL})
    assert reply["answer"]["error"]["code"] == code


async def test_a_callback_that_does_not_answer_in_time_is_answered_with_an_error(tmp_path: Path) -> None:
    never = asyncio.Event()

    async def answer(request: ServerRequest) -> Any:
        await never.wait()

    limits = AppServerLimits(server_request_timeout=0.2, restart_backoff=0.0)
    async with fake_server(tmp_path, on_server_request=answer, limits=limits) as server:
        reply = await server.request("ask", {"method": wire.TOOL_CALL})
    assert reply["answer"]["error"]["code"] == ErrorCode.NO_ANSWER


async def test_an_unknown_server_request_is_refused_at_once(tmp_path: Path) -> None:
    called = False

    async def answer(request: ServerRequest) -> Any:
        nonlocal called
        called = True

    async with fake_server(tmp_path, on_server_request=answer) as server:
        reply = await server.request("ask", {"method": "future/request"})
    assert reply["answer"]["error"]["code"] == ErrorCode.METHOD_NOT_FOUND
    assert not called


# -- exits and restarts --------------------------------------------------------------------------


async def test_a_dying_process_fails_everything_pending_with_its_exit_and_stderr(tmp_path: Path) -> None:
    async with fake_server(tmp_path) as server:
        await server.start()
        events = server.subscribe("thr-1")
        await server.request("chatter", {"threads": ["thr-1"], "count": 2})
        hanging = asyncio.create_task(server.request("hang"))
        await server.request("echo")  # the hang was read
        with pytest.raises(AppServerGone) as died:
            await server.request("die", {"code": 3, "stderr": ["fatal: out of cheese"]})
        with pytest.raises(AppServerGone) as pending:
            await hanging
        received: list[Notification] = []
        with pytest.raises(AppServerGone) as subscribed:
            async for note in events:
                received.append(note)
    for error in (died.value, pending.value, subscribed.value):
        assert error.exit_code == 3 and error.generation == 1
        assert "fatal: out of cheese" in error.stderr_tail
    assert "exit code 3" in str(died.value) and "fatal: out of cheese" in str(died.value)
    assert len(received) == 2  # what arrived before the exit is still delivered


async def test_the_next_request_starts_a_new_generation(tmp_path: Path) -> None:
    async with fake_server(tmp_path) as server:
        first_pid = (await server.request("state"))["pid"]
        with pytest.raises(AppServerGone):
            await server.request("die", {"code": 1})
        with pytest.raises(AppServerGone):
            await server.request("echo", generation=1)  # a thread of generation 1 is gone
        state = await server.request("state")
        assert state["pid"] != first_pid and state["initialized"] is True
        assert server.generation == 2
        with pytest.raises(AppServerGone):
            server.subscribe("thr-1", generation=1)


async def test_a_killed_process_is_reported_with_its_signal(tmp_path: Path) -> None:
    async with fake_server(tmp_path) as server:
        await server.start()
        hanging = asyncio.create_task(server.request("hang"))
        await server.request("echo")
        assert server.pid is not None
        os.kill(server.pid, signal.SIGKILL)
        with pytest.raises(AppServerGone) as caught:
            await hanging
        assert caught.value.exit_code == -signal.SIGKILL
        assert (await server.request("echo"))["params"] == {}


async def test_restarts_after_crashes_back_off(tmp_path: Path) -> None:
    limits = AppServerLimits(restart_backoff=0.01, max_restart_backoff=0.05)
    async with fake_server(tmp_path, limits=limits) as server:
        assert server._backoff(0) == 0.0  # first start: at once
        for _ in range(3):
            with pytest.raises(AppServerGone):
                await server.request("die", {"code": 1})
        assert server._backoff(0) == pytest.approx(0.04)  # three recent crashes: 0.01 * 2**2
        assert server._backoff(1) == pytest.approx(0.05)  # and a failed attempt more: capped


async def test_a_stderr_flood_neither_blocks_the_process_nor_floods_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="codexgate.app_server")
    limits = AppServerLimits(stderr_lines_per_second=20.0, stderr_burst=50, restart_backoff=0.0)
    began = time.monotonic()
    async with fake_server(tmp_path, limits=limits) as server:
        # Far beyond a pipe's 64 KiB: an undrained stderr would block the fake mid-flood.
        assert (await server.request("stderr_flood", {"lines": 100_000}))["written"] == 100_000
        with pytest.raises(AppServerGone) as died:
            await server.request("die", {"code": 2, "stderr": ["last words"]})
    elapsed = time.monotonic() - began
    logged = [r for r in caplog.records if "flood line" in r.getMessage()]
    assert 0 < len(logged) <= 50 + 20 * elapsed + 1
    assert died.value.stderr_tail[-1] == "last words"
    assert len(died.value.stderr_tail) == limits.stderr_tail_lines


# -- close ---------------------------------------------------------------------------------------


async def test_close_fails_pending_requests_and_stops_the_whole_group(tmp_path: Path) -> None:
    limits = AppServerLimits(close_grace=0.5, restart_backoff=0.0)
    async with fake_server(tmp_path, limits=limits) as server:
        child = (await server.request("spawn_child"))["child"]
        hanging = asyncio.create_task(server.request("hang"))
        await server.request("echo")
        # The fake exits when stdin closes; its child still holds stdout, as the native binary
        # does when only the npm launcher is gone: the group gets SIGTERM after the grace.
        await server.close()
        with pytest.raises(AppServerClosed):
            await hanging
        await wait_for_exit(child)
        assert not server.running


async def test_after_close_nothing_starts_again(tmp_path: Path) -> None:
    async with fake_server(tmp_path) as server:
        await server.start()
        await server.close()
        await server.close()
        with pytest.raises(AppServerClosed):
            await server.request("echo")
        with pytest.raises(AppServerClosed):
            await server.start()
    assert starts(tmp_path) == 1


def test_the_public_surface_is_pinned() -> None:
    assert set(client_module.__all__) == {
        "AppServer",
        "AppServerClosed",
        "AppServerError",
        "AppServerGone",
        "AppServerLimits",
        "AppServerOverflow",
        "AppServerRpcError",
        "AppServerStartError",
        "AppServerTimeout",
        "NotificationHandler",
        "ServerRequestHandler",
        "ServerRequestRefused",
        "ThreadSubscription",
    }


# -- the real `codex app-server` over a scripted upstream ------------------------------------------

MODEL = "local-coder"


def real_env(home: Path) -> dict[str, str]:
    """The test's environment without Codex's own variables (tests may run inside Codex)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_")}
    return {**env, "CODEX_HOME": str(home), "NO_COLOR": "1"}


@asynccontextmanager
async def real_codex(
    tmp_path: Path,
    script: Any,
    on_server_request: Callable[[ServerRequest], Awaitable[Any]] = refuse,
    version: str | None = None,
) -> AsyncIterator[tuple[AppServer, Any]]:
    """The real app-server (`version`, default the current release), its model provider pointed
    at codexgate over a FakeUpstream."""
    from codexgate.app import build_app
    from codexgate.commands.codex_setup.catalog import ModelSpec, write_codex_setup
    from codexgate.config import load_settings
    from tests.e2e.codex_cli import CODEX_VERSION, codex_binary
    from tests.support.fake_upstream import FakeUpstream
    from tests.support.servers import arun_asgi_server

    codex = codex_binary(version or CODEX_VERSION)
    fake = FakeUpstream(script)
    async with arun_asgi_server(fake) as upstream:
        settings = load_settings({"upstream": upstream + "/v1", "discover": False}, environ={})
        async with arun_asgi_server(build_app(settings, environ={}), lifespan="on") as gateway:
            home = tmp_path / "home"
            spec = ModelSpec(slug=MODEL, context_window=None)
            setup = write_codex_setup(home, gateway, [spec], codex_home=home, base_instructions="Be brief.")
            # `codex app-server` takes no --profile: the profile layer becomes the config itself.
            (home / "config.toml").write_text(setup.config_path.read_text())
            (tmp_path / "work").mkdir()
            server = AppServer(
                [str(codex), "app-server"],
                env=real_env(home),
                cwd=tmp_path / "work",
                client_name="codexgate-test",
                on_server_request=on_server_request,
                limits=AppServerLimits(request_timeout=20.0, close_grace=5.0),
            )
            try:
                yield server, fake
            finally:
                await server.close()


def thread_params(tmp_path: Path, **extra: Any) -> JSON:
    return {
        "model": MODEL,
        "cwd": str(tmp_path / "work"),
        "approvalPolicy": "never",
        "sandbox": "read-only",
        "ephemeral": True,
        "developerInstructions": "Answer in one line.",
        **extra,
    }


def text_turn(thread_id: str, text: str) -> JSON:
    return {"threadId": thread_id, "input": [{"type": "text", "text": text}]}


async def until_turn_completed(events: ThreadSubscription, timeout: float = 30.0) -> list[Notification]:
    notes: list[Notification] = []
    async with asyncio.timeout(timeout):
        async for note in events:
            notes.append(note)
            if note.method == wire.TURN_COMPLETED:
                return notes
    raise AssertionError(f"subscription ended before turn/completed: {[n.method for n in notes]}")


@pytest.mark.e2e
@codex_versions
async def test_real_app_server_runs_a_text_turn(tmp_path: Path, codex_version: str) -> None:
    from tests.support.fake_upstream import text_reply

    script = [text_reply("Hello from a scripted model.")]
    async with real_codex(tmp_path, script, version=codex_version) as (server, fake):
        generation = await server.start()
        assert f"/{codex_version} " in server.server_info["userAgent"]
        models = await server.request(wire.MODEL_LIST, {})
        assert [m["id"] for m in models["data"]] == [MODEL]
        started = await server.request(wire.THREAD_START, thread_params(tmp_path), generation=generation)
        thread_id = started["thread"]["id"]
        async with server.subscribe(thread_id, generation=generation) as events:
            turn = await server.request(
                wire.TURN_START, text_turn(thread_id, "Say hello"), generation=generation
            )
            notes = await until_turn_completed(events)
    completed = notes[-1].params["turn"]
    assert completed["id"] == turn["turn"]["id"] and completed["status"] == "completed"
    text = "".join(n.params["delta"] for n in notes if n.method == wire.AGENT_MESSAGE_DELTA)
    assert text == "Hello from a scripted model."
    assert {n.turn_id for n in notes if n.method.startswith(("item/", "turn/"))} == {completed["id"]}
    assert not {n.method for n in notes} & set(wire.DEFAULT_OPT_OUT_NOTIFICATIONS)
    assert fake.requests[0].body["messages"][0]["content"].startswith("Be brief.")


@pytest.mark.e2e
async def test_real_app_server_calls_a_dynamic_tool_and_reads_its_answer(tmp_path: Path) -> None:
    import json

    from tests.support.fake_upstream import text_reply, tool_calls_reply

    def model(body: JSON) -> Any:
        tool_answers = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if not tool_answers:
            return tool_calls_reply([("get_weather", json.dumps({"city": "Oslo"}))])
        return text_reply("Weather: " + tool_answers[-1])

    calls: list[ServerRequest] = []

    async def answer(request: ServerRequest) -> Any:
        calls.append(request)
        return wire.text_output("Sunny, 21 C")

    weather: wire.DynamicFunctionTool = {
        "type": "function",
        "name": "get_weather",
        "description": "The weather in a city",
        "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
    async with real_codex(tmp_path, model, on_server_request=answer) as (server, fake):
        generation = await server.start()
        params = thread_params(tmp_path, dynamicTools=[weather])
        thread_id = (await server.request(wire.THREAD_START, params, generation=generation))["thread"]["id"]
        async with server.subscribe(thread_id, generation=generation) as events:
            await server.request(
                wire.TURN_START, text_turn(thread_id, "Weather in Oslo?"), generation=generation
            )
            notes = await until_turn_completed(events)
    assert [(c.method, c.params["tool"], c.params["arguments"]) for c in calls] == [
        (wire.TOOL_CALL, "get_weather", {"city": "Oslo"})
    ]
    items = [n.params["item"] for n in notes if n.method == wire.ITEM_COMPLETED]
    tool_item = next(i for i in items if i["type"] == "dynamicToolCall")
    assert tool_item["status"] == "completed" and tool_item["success"] is True
    assert notes[-1].params["turn"]["items"][-1]["text"] == "Weather: Sunny, 21 C"
    assert fake.requests[1].body["messages"][-1] == {
        "role": "tool",
        "tool_call_id": calls[0].params["callId"],
        "content": "Sunny, 21 C",
    }


@pytest.mark.e2e
async def test_real_app_server_killed_mid_turn_is_replaced(tmp_path: Path) -> None:
    from tests.support.fake_upstream import text_reply

    def model(body: JSON) -> Any:
        if "slow" in str(body["messages"][-1]["content"]):
            return text_reply("word " * 200, delay_between_chunks=0.05)
        return text_reply("Back again.")

    async with real_codex(tmp_path, model) as (server, fake):
        generation = await server.start()
        thread_id = (await server.request(wire.THREAD_START, thread_params(tmp_path)))["thread"]["id"]
        async with server.subscribe(thread_id, generation=generation) as events:
            await server.request(wire.TURN_START, text_turn(thread_id, "slow"), generation=generation)
            async with asyncio.timeout(30):
                async for note in events:
                    if note.method == wire.AGENT_MESSAGE_DELTA:
                        break
            assert server.pid is not None
            os.killpg(server.pid, signal.SIGKILL)  # the launcher and the native binary
            with pytest.raises(AppServerGone) as gone:
                await until_turn_completed(events)
        assert gone.value.exit_code == -signal.SIGKILL and gone.value.generation == generation
        with pytest.raises(AppServerGone):
            await server.request(wire.TURN_START, text_turn(thread_id, "again"), generation=generation)
        began = time.monotonic()
        assert await server.start() == generation + 1
        restart_seconds = time.monotonic() - began
        with pytest.raises(AppServerRpcError) as unknown:  # thread ids do not survive
            await server.request(wire.TURN_START, text_turn(thread_id, "again"))
        assert unknown.value.rpc_code == ErrorCode.INVALID_REQUEST
        thread_id = (await server.request(wire.THREAD_START, thread_params(tmp_path)))["thread"]["id"]
        async with server.subscribe(thread_id) as events:
            await server.request(wire.TURN_START, text_turn(thread_id, "hello"))
            notes = await until_turn_completed(events)
    assert notes[-1].params["turn"]["status"] == "completed"
    assert restart_seconds < 10
