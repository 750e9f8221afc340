"""A key's limits, in one gateway process (server/keys/admission.py, server/keys/usage.py): 429 with
OpenAI's shape and headers past requests_per_minute, tokens_per_minute and max_concurrent,
insufficient_quota past tokens_per_day, 403 for a model the key may not use, the rate-limit
headers on every answer of a limited key, a store that stops answering, a reload that changes
the limits, and GET /v1/usage. The clock is fixed: 10 s into a window, on 2026-03-01 (UTC)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from codexgate.app import build_app
from codexgate.config import load_settings
from codexgate.server.app import GatewayApp
from codexgate.store.base import StoreError
from codexgate.store.meter import Admit, MemoryMeter, Verdict
from tests.support.asgi_client import StreamingASGITransport
from tests.support.asgi_upstream import ASGIUpstreamTransport
from tests.support.fake_upstream import (
    ChatReply,
    FakeUpstream,
    Usage,
    lingering,
    stall_reply,
    text_reply,
)
from tests.support.servers import arun_asgi_server

NOW = 1_772_323_210.0  # 2026-03-01 00:00:10 UTC: 10 s into a 60 s window
ALICE, BOB, ROOT = "alice-secret-key-0001", "bob-secret-key-0002", "root-secret-key-0003"
ENV = {"ALICE_KEY": ALICE, "BOB_KEY": BOB, "ROOT_KEY": ROOT}
ROUTES = """
[[upstreams]]
name = "local"
base_url = "http://upstream.test/v1"

[[models]]
name = "coder"
aliases = ["qc"]

