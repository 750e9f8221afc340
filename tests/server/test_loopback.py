"""The real stack on loopback: `codexgate serve` as a subprocess (uvicorn, aiohttp) in front of
the fake upstream served by uvicorn. Proves what the in-process transport cannot: real sockets,
real connection drops, the CLI's defaults."""

from __future__ import annotations

import subprocess
import sys

import httpx
import orjson
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect as ws_connect

from tests.support.fake_upstream import FakeUpstream, cut_reply, stall_reply, text_reply
from tests.support.openresponses import validate_stream
from tests.support.processes import serve_process, wait_until
from tests.support.servers import run_asgi_server
from tests.support.sse import sse_events


def test_a_stream_through_the_real_server_and_client() -> None:
    fake = FakeUpstream([text_reply("over real sockets", reasoning="hmm")])
    with (
        run_asgi_server(fake) as upstream,
        serve_process("--upstream", upstream + "/v1", "--no-discover") as gw,
    ):
        response = httpx.post(
            gw.base + "/v1/responses", json={"model": "m", "input": "hi", "stream": True}, timeout=10
        )
        models = httpx.get(gw.base + "/v1/models", timeout=10).json()
    events = sse_events(response.content)
    validate_stream(events)
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["output"][-1]["content"][0]["text"] == "over real sockets"
    assert [m["id"] for m in models["data"]] == ["fake-model"]


def test_a_connection_dropped_by_the_upstream_is_a_failed_response() -> None:
    fake = FakeUpstream([cut_reply("half an ans")])
    with (
        run_asgi_server(fake) as upstream,
        serve_process("--upstream", upstream + "/v1", "--no-discover") as gw,
    ):
        response = httpx.post(
            gw.base + "/v1/responses", json={"model": "m", "input": "hi", "stream": True}, timeout=10
        )
    events = sse_events(response.content)
    validate_stream(events)
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"]["code"] == "upstream_stream_cut"


def test_a_client_that_leaves_cancels_the_upstream_generation() -> None:
    fake = FakeUpstream([text_reply("tok " * 500, chunk_chars=4, delay_between_chunks=0.01)])
    with (
        run_asgi_server(fake) as upstream,
        serve_process("--upstream", upstream + "/v1", "--no-discover") as gw,
    ):
        with httpx.stream(
            "POST", gw.base + "/v1/responses", json={"model": "m", "input": "x", "stream": True}, timeout=10
        ) as response:
            for chunk in response.iter_bytes():
                if b"output_text.delta" in chunk:
                    break
        wait_until(lambda: fake.disconnects > 0, seconds=5, what="the upstream saw no disconnect")
    assert fake.disconnects == 1


def test_a_client_that_accepts_zstd_and_gzip_gets_a_plain_stream_as_it_is_made() -> None:
    # Codex 0.171 sends `accept-encoding: zstd,gzip`. The answer must be one it can read and
    # must not wait to be compressed whole: the first delta comes while the upstream is still
    # stalled (30 s, longer than the client's 10 s timeout), uncompressed on the wire.
    fake = FakeUpstream([stall_reply("first, then the rest", stall_seconds=30)])
    request = {"model": "m", "input": "hi", "stream": True}
    with (
        run_asgi_server(fake) as upstream,
        serve_process("--upstream", upstream + "/v1", "--no-discover") as gw,
        httpx.stream(
            "POST",
            gw.base + "/v1/responses",
            json=request,
            headers={"accept-encoding": "zstd,gzip"},
            timeout=10,
        ) as response,
    ):
        raw = b""
        for chunk in response.iter_raw():  # the bytes as sent: nothing decoded by httpx
            raw += chunk
            if b"response.output_text.delta" in raw:
                break
    assert response.status_code == 200
    assert "content-encoding" not in response.headers
    assert response.headers["content-type"].startswith("text/event-stream")
    assert [e["type"] for e in sse_events(raw)][:2] == ["response.created", "response.in_progress"]
    assert fake.requests[0].body["stream"] is True


def test_websocket_mode_is_served_on_the_real_server() -> None:
    beta = {"openai-beta": "responses_websockets=2026-02-06"}
    with serve_process("--upstream", "http://127.0.0.1:9/v1", "--no-discover") as gw:
        base = gw.base.replace("http", "ws")
        with pytest.raises(InvalidStatus) as other:
            with ws_connect(base + "/v1/chat/completions", additional_headers=beta, open_timeout=10):
                pass
        with ws_connect(base + "/v1/responses", open_timeout=10) as ws:
            ws.send(orjson.dumps({"type": "response.create", "model": "m", "input": "hi"}).decode())
            frame = orjson.loads(ws.recv(timeout=30))
    assert (
        other.value.response.status_code == 426
    )  # no WebSocket mode there: Codex falls back to HTTP at once
    assert frame["type"] == "error" and frame["error"]["code"] == "upstream_unreachable"


def test_without_an_upstream_the_gateway_starts_and_explains() -> None:
    with serve_process("--no-discover") as gw:
        response = httpx.post(gw.base + "/v1/responses", json={"model": "m", "input": "x"}, timeout=10)
    assert response.status_code == 503
    assert "--upstream" in response.json()["error"]["message"]


@pytest.mark.parametrize("flag,value", [("--idle-timeout", "abc"), ("--port", "-")])
def test_bad_flags_fail_fast(flag: str, value: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "codexgate.cli", "serve", flag, value],
        capture_output=True,
        timeout=20,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 2
