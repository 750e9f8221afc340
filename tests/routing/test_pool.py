"""Pools in-process (routing/pool.py): a route of several upstreams keeps a conversation on one
member, fails over before the first byte, cools a failing member down, waits its turn on a full
one, and falls back to other routes; over fake upstreams, one per host."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from codexgate.app import build_app
from codexgate.backends.base import conversation_of
from codexgate.backends.http.transport import HttpRequest, UpstreamResponse
from codexgate.config import load_settings
from codexgate.routing.choice import rendezvous
from codexgate.server.app import GatewayApp
from tests.support.asgi_client import StreamingASGITransport
from tests.support.asgi_upstream import ASGIUpstreamTransport
from tests.support.fake_responses import ScriptedResponses, sse_reply, text_events
from tests.support.fake_upstream import FakeUpstream, error_reply, openai_error, stall_reply, text_reply


class ByHost:
    """One fake upstream per host name (a.test, b.test...); None: nothing listens there."""

    def __init__(self, fakes: dict[str, FakeUpstream | None]) -> None:
        self.fakes = fakes
        self.transports = {host: ASGIUpstreamTransport(fake) for host, fake in fakes.items()}

    async def open(self, request: HttpRequest) -> UpstreamResponse:
        host = urlsplit(request.url).hostname or ""
        return await self.transports[host.removesuffix(".test")].open(request)

    async def aclose(self) -> None:
        for transport in self.transports.values():
            await transport.aclose()


def named(name: str) -> FakeUpstream:
    return FakeUpstream(lambda body: text_reply(f"from {name}"), models=["m"])


def config(members: list[str], **route: Any) -> dict[str, Any]:
    """Upstreams named m at http://m.test/v1, and the route "coder" of a pool of `members`."""
    names = sorted({*members, *route.pop("extra", ())})
    more = route.pop("more_models", [])
    upstreams = [{"name": m, "base_url": f"http://{m}.test/v1"} for m in names]
    models = [{"name": "coder", "upstreams": members, "model": "m", **route}, *more]
    return {
        "discover": False,
        "store": "none",
        "retry_backoff": 0.01,
        "upstreams": upstreams,
        "models": models,
    }


@asynccontextmanager
async def gateway(
    fakes: dict[str, FakeUpstream | None], flags: dict[str, Any]
) -> AsyncIterator[tuple[httpx.AsyncClient, GatewayApp]]:
    app = build_app(load_settings(flags, environ={}), transport=ByHost(fakes), environ={})
    async with httpx.AsyncClient(
        transport=StreamingASGITransport(app), base_url="http://gw", timeout=10
    ) as client:
        yield client, app


async def ask(
    client: httpx.AsyncClient, conversation: str | None = None, model: str = "coder", text: str = "hi"
) -> httpx.Response:
    body: dict[str, Any] = {"model": model, "input": text}
    if conversation is not None:
        body["prompt_cache_key"] = conversation
    return await client.post("/v1/responses", json=body)