[[models]]
name = "other"
"""


def keys(alice: str = "", bob: str = "") -> str:
    return (
        ROUTES
        + f'[[api_keys]]\nname = "alice"\nkey_env = "ALICE_KEY"\n{alice}\n'
        + f'[[api_keys]]\nname = "bob"\nkey_env = "BOB_KEY"\n{bob}\n'
        + '[[api_keys]]\nname = "root"\nkey_env = "ROOT_KEY"\nadmin = true\n'
    )


def as_(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def ask(model: str = "coder", **body: Any) -> dict[str, Any]:
    return {"model": model, "input": "hi", **body}


@asynccontextmanager
async def gateway(
    tmp_path: Path, config: str, script: Any = None, **flags: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, GatewayApp]]:
    path = tmp_path / "gw.toml"
    path.write_text(config)
    settings = load_settings(
        {"discover": False, "store_path": str(tmp_path / "s.db"), **flags}, path, environ=ENV
    )
    fake = FakeUpstream(script if script is not None else lambda body: text_reply("hello"))
    app = build_app(settings, transport=ASGIUpstreamTransport(fake), environ=ENV, config_file=path)
    app.admission.clock = app.admission.ledger.clock = lambda: NOW
    transport = StreamingASGITransport(app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw", timeout=10) as http:
        try:
            yield http, app
        finally:
            await app.admission.close()
            await app.state.stop()


def error_of(response: httpx.Response) -> dict[str, Any]:
    error: dict[str, Any] = response.json()["error"]
    return error


async def test_past_requests_per_minute_a_429_says_when_and_every_answer_says_what_is_left(
    tmp_path: Path,
) -> None:
    async with gateway(tmp_path, keys("requests_per_minute = 2")) as (http, _):
        first = await http.post("/v1/responses", json=ask(), headers=as_(ALICE))
        second = await http.post("/v1/responses", json=ask(stream=True), headers=as_(ALICE))
        third = await http.post("/v1/responses", json=ask(), headers=as_(ALICE))
        other = await http.post("/v1/responses", json=ask(), headers=as_(BOB))
    assert (first.status_code, second.status_code, third.status_code, other.status_code) == (
        200,
        200,
        429,
        200,
    )
    assert [r.headers["x-ratelimit-remaining-requests"] for r in (first, second, third)] == ["1", "0", "0"]
    assert first.headers["x-ratelimit-limit-requests"] == "2"
    assert first.headers["x-ratelimit-reset-requests"] == "50s"
    assert second.headers["content-type"].startswith("text/event-stream")  # a stream's head carries them
    error = error_of(third)
    assert (error["code"], error["type"]) == ("rate_limit_exceeded", "rate_limit_error")
    assert (
        "requests per minute: limit 2, used 2" in error["message"] and "try again in 50s" in error["message"]
    )
    assert third.headers["retry-after"] == "50"
    assert "x-ratelimit-limit-requests" not in other.headers  # bob has no limits


async def test_tokens_per_minute_counts_the_answers_usage(tmp_path: Path) -> None:
    usage = Usage(prompt_tokens=700, completion_tokens=400)
    script = [ChatReply(text="a", usage=usage), ChatReply(text="b", usage=usage)]
    async with gateway(tmp_path, keys("tokens_per_minute = 1000"), script) as (http, app):
        first = await http.post("/v1/responses", json=ask(), headers=as_(ALICE))
        assert first.headers["x-ratelimit-remaining-tokens"] == "1000"
        assert first.headers["x-ratelimit-reset-tokens"] == "0s"  # nothing spent yet
        await app.admission.ledger.write()
        refused = await http.post("/v1/responses", json=ask(), headers=as_(ALICE))
    assert refused.status_code == 429 and error_of(refused)["code"] == "rate_limit_exceeded"
    assert "tokens per minute: limit 1000, used 1100" in error_of(refused)["message"]
    assert (refused.headers["x-ratelimit-remaining-tokens"], refused.headers["x-ratelimit-reset-tokens"]) == (
        "0", "50s",
    )  # fmt: skip


async def test_past_the_days_budget_the_answer_is_insufficient_quota(tmp_path: Path) -> None:
    script = [ChatReply(text="a", usage=Usage(prompt_tokens=60, completion_tokens=50))]
    async with gateway(tmp_path, keys("tokens_per_day = 100"), script) as (http, app):
        assert (await http.post("/v1/responses", json=ask(), headers=as_(ALICE))).status_code == 200
        await app.admission.ledger.write()
        spent = await http.post("/v1/responses", json=ask(), headers=as_(ALICE))
    assert spent.status_code == 429
    error = error_of(spent)
    assert (error["code"], error["type"]) == ("insufficient_quota", "insufficient_quota")
    assert "budget of 100 tokens for today (110 used)" in error["message"] and "23h59m" in error["message"]
    assert spent.headers["retry-after"] == "86390"


@pytest.mark.parametrize("stream", [False, True])
async def test_a_days_budget_holds_for_requests_sent_back_to_back(tmp_path: Path, stream: bool) -> None:
    """The answer that crosses the budget is served whole and the very next request is refused,
    without waiting for the usage ledger's batch."""
    script = [ChatReply(text="a", usage=Usage(prompt_tokens=60, completion_tokens=50))] * 2
    async with gateway(tmp_path, keys("tokens_per_day = 1"), script) as (http, _):
        first = await http.post("/v1/responses", json=ask(stream=stream), headers=as_(ALICE))
        second = await http.post("/v1/responses", json=ask(stream=stream), headers=as_(ALICE))
    assert first.status_code == 200 and (stream or first.json()["status"] == "completed")
    assert second.status_code == 429 and error_of(second)["code"] == "insufficient_quota"
    assert "budget of 1 tokens for today (110 used)" in error_of(second)["message"]


async def test_tokens_per_minute_refuses_the_request_after_the_answer_that_crossed_it(tmp_path: Path) -> None:
    script = [ChatReply(text="a", usage=Usage(prompt_tokens=100, completion_tokens=20))] * 5
    async with gateway(tmp_path, keys("tokens_per_minute = 300"), script) as (http, _):
        replies = [await http.post("/v1/responses", json=ask(), headers=as_(ALICE)) for _ in range(5)]
    assert [r.status_code for r in replies] == [200, 200, 200, 429, 429]
    assert "tokens per minute: limit 300, used 360" in error_of(replies[3])["message"]


