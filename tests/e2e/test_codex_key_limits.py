"""The real Codex CLI with a limited key, through `codexgate serve`: past its limit Codex gets a
429 `rate_limit_exceeded` with Retry-After, waits, retries, and completes its turn: over HTTP past
requests_per_minute (it waits out the rest of the window), and over a WebSocket past
max_concurrent (an error frame with the same headers; its only slot is held by another request
of the same key, a slow answer that streams until Codex was refused). And never refused for its
own last request, whose upstream is still to send its [DONE] when Codex sends the next."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.codex_cli import codex_versions, run_codex_in
from tests.support.fake_upstream import (
    ChatReply,
    FakeUpstream,
    Reply,
    lingering,
    text_reply,
    tool_calls_reply,
)
from tests.support.key_limits import fresh_window
from tests.support.processes import ServedGateway, serve_process, wait_until
from tests.support.servers import run_asgi_server

pytestmark = pytest.mark.e2e

MODEL = "local-coder"
KEY = "codex-limited-key-7c2e19"
HOLD_SECONDS = 60.0  # longer than any test: the test ends the hold itself
REFUSED = "status=429 outcome=rate_limit_exceeded"
WINDOW = 4.0  # rate_window_seconds of the per-minute test: Codex waits out at most this
CONFIG = """
[[api_keys]]
name = "codex"
key_env = "CODEX_LIMITED_KEY"
max_concurrent = 1
requests_per_minute = 100
"""


def answer(body: dict[str, Any]) -> Reply:
    if "hold the slot" in str(body["messages"]):
        return ChatReply(text="held", stall_after_chunks=2, stall_seconds=HOLD_SECONDS)
    return text_reply("Hello from the limited key.")


@contextmanager
def gateway_with_a_limited_key(
    tmp_path: Path, script: Callable[[dict[str, Any]], Reply] = answer
) -> Iterator[ServedGateway]:
    config = tmp_path / "gateway.toml"
    config.write_text(CONFIG)
    with run_asgi_server(FakeUpstream(script)) as upstream:
        env = {"CODEX_LIMITED_KEY": KEY, "CODEXGATE_STORE_PATH": str(tmp_path / "store.db")}
        with serve_process(
            "--no-discover", "--upstream", upstream + "/v1", "--config", str(config), env=env
        ) as gw:
            yield gw


@contextmanager
def slot_held(base: str) -> Iterator[Callable[[], None]]:
    """A slow answer for the same key streams meanwhile, holding the key's slot until the
    callable yielded is called: its connection closes, and the gateway frees the slot."""
    host, port = base.removeprefix("http://").split(":")
    body = json.dumps({"model": MODEL, "input": "hold the slot", "stream": True}).encode()
    head = (
        f"POST /v1/responses HTTP/1.1\r\nhost: {host}\r\nauthorization: Bearer {KEY}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    sock = socket.create_connection((host, int(port)), timeout=10)
    try:
        sock.sendall(head.encode() + body)
        seen = b""
        while b"response.created" not in seen:
            seen += sock.recv(65536)
        yield lambda: sock.shutdown(socket.SHUT_RDWR)
    finally:
        sock.close()


def test_codex_over_a_websocket_with_a_key_at_max_concurrent_retries_and_completes(tmp_path: Path) -> None:
    with gateway_with_a_limited_key(tmp_path) as gw, slot_held(gw.base) as release:
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(
                run_codex_in, tmp_path, "Say hello.", base_url=gw.base, model=MODEL, env_key="CODEX_LIMITED_KEY",
                env={"CODEX_LIMITED_KEY": KEY}, websockets=True, timeout=90,
            )  # fmt: skip
            wait_until(lambda: any(REFUSED in line for line in gw.output) or running.done(), 60)
            release()  # Codex was refused: the slot frees, and its retry is admitted
            run = running.result()
        access = [line for line in gw.output if "codexgate.access" in line]
    assert run.ok, run.describe()
    assert run.final_message == "Hello from the limited key."
    face = "face=responses-ws"  # Codex's requests, not the hold's
    refused = [n for n, line in enumerate(access) if REFUSED in line]
    assert refused and all(face in access[n] for n in refused), access
    assert any(face in line and "status=200 outcome=completed" in line for line in access[refused[-1] :]), (
        access
    )


@codex_versions
@pytest.mark.parametrize("websockets", [False, True], ids=["http", "websocket"])
def test_codex_at_max_concurrent_is_never_refused_for_its_own_last_request(
    tmp_path: Path, websockets: bool, codex_version: str
) -> None:
    """Codex sends its next request once it has run the tool its last response asked for, which
    takes far less than the 1.5 s the upstream still waits before that response's [DONE]: the
    key's one slot is free by then (freed as the terminal event went out), and over a WebSocket
    the request is served at once on the same connection: nothing is refused."""

    def script(body: dict[str, Any]) -> Reply:
        if not any(m["role"] == "tool" for m in body["messages"]):
            call = ("exec_command", json.dumps({"cmd": "echo lingered"}))
            return lingering(tool_calls_reply([call]), 1.5)
        return text_reply("The command printed lingered.")

    with gateway_with_a_limited_key(tmp_path, script) as gw:
        run = run_codex_in(
            tmp_path, "Run echo lingered.", base_url=gw.base, model=MODEL, env_key="CODEX_LIMITED_KEY",
            env={"CODEX_LIMITED_KEY": KEY}, websockets=websockets, timeout=90, version=codex_version,
        )  # fmt: skip

        def access_lines() -> list[str]:
            return [line for line in gw.output if "codexgate.access" in line and "prewarmed" not in line]

        # The first request's line is written once its upstream's [DONE] came, after Codex ended.
        wait_until(lambda: len(access_lines()) >= 2, 10)
        access = access_lines()
    assert run.ok and run.final_message == "The command printed lingered.", run.describe()
    assert f"/{codex_version}/" in run.argv[0]  # the release this case is for
    assert len(access) == 2 and all("status=200 outcome=completed" in line for line in access), access
    # Over a WebSocket, a next request refused as sent too early (409 response_in_progress) has
    # no access line: Codex drops the connection (the first answer's tail is cancelled) and
    # sends it again on a new one, and says nothing of it.
    assert not any("client disconnected" in line for line in gw.output), gw.output


def test_codex_past_requests_per_minute_waits_for_the_next_window(tmp_path: Path) -> None:
    """requests_per_minute = 1, spent just before Codex starts: its request is refused with the
    seconds left of the window (Retry-After), and Codex waits them out instead of failing."""
    config = tmp_path / "gateway.toml"
    limits = CONFIG.replace("requests_per_minute = 100", "requests_per_minute = 1")
    config.write_text(f"rate_window_seconds = {WINDOW:g}\n" + limits)
    with run_asgi_server(FakeUpstream(answer)) as upstream:
        env = {"CODEX_LIMITED_KEY": KEY, "CODEXGATE_STORE_PATH": str(tmp_path / "store.db")}
        with serve_process(
            "--no-discover", "--upstream", upstream + "/v1", "--config", str(config), env=env
        ) as gw:
            fresh_window(WINDOW, 3.0)  # 3 s left at least: Codex (1 s to start) asks within the window
            spent = httpx.post(gw.base + "/v1/responses", json={"model": MODEL, "input": "x"},
                               headers={"authorization": f"Bearer {KEY}"}, timeout=10)  # fmt: skip
            assert spent.status_code == 200 and spent.headers["x-ratelimit-remaining-requests"] == "0"
            run = run_codex_in(
                tmp_path, "Say hello.", base_url=gw.base, model=MODEL, env_key="CODEX_LIMITED_KEY",
                env={"CODEX_LIMITED_KEY": KEY}, timeout=90,
            )  # fmt: skip
            access = [line for line in gw.output if "codexgate.access" in line and "request_id=" in line]
    assert run.ok and run.final_message == "Hello from the limited key.", run.describe()
    assert [REFUSED in line for line in access] == [True, False], access  # refused once, then served
    assert "status=200 outcome=completed" in access[-1]
    assert any("Reconnecting" in said and "429" in said for said in run.errors), run.describe()
