"""`/v1/responses` over a WebSocket (codex-contract.md §5), through real uvicorn and the
`websockets` client: `response.create` frames, events as text frames, continuations with only
the new items (kept in the connection with `store:false`), the `generate:false` prewarm, error
frames that leave the connection usable, eviction after a failed continuation, one response
in flight, and the limits."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.support.fake_upstream import (
    FakeUpstream,
    error_reply,
    lingering,
    openai_error,
    stall_reply,
    text_reply,
)
from tests.support.gateways import gateway_over

JSON = dict[str, Any]
KEY = "ws-key-0123456789abcdefghij"


def echo(body: JSON) -> Any:
    said = [str(m["content"]) for m in body["messages"] if m["role"] == "user"]
    if said and said[-1] == "slow":
        return stall_reply("slow answer", 0.5)
    if said and said[-1] == "fail":
        return error_reply(400, openai_error("the model refuses"))
    if said and said[-1] == "linger":
        return lingering(text_reply("lingered"), 1.5)
    return text_reply("heard: " + " / ".join(said))


@asynccontextmanager
async def gateway(tmp_path: Path, **settings: Any) -> AsyncIterator[tuple[str, FakeUpstream]]:
    fake = FakeUpstream(echo)
    environ: dict[str, str] = settings.pop("environ", {})
    async with gateway_over(fake, environ, store_path=str(tmp_path / "s.db"), **settings) as url:
        yield url.replace("http://", "ws://") + "/v1/responses", fake


async def turn(ws: ClientConnection, **body: Any) -> list[JSON]:
    """Send one response.create; the frames up to its terminal event or error frame."""
    await ws.send(orjson.dumps({"type": "response.create", "model": "m", **body}).decode())
    frames: list[JSON] = []
    while True:
        raw = await asyncio.wait_for(ws.recv(), 10)
        assert isinstance(raw, str), "every frame is a text frame"
        frame = orjson.loads(raw)
        frames.append(frame)
        if frame["type"] in ("response.completed", "response.failed", "response.incomplete", "error"):
            return frames


async def turn_alone(url: str, **body: Any) -> list[JSON]:
    """One turn on a connection of its own, closed after it."""
    async with connect(url) as ws:
        return await turn(ws, **body)


def response_id(frames: list[JSON]) -> str:
    """The id of the response a turn's frames ended with."""
    return str(frames[-1]["response"]["id"])


def user(text: str) -> JSON:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def answer(frames: list[JSON]) -> str:
    assert frames[-1]["type"] == "response.completed", frames[-1]
    return str(frames[-1]["response"]["output"][0]["content"][0]["text"])


async def test_a_continuation_sends_only_the_new_items(tmp_path: Path) -> None:
    async with gateway(tmp_path) as (url, fake), connect(url) as ws:
        first = await turn(ws, input=[user("one")], store=False)
        second = await turn(ws, input=[user("two")], store=False, previous_response_id=response_id(first))
        third = await turn(ws, input=[user("three")], store=False, previous_response_id=response_id(second))
    assert [f["type"] for f in first][:2] == ["response.created", "response.in_progress"]
    assert answer(second) == "heard: one / two"
    assert answer(third) == "heard: one / two / three"
    roles = [(m["role"], m["content"]) for m in fake.requests[-1].body["messages"]]
    assert roles == [
        ("user", "one"),
        ("assistant", "heard: one"),
        ("user", "two"),
        ("assistant", "heard: one / two"),
        ("user", "three"),
    ]


async def test_the_next_request_may_follow_the_terminal_event_at_once(tmp_path: Path) -> None:
    """Codex sends its next response.create as soon as it reads the terminal event, while the
    gateway may still be reading the upstream's tail (its [DONE], 1.5 s late here): that
    request is served at once, on the same connection, and continues the first."""
    async with gateway(tmp_path) as (url, fake), connect(url) as ws:
        first = await turn(ws, input=[user("linger")], store=False)
        started = time.monotonic()
        second = await turn(ws, input=[user("two")], store=False, previous_response_id=response_id(first))
        took = time.monotonic() - started
    assert answer(first) == "lingered"
    assert answer(second) == "heard: linger / two"
    assert took < 1.0, f"the second request waited {took:.2f} s for the first's tail"
    assert len(fake.requests) == 2