async def test_a_days_budget_holds_for_responses_sent_back_to_back_over_a_websocket(tmp_path: Path) -> None:
    import orjson
    from websockets.asyncio.client import connect

    from tests.support.gateways import gateway_over

    def script(body: dict[str, Any]) -> Any:
        return ChatReply(text="a", usage=Usage(prompt_tokens=60, completion_tokens=50))

    key = {"name": "alice", "key_env": "ALICE_KEY", "tokens_per_day": 1}
    async with gateway_over(
        FakeUpstream(script), ENV, api_keys=[key], store_path=str(tmp_path / "s.db")
    ) as url:
        async with connect(
            url.replace("http://", "ws://") + "/v1/responses", additional_headers=as_(ALICE)
        ) as ws:
            await ws.send(orjson.dumps({"type": "response.create", **ask()}).decode())
            while orjson.loads(await asyncio.wait_for(ws.recv(), 10))["type"] != "response.completed":
                pass
            await ws.send(orjson.dumps({"type": "response.create", **ask()}).decode())
            refused = orjson.loads(await asyncio.wait_for(ws.recv(), 10))
    assert (refused["type"], refused["status"], refused["error"]["code"]) == (
        "error",
        429,
        "insufficient_quota",
    )


async def test_a_budget_charge_the_store_misses_is_counted_here_and_written_later(tmp_path: Path) -> None:
    """The store fails just as an answer's tokens are charged: the next request is refused all
    the same (counted in the process), and the tokens reach the store with the next write."""
    script = [ChatReply(text="a", usage=Usage(prompt_tokens=60, completion_tokens=50))] * 2

    class LosesCharges(MemoryMeter):
        failing = True

        async def charge(self, charges: Any, rows: Any) -> None:
            if self.failing and charges:
                self.failing = False
                raise StoreError("cannot count in the store: Connection refused")
            await MemoryMeter.charge(self, charges, rows)

    async with gateway(tmp_path, keys("tokens_per_day = 100"), script) as (http, app):
        meter = LosesCharges()
        app.admission.meter = app.admission.ledger.meter = meter
        assert (await http.post("/v1/responses", json=ask(), headers=as_(ALICE))).status_code == 200
        refused = await http.post("/v1/responses", json=ask(), headers=as_(ALICE))
        await app.admission.ledger.write()
    assert refused.status_code == 429 and error_of(refused)["code"] == "insufficient_quota"
    assert meter.states["alice"].day_tokens == 110


async def test_a_model_the_key_may_not_use_is_403_naming_it(tmp_path: Path) -> None:
    async with gateway(tmp_path, keys('models = ["coder"]')) as (http, _):
        refused = await http.post("/v1/responses", json=ask("other"), headers=as_(ALICE))
        by_alias = await http.post("/v1/responses", json=ask("qc"), headers=as_(ALICE))
        chat = await http.post(
            "/v1/chat/completions", json={"model": "other", "messages": [{"role": "user", "content": "x"}]},
            headers=as_(ALICE),
        )  # fmt: skip
    assert refused.status_code == 403 and chat.status_code == 403
    error = error_of(refused)
    assert (error["code"], error["param"]) == ("model_not_allowed", "model")
    assert "'other'" in error["message"] and "it may use: coder" in error["message"]
    assert by_alias.status_code == 200


async def test_a_key_at_max_concurrent_gets_429_while_another_key_is_served(tmp_path: Path) -> None:
    def script(body: dict[str, Any]) -> Any:
        return stall_reply("slow answer", 0.5) if "slow" in str(body["messages"]) else text_reply("quick")

    async with gateway(tmp_path, keys("max_concurrent = 1"), script) as (http, app):
        slow = ask(input="slow", stream=True)
        async with http.stream("POST", "/v1/responses", json=slow, headers=as_(ALICE)) as streaming:
            assert streaming.status_code == 200
            over = await http.post("/v1/responses", json=ask(), headers=as_(ALICE))
            other = await http.post("/v1/responses", json=ask(), headers=as_(BOB))
            await streaming.aread()
        after = await http.post("/v1/responses", json=ask(), headers=as_(ALICE))
    assert (over.status_code, other.status_code, after.status_code) == (429, 200, 200)
    assert error_of(over)["code"] == "rate_limit_exceeded" and over.headers["retry-after"] == "1"
    assert "1 responses in flight" in error_of(over)["message"]


