"""Two `codexgate serve` processes sharing one Redis or PostgreSQL store continue each other's
chains: a response made through one is read, continued and deleted through the other, as
behind a load balancer."""

from __future__ import annotations

from contextlib import AbstractContextManager, ExitStack
from typing import Any

import httpx
import pytest

from tests.support.fake_upstream import FakeUpstream, text_reply
from tests.support.processes import ServedGateway, serve_process
from tests.support.servers import run_asgi_server


def echo(body: dict[str, Any]) -> Any:
    said = [str(m["content"]) for m in body["messages"] if m["role"] == "user"]
    return text_reply("heard: " + " / ".join(said))


def gateway_process(upstream: str, store: str, url: str) -> AbstractContextManager[ServedGateway]:
    """`codexgate serve` with its store on the server at `url`."""
    env = {"CODEXGATE_STORE": store, "CODEXGATE_STORE_URL": url}
    return serve_process("--no-discover", "--upstream", upstream, env=env)


@pytest.mark.parametrize("store", ["redis", "postgres"])
def test_two_processes_continue_each_others_chains(store: str, request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue("redis_url" if store == "redis" else "postgres_dsn")
    with ExitStack() as stack:
        upstream = stack.enter_context(run_asgi_server(FakeUpstream(echo))) + "/v1"
        one = stack.enter_context(gateway_process(upstream, store, url)).base
        two = stack.enter_context(gateway_process(upstream, store, url)).base
        previous = None
        for n, base in enumerate([one, two, one, two]):
            body = {"model": "m", "input": f"turn {n}", "previous_response_id": previous}
            reply = httpx.post(base + "/v1/responses", json=body, timeout=10)
            assert reply.status_code == 200, reply.text
            previous = reply.json()["id"]
        answer = reply.json()["output"][0]["content"][0]["text"]
        assert answer == "heard: turn 0 / turn 1 / turn 2 / turn 3"
        assert httpx.get(f"{one}/v1/responses/{previous}", timeout=10).json()["id"] == previous
        assert httpx.delete(f"{one}/v1/responses/{previous}", timeout=10).status_code == 200
        assert httpx.get(f"{two}/v1/responses/{previous}", timeout=10).status_code == 404
