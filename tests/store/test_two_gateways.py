"""Two `codexgate serve` processes sharing one Redis or PostgreSQL store continue each other's
chains: a response made through one is read, continued and deleted through the other, as
behind a load balancer; and they enforce a key's limits together."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.fake_upstream import ChatReply, FakeUpstream, text_reply
from tests.support.key_limits import (
    ALICE,
    BOB,
    BURST_SECONDS,
    CAROL,
    KEY_ENV,
    USAGE,
    WINDOW,
    answer_with_usage,
    bearer,
    burst,
    fresh_window,
    limits_config,
    post,
    usage_of,
)
from tests.support.processes import ServedGateway, serve_process, wait_until
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


@pytest.mark.parametrize("store", ["redis", "postgres"])
def test_two_processes_enforce_a_keys_limits_together(
    store: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A key's requests_per_minute and another's max_concurrent, counted on the shared store: of
    a burst spread over two gateways exactly the limit is admitted; answers streaming through
    one hold the other key's slots, so the other gateway refuses that key (429) while it serves
    a third; and either gateway reads the usage both wrote, as the upstream reported it."""
    url = request.getfixturevalue("redis_url" if store == "redis" else "postgres_dsn")
    config = limits_config(tmp_path, alice={"requests_per_minute": 5}, carol={"max_concurrent": 2})
    with ExitStack() as stack:
        upstream = stack.enter_context(run_asgi_server(FakeUpstream(slow_or_counted))) + "/v1"
        with ThreadPoolExecutor(2) as pool:  # started side by side (ExitStack's deque takes both)
            one, two = (g.base for g in pool.map(stack.enter_context, [limited_gateway(upstream, store, url, config)
                                                                      for _ in range(2)]))  # fmt: skip
        fresh_window(WINDOW, BURST_SECONDS)
        assert sorted(burst([one, two], 15, ALICE)) == [200] * 5 + [429] * 10
        with ExitStack() as streams:  # two answers streaming through `one` hold carol's two slots
            reading = []
            for _ in range(2):
                body = {"model": "m", "input": "slow", "stream": True}
                slow = streams.enter_context(
                    httpx.stream("POST", one + "/v1/responses", json=body, headers=bearer(CAROL), timeout=30)
                )
                reading.append(slow.iter_lines())  # kept: a reader dropped closes its stream
                assert slow.status_code == 200 and next(reading[-1]).startswith("event: response.created")
            over, other = post(two, CAROL), post(two, BOB)
            assert all(any(line == "event: response.completed" for line in lines) for lines in reading)
        assert (over.status_code, over.json()["error"]["code"], other.status_code) == (
            429, "rate_limit_exceeded", 200,
        )  # fmt: skip
        assert post(two, CAROL).status_code == 200  # the slots were freed
        ours = ("alice", "bob", "carol")  # the server may hold other tests' rows
        wait_until(
            lambda: sum(r["requests"] for r in usage_of(two, BOB, "?key=*") if r["key"] in ours) == 9, 10
        )
        rows = usage_of(one, BOB, "?key=*")
    by_key = {r["key"]: r for r in rows}
    assert (by_key["alice"]["requests"], by_key["alice"]["input_tokens"], by_key["alice"]["cached_tokens"]) == (
        5, 5 * USAGE.prompt_tokens, 5 * USAGE.cached_tokens,
    )  # fmt: skip
    assert (by_key["bob"]["requests"], by_key["carol"]["requests"]) == (1, 3)
    assert by_key["carol"]["reasoning_tokens"] == 3 * USAGE.reasoning_tokens


def slow_or_counted(body: dict[str, Any]) -> Any:
    if "slow" in str(body["messages"]):
        return ChatReply(text="slow answer", usage=USAGE, stall_after_chunks=2, stall_seconds=1.0)
    return answer_with_usage(body)


def limited_gateway(
    upstream: str, store: str, url: str, config: Path
) -> AbstractContextManager[ServedGateway]:
    env = {"CODEXGATE_STORE": store, "CODEXGATE_STORE_URL": url, **KEY_ENV}
    return serve_process("--no-discover", "--upstream", upstream, "--config", str(config), env=env)


@pytest.mark.parametrize("store", ["sqlite", "redis", "postgres"])
def test_two_processes_hold_a_days_budget_for_answers_sent_back_to_back(
    store: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The answer that crosses a key's day budget is served whole, and the next request, sent as
    soon as it ended, is refused by the other gateway too: the tokens were in the shared store
    before the answer's end went out (streamed or not), not a second later with the ledger."""
    name = f"budget{uuid.uuid4().hex[:8]}"  # the Redis and PostgreSQL servers outlive this test
    key = f"{name}-secret-key-0001"
    config = tmp_path / "limits.toml"
    config.write_text(f'[[api_keys]]\nname = "{name}"\nkey_env = "BUDGET_KEY"\ntokens_per_day = 1\n')
    if store == "sqlite":
        env = {"CODEXGATE_STORE": "sqlite", "CODEXGATE_STORE_PATH": str(tmp_path / "shared.db")}
    else:
        url = request.getfixturevalue("redis_url" if store == "redis" else "postgres_dsn")
        env = {"CODEXGATE_STORE": store, "CODEXGATE_STORE_URL": url}
    env["BUDGET_KEY"] = key
    args = ("--no-discover", "--config", str(config))
    with ExitStack() as stack:
        upstream = stack.enter_context(run_asgi_server(FakeUpstream(answer_with_usage))) + "/v1"
        with ThreadPoolExecutor(2) as pool:
            one, two = (
                g.base
                for g in pool.map(
                    stack.enter_context,
                    [serve_process(*args, "--upstream", upstream, env=env) for _ in range(2)],
                )
            )
        streamed = post(one, key, stream=True)
        assert streamed.status_code == 200 and "event: response.completed" in streamed.text
        refused = [post(two, key), post(one, key, stream=True)]
    assert [(r.status_code, r.json()["error"]["code"]) for r in refused] == [(429, "insufficient_quota")] * 2
    assert f"({USAGE.prompt_tokens + USAGE.completion_tokens} used)" in refused[0].json()["error"]["message"]