async def test_a_key_at_max_concurrent_may_send_its_next_request_once_the_answer_ended(
    tmp_path: Path,
) -> None:
    """A client that sends its next request as soon as an answer ends (Codex) is not counted
    twice while the gateway still reads that answer's upstream tail (its [DONE], 0.5 s late).
    Through real servers: the answer ends on the wire before the gateway's handler returns."""
    fake = FakeUpstream([lingering(text_reply("first"), 0.5), text_reply("second")])
    config = tmp_path / "gw.toml"
    async with arun_asgi_server(fake) as upstream_url:
        config.write_text(keys("max_concurrent = 1").replace("http://upstream.test/v1", upstream_url + "/v1"))
        settings = load_settings(
            {"discover": False, "store_path": str(tmp_path / "s.db")}, config, environ=ENV
        )
        app = build_app(settings, environ=ENV, config_file=config)
        async with (
            arun_asgi_server(app, lifespan="on") as url,
            httpx.AsyncClient(base_url=url, timeout=10) as http,
        ):
            first = await http.post("/v1/responses", json=ask(stream=True), headers=as_(ALICE))
            second = await http.post("/v1/responses", json=ask(), headers=as_(ALICE))
    assert b"response.completed" in first.content
    assert second.status_code == 200, second.text
    assert len(fake.requests) == 2


async def test_usage_rows_hold_what_the_upstream_reported(tmp_path: Path) -> None:
    usage = Usage(prompt_tokens=1200, completion_tokens=300, cached_tokens=1000, reasoning_tokens=120)
    script = [ChatReply(text="a", usage=usage)] * 3
    async with gateway(tmp_path, keys(), script) as (http, _):
        for model, key in (("coder", ALICE), ("qc", ALICE), ("other", BOB)):
            assert (await http.post("/v1/responses", json=ask(model), headers=as_(key))).status_code == 200
        own = (await http.get("/v1/usage", headers=as_(ALICE))).json()
        everyone = (await http.get("/v1/usage?key=*", headers=as_(ROOT))).json()
        bobs = (await http.get("/v1/usage?key=bob&start_date=2026-03-01&end_date=2026-03-01",
                               headers=as_(ROOT))).json()  # fmt: skip
        earlier = (await http.get("/v1/usage?end_date=2026-02-28", headers=as_(ALICE))).json()
        not_admin = await http.get("/v1/usage?key=bob", headers=as_(ALICE))
        bad_date = await http.get("/v1/usage?start_date=March", headers=as_(ALICE))
    row = {"date": "2026-03-01", "upstream": "local", "input_tokens": 2400, "cached_tokens": 2000,
           "output_tokens": 600, "reasoning_tokens": 240}  # fmt: skip
    assert own == {
        "object": "list", "data": [{**row, "key": "alice", "model": "coder", "face": "responses", "requests": 2}]
    }  # fmt: skip
    assert [(r["key"], r["model"], r["requests"]) for r in everyone["data"]] == [
        ("alice", "coder", 2),
        ("bob", "other", 1),
    ]
    assert [r["key"] for r in bobs["data"]] == ["bob"] and earlier["data"] == []
    assert not_admin.status_code == 403 and error_of(not_admin)["code"] == "admin_key_required"
    assert error_of(not_admin)["type"] == "invalid_request_error"
    assert bad_date.status_code == 400 and error_of(bad_date)["param"] == "start_date"


