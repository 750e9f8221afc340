"""The transcript recorder (observability/recorder.py) and `codexgate replay` (commands/replay/command.py): a recorded
turn has every part and no secret, retention prunes, a replay reproduces the recorded events
and reports a change, a written test runs green, and with recording off nothing is tapped."""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from websockets.asyncio.client import connect

from codexgate.app import build_app
from codexgate.backends import scope
from codexgate.backends.http.tap import TappedTransport
from codexgate.backends.http.transport import HttpRequest, UpstreamResponse
from codexgate.cli import main
from codexgate.config import load_settings
from codexgate.observability.recorder import Recorder, Retention
from codexgate.redact import Redactor
from codexgate.server.exchange import Exchange
from codexgate.wire.responses import ResponsesRequest
from tests.support.asgi_upstream import ASGIUpstreamTransport
from tests.support.fake_upstream import (
    FakeUpstream,
    Reply,
    error_reply,
    openai_error,
    stall_reply,
    text_reply,
    tool_calls_reply,
)
from tests.support.servers import arun_asgi_server

JSON = dict[str, Any]
UPSTREAM_KEY = "upstream-secret-0123456789abcdef"
INBOUND_KEY = "inbound-secret-abcdefghijklmnop"
ENVIRON = {"UPSTREAM_KEY": UPSTREAM_KEY, "INBOUND_KEY": INBOUND_KEY}
SHELL_TOOL = {
    "type": "function",
    "name": "shell",
    "description": "run a command",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
}


@asynccontextmanager
async def recording_gateway(
    script: Any, record_dir: Path | None, **settings: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, FakeUpstream]]:
    """A gateway (lifespan on: the recorder's writer stops and flushes at its shutdown) in front
    of a fake chat upstream that wants a key, serving one inbound key."""
    fake = FakeUpstream(script)
    async with arun_asgi_server(fake) as fake_url:
        config = load_settings(
            {
                "upstream": fake_url + "/v1",
                "upstream_api_key_env": "UPSTREAM_KEY",
                "api_keys": [{"name": "alice", "key_env": "INBOUND_KEY"}],
                "discover": False,
                "store": "none",
                **({"record_dir": str(record_dir)} if record_dir else {}),
                **settings,
            },
            environ=ENVIRON,
        )
        app = build_app(config, environ=ENVIRON)
        headers = {"authorization": f"Bearer {INBOUND_KEY}"}
        async with (
            arun_asgi_server(app, lifespan="on") as url,
            httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client,
        ):
            yield client, fake


def recordings(directory: Path) -> list[Path]:
    return sorted(directory.glob("turn-*.json"))


async def record_one(
    tmp_path: Path, reply: Reply, settings: Mapping[str, Any] | None = None, status: int = 200, **body: Any
) -> Path:
    """One streamed Responses turn recorded; the file."""
    record_dir = tmp_path / "records"
    async with recording_gateway(lambda _: reply, record_dir, **(settings or {})) as (client, _):
        answer = await client.post("/v1/responses", json={"model": "m", "stream": True, **body})
        assert answer.status_code == status
    [path] = recordings(record_dir)
    return path


async def replay(*args: str) -> int:
    return await asyncio.to_thread(main, ["replay", *args])


async def test_a_recorded_turn_has_every_part_and_no_secret(tmp_path: Path) -> None:
    # Both keys travel through the turn: the user pastes the upstream key, the model echoes
    # the inbound key in its text and the upstream key in a tool call's arguments.
    reply = tool_calls_reply(
        [("shell", orjson.dumps({"cmd": f"curl -H 'x: {UPSTREAM_KEY}'"}).decode())],
        text=f"using {INBOUND_KEY}",
        chunk_chars=64,
        args_chunk_chars=200,
    )
    path = await record_one(tmp_path, reply, input=f"my key is {UPSTREAM_KEY}", tools=[SHELL_TOOL])
    raw = path.read_text()
    assert UPSTREAM_KEY not in raw and INBOUND_KEY not in raw
    assert "[redacted]" in raw
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    doc = orjson.loads(raw)
    assert doc["version"] == 1 and doc["face"] == "responses" and doc["model"] == "m"
    assert doc["upstream"]["name"] == "default" and doc["upstream"]["kind"] == "chat"
    assert doc["upstream"]["settings"]["max_retries"] == 2
    assert doc["request"]["model"] == "m" and doc["request"]["tools"][0]["name"] == "shell"
    # The first request to a model: the upstream's list (which has "fake-model", not "m"), the
    # probes of the window of the one model it runs, then the request itself.
    listing, *probes, sent = doc["upstream_exchanges"]
    assert (listing["method"], listing["path"]) == ("GET", "/models")
    assert probes and "/chat/completions" not in [p["path"] for p in probes]
    assert (sent["method"], sent["path"], sent["status"], sent["end"]) == (
        "POST",
        "/chat/completions",
        200,
        "eof",
    )
    assert "authorization" not in {name.lower() for name in sent["headers"]}
    assert sent["body"]["json"]["messages"][-1]["content"] == "my key is [redacted]"
    assert "chat.completion.chunk" in sent["response_body"]["text"]
    types = [event["type"] for event in doc["events"]]
    assert types[0] == "response.created" and types[-1] == "response.completed"
    items = [e["item"] for e in doc["events"] if e["type"] == "response.output_item.done"]
    assert [item["type"] for item in items] == ["message", "function_call"]
    assert items[1]["name"] == "shell"
    assert doc["outcome"]["status"] == 200 and doc["outcome"]["terminal"] == "response.completed"