def answer(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    text: str = response.json()["output"][0]["content"][0]["text"]
    return text


async def test_a_conversation_stays_on_one_member_and_conversations_spread() -> None:
    fakes: dict[str, FakeUpstream | None] = {m: named(m) for m in ("a", "b", "c")}
    async with gateway(fakes, config(["a", "b", "c"])) as (client, _):
        homes = {}
        for conversation in (f"conv-{i}" for i in range(12)):
            answers = [answer(await ask(client, conversation)) for _ in range(4)]
            assert len(set(answers)) == 1, answers
            homes[conversation] = answers[0]
    assert len(set(homes.values())) == 3  # twelve conversations over three members


async def test_a_dead_member_fails_over_at_once_cools_down_and_health_says_so() -> None:
    fakes: dict[str, FakeUpstream | None] = {"a": None, "b": named("b")}
    async with gateway(fakes, config(["a", "b"], sticky=False, balance="round_robin")) as (client, app):
        answers = [answer(await ask(client)) for _ in range(4)]
        health = (await client.get("/healthz")).json()
        metrics = (await client.get("/metrics")).text
    assert answers == ["from b"] * 4
    assert health["upstreams"]["a"]["usable"] is False and health["upstreams"]["a"]["state"] == "cooling"
    assert health["upstreams"]["b"]["usable"] is True and health["routes"]["coder"]["members"] == ["a", "b"]
    assert 'codexgate_failovers_total{from_upstream="a",route="coder",to_upstream="b"}' in metrics
    assert 'codexgate_cooldowns_total{upstream="a"} 1.0' in metrics  # cooling: not tried again
    assert app.router.health.members["a"].failures == 1


async def test_a_5xx_fails_over_but_a_bad_request_does_not() -> None:
    failing = FakeUpstream(
        [error_reply(500, openai_error("boom", error_type="server_error"))] * 3, models=["m"]
    )
    fakes: dict[str, FakeUpstream | None] = {"a": failing, "b": named("b")}
    async with gateway(fakes, config(["a", "b"], sticky=False, balance="round_robin")) as (client, _):
        assert answer(await ask(client)) == "from b"
        refused = FakeUpstream([error_reply(400, openai_error("bad tool schema"))] * 3, models=["m"])
        fakes_2: dict[str, FakeUpstream | None] = {"a": refused, "b": named("b")}
    async with gateway(fakes_2, config(["a", "b"], balance="round_robin", sticky=False)) as (client, app):
        statuses = [(await ask(client)).status_code for _ in range(2)]
    assert 400 in statuses and not app.router.health.members["a"].failures  # the request's fault


async def test_a_context_too_long_is_answered_by_the_fallback_route(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="codexgate.access")
    small = FakeUpstream(lambda body: error_reply(
        400, openai_error("the request exceeds the available context size", code="exceed_context_size_error")
    ), models=["m"])  # fmt: skip
    fakes: dict[str, FakeUpstream | None] = {"a": small, "big": named("big")}
    flags = config(["a"], fallbacks=["coder-big"], extra=["big"],
                   more_models=[{"name": "coder-big", "upstream": "big", "model": "m"}])  # fmt: skip
    async with gateway(fakes, flags) as (client, _):
        response = await ask(client, "conv")
        metrics = (await client.get("/metrics")).text
    assert answer(response) == "from big" and response.json()["model"] == "coder"  # the model asked for
    assert (response.headers["x-codexgate-route"], response.headers["x-codexgate-upstream"]) == (
        "coder-big",
        "big",
    )
    assert any("route=coder-big" in line and "upstream=big" in line for line in caplog.messages)
    assert 'codexgate_fallbacks_total{route="coder",to_route="coder-big"} 1.0' in metrics


async def test_when_every_member_failed_the_fallbacks_answer_and_the_error_is_the_last_members() -> None:
    fakes: dict[str, FakeUpstream | None] = {"a": None, "b": None, "c": named("c")}
    flags = config(["a", "b"], fallbacks=["other"], extra=["c"],
                   more_models=[{"name": "other", "upstream": "c", "model": "m"}])  # fmt: skip
    async with gateway(fakes, flags) as (client, _):
        assert answer(await ask(client, "x")) == "from c"
    fakes = {"a": None, "b": None}
    async with gateway(fakes, config(["a", "b"])) as (client, _):
        failed = await ask(client, "x")
    assert failed.status_code == 502 and failed.json()["error"]["code"] == "upstream_unreachable"


async def test_a_full_member_makes_the_conversation_wait_its_turn() -> None:
    slow = FakeUpstream([stall_reply("first", 0.5), text_reply("second")], models=["m"])
    fakes: dict[str, FakeUpstream | None] = {"a": slow}
    flags = config(["a"])
    flags["upstreams"][0]["max_concurrent"] = 1
    async with gateway(fakes, flags) as (client, app):
        first = asyncio.create_task(ask(client, "c1"))
        await slow.wait_for(lambda: slow.in_flight == 1, what="the first request")
        second = asyncio.create_task(ask(client, "c1"))
        member = app.router.health.members["a"]
        await slow.wait_for(lambda: member.queued == 1, what="the second to wait")
        assert len(slow.requests) == 1  # it waits in the gateway, not on the full server
        assert answer(await first) == "first"
        assert answer(await second) == "second"
    assert member.in_flight == 0 and member.queued == 0


async def test_a_conversation_that_moved_stays_where_its_history_is_cached() -> None:
    replies = iter([error_reply(500, openai_error("boom", error_type="server_error"))])
    flaky = FakeUpstream(lambda body: next(replies, None) or text_reply("from a"), models=["m"])
    fakes: dict[str, FakeUpstream | None] = {"a": flaky, "b": named("b")}
    homed_on_a = [k for k in (f"conv-{i}" for i in range(40)) if _first_choice(k, ["a", "b"]) == "a"]
    moving, staying = homed_on_a[:2]
    async with gateway(fakes, config(["a", "b"])) as (client, app):
        assert answer(await ask(client, moving)) == "from b"  # a failed: it moved to b
        app.router.health.members["a"].succeeded()  # a is well again
        assert answer(await ask(client, staying)) == "from a"  # a's own conversations are back
        later = [answer(await ask(client, moving)) for _ in range(3)]
    assert later == ["from b"] * 3  # b holds its history now: it does not go back


def _first_choice(conversation: str, names: list[str]) -> str:
    class Named:
        def __init__(self, name: str) -> None:
            self.name, self.load = name, 0

    return rendezvous(conversation_of(None, conversation), [Named(n) for n in names])[0].name


async def test_a_key_whose_line_is_full_is_told_to_retry_while_the_member_stays_busy() -> None:
    slow = FakeUpstream(lambda body: stall_reply("slow", 0.5), models=["m"])
    flags = config(["a"])
    flags["upstreams"][0]["max_concurrent"] = 1
    async with gateway({"a": slow}, flags) as (client, app):
        member = app.router.health.members["a"]
        waiting = [asyncio.create_task(ask(client, "c1"))]
        await slow.wait_for(lambda: slow.in_flight == 1, what="the first request")
        waiting += [asyncio.create_task(ask(client, "c1")) for _ in range(4)]  # the line: 4 x 1 slot
        await slow.wait_for(lambda: member.queued == 4, what="the line to fill")
        refused = await ask(client, "c1")
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
    assert refused.json()["error"]["code"] == "server_is_overloaded"


async def test_members_of_different_kinds_serve_one_route() -> None:
    responses_server = ScriptedResponses([sse_reply(text_events("from r")) for _ in range(2)], models=["m"])
    fakes: dict[str, Any] = {"a": named("a"), "r": responses_server}
    flags = config(["a", "r"], sticky=False, balance="round_robin")
    flags["upstreams"][1]["kind"] = "responses"  # "a" is a chat upstream, "r" a Responses one
    async with gateway(fakes, flags) as (client, _):
        answers = sorted([answer(await ask(client)) for _ in range(4)])
    assert answers == ["from a", "from a", "from r", "from r"]
    assert responses_server.paths.count("/v1/responses") == 2


async def test_when_every_member_is_down_the_502_names_each_and_what_it_failed_with() -> None:
    fakes: dict[str, FakeUpstream | None] = {"a": None, "b": None, "c": None}
    async with gateway(fakes, config(["a", "b", "c"])) as (client, _):
        failed = await ask(client, "x")
        health = (await client.get("/healthz")).json()
    error = failed.json()["error"]
    assert failed.status_code == 502 and error["code"] == "upstream_unreachable"
    assert error["message"].startswith("No upstream of route 'coder' could answer (3 tried): ")
    for name in ("a", "b", "c"):
        assert f"upstream '{name}': cannot reach upstream http://{name}.test/v1" in error["message"]
        assert health["upstreams"][name]["last_error"] == (
            f"upstream_unreachable: cannot reach upstream http://{name}.test/v1/chat/completions: "
            "connection refused (simulated)"
        )


async def test_health_says_one_thing_of_a_member_before_it_is_tried_while_down_and_once_back() -> None:
    by_host = ByHost({"a": None, "b": named("b")})
    flags = config(["a", "b"], sticky=False, balance="round_robin")
    app = build_app(load_settings(flags, environ={}), transport=by_host, environ={})
    seen: list[dict[str, Any]] = []
    async with httpx.AsyncClient(transport=StreamingASGITransport(app), base_url="http://gw") as client:
        seen.append((await client.get("/healthz")).json()["upstreams"])  # a: never tried yet
        assert [answer(await ask(client)) for _ in range(2)] == ["from b"] * 2
        seen.append((await client.get("/healthz")).json()["upstreams"])  # a: failed, cooling
        by_host.transports["a"].app = named("a")
        app.router.health.members["a"].succeeded()  # a request (or the probe) got an answer
        # /healthz's listing of a is cached from before: the member's answer is newer.
        seen.append((await client.get("/healthz")).json()["upstreams"])
        assert sorted([answer(await ask(client)) for _ in range(2)]) == ["from a", "from b"]
    for upstreams in seen:
        assert all(u["usable"] == (u["state"] == "usable") for u in upstreams.values()), upstreams
    assert [(s["a"]["state"], s["a"]["reachable"]) for s in seen] == [
        ("down", False),
        ("cooling", False),
        ("usable", True),
    ]
    assert seen[0]["a"]["problem"].startswith("unreachable") and seen[2]["a"]["problem"] is None
    assert seen[2]["a"]["last_error"] is None and seen[2]["b"]["state"] == "usable"