async def test_each_face_adds_to_a_row_of_its_own(tmp_path: Path) -> None:
    """One key, route, upstream and day, a request on each face: a row per face. A Responses
    turn over a WebSocket is counted as one over HTTP (the ledger names the API spoken)."""
    import orjson
    from websockets.asyncio.client import connect

    usage = Usage(prompt_tokens=100, completion_tokens=10)
    user = [{"role": "user", "content": "hi"}]
    async with gateway(tmp_path, keys(), lambda body: ChatReply(text="a", usage=usage)) as (http, app):
        statuses = [
            (await http.post(path, json=body, headers=as_(ALICE))).status_code
            for path, body in (
                ("/v1/responses", ask()),
                ("/v1/chat/completions", {"model": "coder", "messages": user}),
                ("/v1/responses/compact", ask()),
                ("/v1/messages", {"model": "coder", "max_tokens": 100, "messages": user}),
            )
        ]
        async with arun_asgi_server(app, same_loop=True, lifespan="off") as url:
            socket_url = url.replace("http://", "ws://") + "/v1/responses"
            async with connect(socket_url, additional_headers=as_(ALICE)) as ws:
                await ws.send(orjson.dumps({"type": "response.create", **ask()}).decode())
                while orjson.loads(await asyncio.wait_for(ws.recv(), 10))["type"] != "response.completed":
                    pass
        rows = (await http.get("/v1/usage", headers=as_(ALICE))).json()["data"]
    assert statuses == [200, 200, 200, 200]
    assert [(r["face"], r["model"], r["upstream"], r["requests"], r["input_tokens"]) for r in rows] == [
        ("chat", "coder", "local", 1, 100),
        ("compact", "coder", "local", 1, 100),
        ("messages", "coder", "local", 1, 100),
        ("responses", "coder", "local", 2, 200),
    ]


class Flaky(MemoryMeter):
    """A meter whose store stops answering, then answers again."""

    down = False

    async def admit(self, ask: Admit) -> Verdict:
        if self.down:
            raise StoreError("cannot count in the Redis store at redis://h:6379/0: Connection refused")
        return await MemoryMeter.admit(self, ask)


async def test_a_store_that_stops_answering_neither_frees_nor_locks_out_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("codexgate.server.keys.admission.RETRY_STORE_SECONDS", 0.0)
    async with gateway(tmp_path, keys("requests_per_minute = 3")) as (http, app):
        flaky = Flaky()
        app.admission.meter = app.admission.ledger.meter = flaky
        assert (await http.post("/v1/responses", json=ask(), headers=as_(ALICE))).status_code == 200
        flaky.down = True
        with caplog.at_level(logging.WARNING, "codexgate.admission"):
            statuses = [(await http.post("/v1/responses", json=ask(), headers=as_(ALICE))).status_code
                        for _ in range(3)]  # fmt: skip
            flaky.down = False
            back = await http.post("/v1/responses", json=ask(), headers=as_(ALICE))
    assert statuses == [200, 200, 429]  # counted on from the store's last count: 1, then 2, 3
    # The store counts again from its own count: what a process admitted alone is not added to it.
    assert back.status_code == 200 and back.headers["x-ratelimit-remaining-requests"] == "1"
    said = [r for r in caplog.records if r.name == "codexgate.admission"]
    assert said[0].levelno == logging.ERROR and "counted in this process alone" in said[0].getMessage()
    assert (
        "Connection refused" in said[0].getMessage()
        and len([r for r in said if r.levelno == logging.ERROR]) == 1
    )
    assert said[-1].levelno == logging.WARNING and "answers again" in said[-1].getMessage()


async def test_a_reload_changes_the_limits_without_a_restart(tmp_path: Path) -> None:
    async with gateway(tmp_path, keys()) as (http, app):
        assert (await http.post("/v1/responses", json=ask("other"), headers=as_(ALICE))).status_code == 200
        (tmp_path / "gw.toml").write_text(keys('models = ["coder"]'))
        assert app.guard is not None
        app.guard.reload()
        assert (await http.post("/v1/responses", json=ask("other"), headers=as_(ALICE))).status_code == 403