async def test_a_replay_reproduces_the_recorded_events(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reply = tool_calls_reply([("shell", '{"cmd":"ls -la"}')], text="hello there, listing", reasoning="think")
    # A routed model with its own settings: the replay builds the same route.
    route = {"name": "m", "model": "served-m", "extra_body": {"top_k": 5}, "think_tags": "off"}
    path = await record_one(tmp_path, reply, {"models": [route]}, input="list files", tools=[SHELL_TOOL])
    sent = orjson.loads(path.read_bytes())["upstream_exchanges"][-1]["body"]["json"]
    assert (sent["model"], sent["top_k"]) == ("served-m", 5)
    assert orjson.loads(path.read_bytes())["upstream_exchanges"][-1]["response_body"]["splits"]
    assert await replay(str(path)) == 0
    out = capsys.readouterr().out
    assert "the same as recorded" in out and "note:" not in out


async def test_a_replay_reports_a_changed_answer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = await record_one(tmp_path, text_reply("hello there", chunk_chars=64), input="hi")
    doc = orjson.loads(path.read_bytes())
    body = doc["upstream_exchanges"][-1]["response_body"]
    body["text"] = body["text"].replace("hello", "HELLO")
    path.write_bytes(orjson.dumps(doc))
    assert await replay(str(path)) == 1
    out = capsys.readouterr().out
    assert "the events differ" in out
    assert any(line.startswith("-") and "hello there" in line for line in out.splitlines())
    assert any(line.startswith("+") and "HELLO there" in line for line in out.splitlines())


async def test_a_refused_turn_replays_as_the_same_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    refusal = error_reply(400, openai_error("This model's maximum context length is 8192 tokens."))
    path = await record_one(tmp_path, refusal, status=400, input="hi")
    doc = orjson.loads(path.read_bytes())
    assert doc["events"] == [] and doc["outcome"]["status"] == 400
    assert await replay(str(path)) == 0
    assert "0 events, the same as recorded" in capsys.readouterr().out


async def test_an_upstream_timeout_replays_without_the_wait(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = await record_one(tmp_path, stall_reply("slow answer", 5.0), {"idle_timeout": 0.5}, input="hi")
    doc = orjson.loads(path.read_bytes())
    assert doc["upstream_exchanges"][-1]["end"] == "cancelled"
    assert doc["events"][-1]["response"]["error"]["code"] == "upstream_timeout"
    started = time.monotonic()
    assert await replay(str(path)) == 0
    assert time.monotonic() - started < 5.0
    assert "the same as recorded" in capsys.readouterr().out


async def test_a_written_test_replays_green(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = await record_one(
        tmp_path, tool_calls_reply([("shell", '{"cmd":"pwd"}')]), input="where", tools=[SHELL_TOOL]
    )
    project = tmp_path / "project"
    test_file = project / "tests" / "server" / "test_bug_42.py"
    test_file.parent.mkdir(parents=True)
    assert await replay(str(path), "--write-test", str(test_file)) == 0
    assert (project / "tests" / "fixtures" / "recordings" / "bug_42.json").is_file()
    run = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout


async def test_a_websocket_continuation_records_the_expanded_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record_dir = tmp_path / "records"

    def echo(body: JSON) -> Reply:
        said = [str(m["content"]) for m in body["messages"] if m["role"] == "user"]
        return text_reply("heard: " + " / ".join(said))

    async with recording_gateway(echo, record_dir) as (client, _):
        url = str(client.base_url).replace("http://", "ws://").rstrip("/") + "/v1/responses"
        headers = {"authorization": f"Bearer {INBOUND_KEY}"}
        async with connect(url, additional_headers=headers) as ws:
            previous = None
            for text in ("one", "two"):
                frame = {"type": "response.create", "model": "m", "store": False, "previous_response_id": previous,
                         "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}]}  # fmt: skip
                await ws.send(orjson.dumps(frame).decode())
                event: JSON = {}
                while event.get("type") != "response.completed":
                    event = orjson.loads(await asyncio.wait_for(ws.recv(), 10))
                previous = event["response"]["id"]
    first, second = recordings(record_dir)
    doc = orjson.loads(second.read_bytes())
    assert doc["face"] == "responses-ws" and doc["request"]["previous_response_id"] is not None
    assert len(doc["request"]["input"]) == 1 and len(doc["backend_request"]["input"]) == 3
    assert await replay(str(second)) == 0
    assert "the same as recorded" in capsys.readouterr().out


async def test_the_fixture_upstream_serves_the_recorded_bytes(tmp_path: Path) -> None:
    path = await record_one(tmp_path, text_reply("served again"), input="hi")
    recorded = orjson.loads(path.read_bytes())["upstream_exchanges"][-1]["response_body"]["text"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "codexgate.cli", "replay", str(path), "--upstream-only"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 30)
        base = line.split(" at ")[1].split(" ")[0]
        async with httpx.AsyncClient(timeout=10) as client:
            for _ in range(2):  # served again for every run
                answer = await client.post(base + "/chat/completions", json={})
                assert answer.status_code == 200 and answer.text == recorded
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


async def test_a_turn_that_cannot_be_replayed_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "codex.json"
    path.write_bytes(
        orjson.dumps({"version": 1, "upstream": {"name": "agent", "kind": "codex"}, "events": []})
    )
    assert await replay(str(path)) == 2
    assert "JSON-RPC" in capsys.readouterr().out
    path.write_text("{not json")
    assert await replay(str(path)) == 2


def write_aged(path: Path, size: int, age: float) -> None:
    path.write_bytes(b"x" * size)
    then = time.time() - age
    os.utime(path, (then, then))


async def test_retention_prunes_by_age_then_oldest_first(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path, Redactor(), Retention(max_age=3600, max_bytes=1000))
    write_aged(tmp_path / "turn-old.json", 10, 7200)  # past the age
    write_aged(tmp_path / "turn-a.json", 400, 300)  # the oldest of what is over the size
    write_aged(tmp_path / "turn-b.json", 400, 200)
    write_aged(tmp_path / "turn-c.json", 400, 100)
    write_aged(tmp_path / "turn-crash.json.tmp", 10, 7200)  # a write a crash left behind
    write_aged(tmp_path / "notes.txt", 5000, 7200)  # not the recorder's
    assert recorder.prune() == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "turn-b.json", "turn-c.json"]


async def test_retention_prunes_at_startup(tmp_path: Path) -> None:
    write_aged(tmp_path / "turn-old.json", 10, 9 * 24 * 3600)
    write_aged(tmp_path / "turn-new.json", 10, 60)
    settings = load_settings({"record_dir": str(tmp_path), "discover": False}, environ={})
    recorder = Recorder.from_settings(settings, Redactor())
    assert recorder is not None
    recorder.start()  # the writer prunes first (7 days by default)
    await recorder.aclose()
    assert [p.name for p in tmp_path.iterdir()] == ["turn-new.json"]


async def test_a_full_queue_drops_turns_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = Recorder(tmp_path, Redactor(), Retention(3600, 10**9), queue_size=1)
    release = threading.Event()
    rendering = threading.Event()
    real_render = recorder._render

    def slow_render(turn: Any) -> bytes:
        rendering.set()
        release.wait(10)
        return real_render(turn)

    recorder._writer._render = slow_render
    with caplog.at_level(logging.WARNING, "codexgate.recorder"):
        for index in range(4):
            exchange = Exchange(f"r{index}", "responses")
            exchange.req = ResponsesRequest(model="m", input=[])
            recorder.started(exchange)
            recorder.finished(exchange)
            if index == 0:
                assert await asyncio.to_thread(rendering.wait, 10)  # the writer is busy now
        release.set()
        await recorder.aclose()
    assert len(recordings(tmp_path)) == 2  # the one being written and the one queued
    assert any("cannot keep up" in r.getMessage() for r in caplog.records)


class _NoTapTransport(ASGIUpstreamTransport):
    """The test transport, checking that no tap is set when a request goes out."""

    opened = 0

    async def open(self, request: HttpRequest) -> UpstreamResponse:
        assert scope.current().tap is None
        type(self).opened += 1
        return await super().open(request)


async def test_with_recording_off_nothing_is_recorded_or_tapped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    fake = FakeUpstream([text_reply("hi")])
    transport = _NoTapTransport(fake)
    settings = load_settings(
        {"upstream": "http://fake.test/v1", "discover": False, "store": "none"}, environ={}
    )
    app = build_app(settings, transport=transport, environ={})
    assert not any(isinstance(o, Recorder) for o in app.observers.all)
    assert app.router.backends["default"].transport is transport  # type: ignore[attr-defined]
    assert not isinstance(app.router.backends["default"].transport, TappedTransport)  # type: ignore[attr-defined]
    async with arun_asgi_server(app, lifespan="on") as url, httpx.AsyncClient(base_url=url) as client:
        answer = await client.post("/v1/responses", json={"model": "m", "input": "x", "stream": True})
    assert answer.status_code == 200 and _NoTapTransport.opened >= 1
    assert list(tmp_path.iterdir()) == []