async def test_a_connection_closed_while_a_tail_is_read_cuts_it(tmp_path: Path) -> None:
    """The answer's tail is read in a task of its own; when the client closes the connection,
    that task ends too: the upstream sees the gateway hang up before its late [DONE]."""
    async with gateway(tmp_path) as (url, fake):
        async with connect(url) as ws:
            first = await turn(ws, input=[user("linger")])
        await fake.wait_for_disconnects(1, timeout=1.0)  # well before the [DONE], 1.5 s late
    assert answer(first) == "lingered"
    assert fake.disconnects == 1


async def test_a_prewarm_generates_nothing_and_is_continued(tmp_path: Path) -> None:
    async with gateway(tmp_path) as (url, fake), connect(url) as ws:
        warm = await turn(ws, input=[user("one")], store=False, generate=False)
        assert [f["type"] for f in warm] == ["response.created", "response.completed"]
        assert warm[-1]["response"]["output"] == []
        assert not fake.requests
        real = await turn(ws, input=[], store=False, previous_response_id=response_id(warm))
    assert answer(real) == "heard: one"


async def test_after_a_reconnect_without_a_store_the_previous_response_is_not_found(tmp_path: Path) -> None:
    async with gateway(tmp_path) as (url, _):
        first = await turn_alone(url, input=[user("one")], store=False)
        async with connect(url) as ws:
            missing = await turn(
                ws, input=[user("two")], store=False, previous_response_id=response_id(first)
            )
            assert missing == [
                {
                    "type": "error",
                    "status": 400,
                    "error": {
                        "message": missing[0]["error"]["message"],
                        "type": "invalid_request_error",
                        "param": "previous_response_id",
                        "code": "previous_response_not_found",
                    },
                }
            ]
            again = await turn(ws, input=[user("one"), user("two")], store=False)  # the socket stays usable
    assert answer(again) == "heard: one / two"


async def test_stored_responses_continue_on_a_new_connection(tmp_path: Path) -> None:
    async with gateway(tmp_path) as (url, _):
        first = await turn_alone(url, input=[user("one")], store=True)
        second = await turn_alone(url, input=[user("two")], previous_response_id=response_id(first))
    assert answer(second) == "heard: one / two"


async def test_a_failed_continuation_evicts_what_it_continued(tmp_path: Path) -> None:
    async with gateway(tmp_path) as (url, _), connect(url) as ws:
        first = await turn(ws, input=[user("one")], store=False)
        previous = response_id(first)
        failed = await turn(ws, input=[user("fail")], store=False, previous_response_id=previous)
        assert failed[-1]["type"] in ("response.failed", "error")
        evicted = await turn(ws, input=[user("two")], store=False, previous_response_id=previous)
    assert evicted[-1]["error"]["code"] == "previous_response_not_found"


async def test_bad_frames_get_error_frames_and_the_connection_goes_on(tmp_path: Path) -> None:
    async with gateway(tmp_path) as (url, _), connect(url) as ws:
        await ws.send("not json")
        not_json = orjson.loads(await ws.recv())
        await ws.send(orjson.dumps({"type": "response.cancel"}).decode())
        wrong_type = orjson.loads(await ws.recv())
        no_model = await turn(ws, model=None, input=[user("x")])
        fine = await turn(ws, input=[user("x")])
    assert not_json["type"] == "error" and not_json["status"] == 400
    assert not_json["error"]["message"].startswith("The frame is not JSON: it starts with 'not json'")
    assert wrong_type["error"]["param"] == "type"
    assert no_model[-1]["error"]["param"] == "model"
    assert answer(fine) == "heard: x"