async def test_leases_are_renewed_while_a_response_streams(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("codexgate.server.keys.admission.RENEW_SECONDS", 0.05)
    renewed: list[list[tuple[str, str]]] = []

    class Watched(MemoryMeter):
        async def renew(self, leases: list[tuple[str, str]], until: float) -> None:
            renewed.append(leases)
            await MemoryMeter.renew(self, leases, until)

    async with gateway(tmp_path, keys("max_concurrent = 2"), lambda body: stall_reply("slow", 0.3)) as (
        http,
        app,
    ):
        app.admission.meter = Watched()
        await asyncio.gather(*(http.post("/v1/responses", json=ask(), headers=as_(ALICE)) for _ in range(2)))
        assert not app.admission._held
    assert renewed and max(len(leases) for leases in renewed) == 2  # both, while both stream


async def test_over_a_websocket_a_response_holds_its_slot_and_a_refusal_is_an_error_frame(
    tmp_path: Path,
) -> None:
    import orjson
    from websockets.asyncio.client import connect

    from tests.support.gateways import gateway_over

    def script(body: dict[str, Any]) -> Any:
        return stall_reply("slow answer", 0.5) if "slow" in str(body["messages"]) else text_reply("quick")

    key = {"name": "alice", "key_env": "ALICE_KEY", "max_concurrent": 1, "requests_per_minute": 100}
    async with gateway_over(
        FakeUpstream(script), ENV, api_keys=[key], store_path=str(tmp_path / "s.db")
    ) as url:
        socket_url = url.replace("http://", "ws://") + "/v1/responses"
        headers = as_(ALICE)
        async with (
            connect(socket_url, additional_headers=headers) as one,
            connect(socket_url, additional_headers=headers) as two,
        ):
            await one.send(orjson.dumps({"type": "response.create", **ask(input="slow")}).decode())
            assert orjson.loads(await one.recv())["type"] == "response.created"
            await two.send(orjson.dumps({"type": "response.create", **ask()}).decode())
            refused = orjson.loads(await asyncio.wait_for(two.recv(), 10))
            while orjson.loads(await asyncio.wait_for(one.recv(), 10))["type"] != "response.completed":
                pass
            await two.send(orjson.dumps({"type": "response.create", **ask()}).decode())
            served = [orjson.loads(await asyncio.wait_for(two.recv(), 10)) for _ in range(2)]
    assert (refused["type"], refused["status"], refused["error"]["code"]) == (
        "error",
        429,
        "rate_limit_exceeded",
    )
    assert (
        refused["headers"]["retry-after"] == "1" and refused["headers"]["x-ratelimit-limit-requests"] == "100"
    )
    assert served[0]["type"] == "response.created"


async def test_metrics_count_tokens_and_refusals_by_key(tmp_path: Path) -> None:
    script = [ChatReply(text="a", usage=Usage(prompt_tokens=1200, completion_tokens=300, cached_tokens=1000))]
    async with gateway(tmp_path, keys("requests_per_minute = 1"), script) as (http, _):
        await http.post("/v1/responses", json=ask(), headers=as_(ALICE))
        await http.post("/v1/responses", json=ask(), headers=as_(ALICE))
        text = (await http.get("/metrics", headers=as_(ROOT))).text
    for line in (
        'codexgate_key_tokens_total{key="alice",kind="input"} 1200.0',
        'codexgate_key_tokens_total{key="alice",kind="cached"} 1000.0',
        'codexgate_key_tokens_total{key="alice",kind="output"} 300.0',
        'codexgate_key_requests_total{key="alice",outcome="completed"} 1.0',
        'codexgate_key_requests_total{key="alice",outcome="rate_limit_exceeded"} 1.0',
        "codexgate_limits_store_up 1.0",
    ):
        assert line in text, line


@pytest.mark.parametrize(
    ("store", "said"),
    [
        ("sqlite", "each key's limits are counted in the sqlite store, for every process using it"),
        ("none", 'store = "none": each key\'s limits are counted in this process alone'),
    ],
)
async def test_the_start_says_where_limits_are_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, store: str, said: str
) -> None:
    async with gateway(tmp_path, keys("requests_per_minute = 5"), store=store) as (_, app):
        with caplog.at_level(logging.INFO, "codexgate.admission"):
            await app.admission.start()
    assert [r.getMessage() for r in caplog.records if said in r.getMessage()]


async def test_a_key_with_models_lists_only_those(tmp_path: Path) -> None:
    async with gateway(tmp_path, keys('models = ["coder"]')) as (http, _):
        alice = (await http.get("/v1/models", headers=as_(ALICE))).json()
        bob = (await http.get("/v1/models", headers=as_(BOB))).json()
    assert [m["id"] for m in alice["data"]] == ["coder", "qc"]  # the route and its alias
    assert [m["id"] for m in bob["data"]] == ["coder", "qc", "other"]
