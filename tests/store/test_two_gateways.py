"""Two `codexgate serve` processes sharing one Redis or PostgreSQL store continue each other's
chains: a response made through one is read, continued and deleted through the other, as
behind a load balancer."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import httpx
import pytest

from tests.support.fake_upstream import FakeUpstream, text_reply
from tests.support.servers import run_asgi_server


def echo(body: dict[str, Any]) -> Any:
    said = [str(m["content"]) for m in body["messages"] if m["role"] == "user"]
    return text_reply("heard: " + " / ".join(said))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def gateway_process(upstream: str, store: str, url: str) -> Iterator[str]:
    port = _free_port()
    env = {**os.environ, "CODEXGATE_STORE": store, "CODEXGATE_STORE_URL": url}
    command = [sys.executable, "-m", "codexgate.cli", "serve", "--port", str(port), "--no-discover"]
    log = tempfile.TemporaryFile()
    process = subprocess.Popen(
        [*command, "--upstream", upstream], env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(base + "/healthz", timeout=1)
                break
            except httpx.TransportError:
                if process.poll() is not None or time.monotonic() > deadline:
                    out = (
                        process.stdout.read().decode()
                        if process.stdout and process.poll() is not None
                        else ""
                    )
                    raise AssertionError(f"the gateway did not start: {out}") from None
                time.sleep(0.05)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


@pytest.mark.parametrize("store", ["redis", "postgres"])
def test_two_processes_continue_each_others_chains(store: str, request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue("redis_url" if store == "redis" else "postgres_dsn")
    with ExitStack() as stack:
        upstream = stack.enter_context(run_asgi_server(FakeUpstream(echo))) + "/v1"
        one = stack.enter_context(gateway_process(upstream, store, url))
        two = stack.enter_context(gateway_process(upstream, store, url))
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