async def test_one_response_in_flight_at_a_time(tmp_path: Path) -> None:
    async with gateway(tmp_path) as (url, _), connect(url) as ws:
        await ws.send(orjson.dumps({"type": "response.create", "model": "m", "input": "slow"}).decode())
        await ws.send(orjson.dumps({"type": "response.create", "model": "m", "input": "other"}).decode())
        frames = [orjson.loads(await asyncio.wait_for(ws.recv(), 10)) for _ in range(2)]
        while frames[-1]["type"] != "response.completed":
            frames.append(orjson.loads(await asyncio.wait_for(ws.recv(), 10)))
    errors = [f for f in frames if f["type"] == "error"]
    assert len(errors) == 1 and errors[0]["error"]["code"] == "response_in_progress"
    assert frames[-1]["response"]["output"][0]["content"][0]["text"] == "slow answer"


async def test_the_connection_limit_and_lifetime(tmp_path: Path) -> None:
    async with gateway(tmp_path, websocket_max_connections=1, websocket_max_lifetime=0.3) as (url, _):
        async with connect(url) as first:
            async with connect(url) as second:
                refused = orjson.loads(await second.recv())
                with pytest.raises(ConnectionClosed):
                    await second.recv()
            assert refused["error"]["code"] == "websocket_connection_limit_reached"
            assert answer(await turn(first, input="hi")) == "heard: hi"
            await asyncio.sleep(0.4)
            aged = await turn(first, input="hi")
            assert aged[-1]["error"]["code"] == "websocket_connection_limit_reached"
            with pytest.raises(ConnectionClosed):
                await first.recv()


async def test_what_a_connection_remembers_is_bounded(tmp_path: Path) -> None:
    async with gateway(tmp_path, websocket_max_memory_mb=0.001) as (url, _), connect(url) as ws:
        first = await turn(ws, input=[user("x" * 2000)], store=False)
        follow = await turn(ws, input=[user("y")], store=False, previous_response_id=response_id(first))
    assert follow[-1]["error"]["code"] == "previous_response_not_found"


async def test_upgrades_are_checked_like_requests(tmp_path: Path) -> None:
    environ = {"CODEXGATE_API_KEYS": f"team={KEY}"}
    async with gateway(tmp_path, environ=environ) as (url, _):
        with pytest.raises(InvalidStatus) as refused:
            async with connect(url):
                pass
        assert refused.value.response.status_code == 401
        with pytest.raises(InvalidStatus) as foreign:
            async with connect(
                url, additional_headers={"Authorization": f"Bearer {KEY}"}, origin="https://evil.example"
            ):  # type: ignore[arg-type]
                pass
        assert foreign.value.response.status_code == 403
        async with connect(url, additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
            assert answer(await turn(ws, input="hi")) == "heard: hi"


async def test_a_keys_slot_is_free_once_its_answer_ended(tmp_path: Path) -> None:
    """A key at max_concurrent = 1 may start its next response on another connection as soon
    as it reads the terminal event, while the gateway still reads the first answer's upstream
    tail ([DONE] 1.5 s late)."""
    config = tmp_path / "keys.toml"
    config.write_text('[[api_keys]]\nname = "team"\nkey_env = "TEAM_KEY"\nmax_concurrent = 1\n')
    environ = {"CODEXGATE_CONFIG": str(config), "TEAM_KEY": KEY}
    authorized = {"Authorization": f"Bearer {KEY}"}
    async with gateway(tmp_path, environ=environ) as (url, _):
        async with (
            connect(url, additional_headers=authorized) as first,
            connect(url, additional_headers=authorized) as second,
        ):
            lingered = await turn(first, input=[user("linger")])
            following = await turn(second, input=[user("next")])
    assert answer(lingered) == "lingered"
    assert answer(following) == "heard: next"


async def test_a_client_that_leaves_mid_answer_cancels_the_upstream_request(tmp_path: Path) -> None:
    async with gateway(tmp_path) as (url, fake):
        async with connect(url) as ws:
            await ws.send(orjson.dumps({"type": "response.create", "model": "m", "input": "slow"}).decode())
            first = orjson.loads(await asyncio.wait_for(ws.recv(), 10))
            assert first["type"] == "response.created"
        await fake.wait_for_disconnects(1)  # the upstream sees the gateway hang up
    assert fake.disconnects == 1
