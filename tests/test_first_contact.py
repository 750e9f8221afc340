"""What a new user meets first: doctor and codex-setup on a wrong, dead or empty upstream,
worded by cause, and a gateway pointed at a wrong path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from codexgate.cli import main
from tests.server.test_app import gateway
from tests.support.fake_upstream import FakeUpstream, text_reply
from tests.support.processes import free_port
from tests.support.servers import run_asgi_server


async def not_found_everywhere(scope: Any, receive: Any, send: Any) -> None:
    """A web server, but not an OpenAI API at this path (FastAPI's default 404)."""
    if scope["type"] != "http":
        return
    await send(
        {"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"application/json")]}
    )
    await send({"type": "http.response.body", "body": json.dumps({"detail": "Not Found"}).encode()})


async def no_models(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}
    )
    await send({"type": "http.response.body", "body": json.dumps({"object": "list", "data": []}).encode()})


def closed_port_url() -> str:
    return f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there


def test_doctor_says_unreachable_for_a_dead_server(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--upstream", closed_port_url(), "--timeout", "2"]) == 1
    out = capsys.readouterr().out
    assert "unreachable: nothing answers at http://127.0.0.1:" in out


def test_doctor_says_wrong_path_for_a_server_without_the_api_there(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with run_asgi_server(not_found_everywhere) as url:
        assert main(["doctor", "--upstream", url, "--timeout", "2"]) == 1
    out = capsys.readouterr().out
    assert "wrong path" in out and f"(try {url}/v1)" in out


def test_doctor_says_no_models_for_an_empty_server(capsys: pytest.CaptureFixture[str]) -> None:
    with run_asgi_server(no_models) as url:
        assert main(["doctor", "--upstream", url + "/v1", "--timeout", "2"]) == 1
    assert "no models: the server at" in capsys.readouterr().out


def test_doctor_refuses_a_url_that_is_not_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--upstream", "localhost:11434"]) == 2
    assert "did you mean http://localhost:11434/v1?" in capsys.readouterr().err


def test_codex_setup_says_why_there_are_no_models(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "codex"
    assert main(["codex-setup", "--upstream", closed_port_url(), "--codex-home", str(home)]) == 2
    err = capsys.readouterr().err
    assert "no models to set up from the upstream: unreachable: nothing answers" in err
    with run_asgi_server(not_found_everywhere) as url:
        assert main(["codex-setup", "--upstream", url, "--codex-home", str(home)]) == 2
    assert "wrong path" in capsys.readouterr().err
    assert not home.exists()


def test_codex_setup_without_upstream_or_discovery_says_what_to_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["codex-setup", "--no-discover", "--codex-home", str(tmp_path)]) == 2
    assert "pass --model NAME, route models in --config, or give an --upstream" in capsys.readouterr().err


async def test_a_gateway_pointed_at_a_wrong_path_says_the_url_is_wrong() -> None:
    async with gateway(fake=FakeUpstream([text_reply("unused")])) as (client, fake, transport):
        transport.app = not_found_everywhere  # the same host answers, but not with the API
        response = await client.post("/v1/responses", json={"model": "m", "input": "x"})
    error = response.json()["error"]
    assert response.status_code == 400 and error["code"] == "upstream_wrong_url"
    assert "http://upstream.test/v1/chat/completions" in error["message"]
    assert "upstream URL is probably wrong" in error["message"]


def test_doctor_and_codex_setup_find_a_local_server_like_serve(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeUpstream(lambda body: text_reply("Paris."), models=["local-model"])
    with run_asgi_server(fake) as url:
        monkeypatch.setattr("codexgate.backends.discovery.LOCAL_SERVERS", (("Test server", url + "/v1"),))
        main(["doctor", "--timeout", "5"])
        out = capsys.readouterr().out
        assert f"found Test server at {url}/v1" in out and "model local-model" in out
        assert main(["codex-setup", "--codex-home", str(tmp_path), "--context-window", "32768"]) == 0
    out = capsys.readouterr().out
    assert f"found Test server at {url}/v1" in out and "model local-model: context window 32768" in out


# -- what operators see


async def test_one_log_line_per_request_with_tokens_and_timings(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="codexgate.access")
    reply = text_reply("Hello", usage=True)
    async with gateway([reply]) as (client, _, _):
        response = await client.post(
            "/v1/responses",
            json={"model": "qwen x forged=1", "input": "hi", "stream": True},
            headers={"x-client-request-id": "thread-42"},
        )
        assert response.status_code == 200
        missing = await client.post("/v1/responses", json={"input": "hi"})
        assert missing.status_code == 400
    lines = [r.getMessage() for r in caplog.records if r.name == "codexgate.access"]
    assert len(lines) == 2
    ok = dict(field.split("=", 1) for field in lines[0].split(" "))
    assert ok["request_id"] == "thread-42" and ok["model"] == "qwen_x_forged_1"  # cannot forge fields
    assert ok["upstream"] == "default" and ok["status"] == "200" and ok["outcome"] == "completed"
    assert int(ok["input_tokens"]) > 0 and int(ok["output_tokens"]) > 0
    assert 0 <= int(ok["ttft_ms"]) <= int(ok["duration_ms"]) and ok["response_id"].startswith("resp_")
    assert "status=400 outcome=invalid_request_error" in lines[1]


async def test_healthz_reports_each_upstream_and_is_503_when_none_is_usable() -> None:
    async with gateway([]) as (client, _, transport):
        healthy = await client.get("/healthz")
        transport.app = not_found_everywhere
        cached = await client.get("/healthz")  # asked at most every few seconds
    assert healthy.status_code == 200 and cached.status_code == 200
    upstream = healthy.json()["upstreams"]["default"]
    assert upstream["reachable"] and upstream["usable"] and upstream["problem"] is None

    async with gateway([]) as (client, _, transport):
        transport.app = not_found_everywhere
        wrong = await client.get("/healthz")
        transport.app = None  # connection refused
    assert wrong.status_code == 503 and wrong.json()["status"] == "unavailable"
    assert wrong.json()["upstreams"]["default"]["problem"].startswith("wrong path")
    async with gateway([]) as (client, _, transport):
        transport.app = None
        dead = await client.get("/healthz")
    assert dead.status_code == 503 and dead.json()["upstreams"]["default"]["reachable"] is False


async def test_healthz_without_any_upstream_is_503() -> None:
    import httpx

    from codexgate.app import build_app
    from codexgate.config import load_settings
    from tests.support.asgi_client import StreamingASGITransport

    app = build_app(load_settings({"discover": False}, environ={}), environ={})
    async with httpx.AsyncClient(transport=StreamingASGITransport(app), base_url="http://gw") as client:
        response = await client.get("/healthz")
    assert response.status_code == 503 and response.json()["upstreams"] == {}


async def test_the_response_echoes_the_sampling_values_actually_sent() -> None:
    async with gateway([text_reply("ok"), text_reply("ok")]) as (client, fake, _):
        defaulted = (
            await client.post("/v1/responses", json={"model": "qwen3-coder:30b", "input": "x"})
        ).json()
        chosen = await client.post("/v1/responses", json={"model": "qwen3-coder:30b", "input": "x",
                                                          "temperature": 0.2})  # fmt: skip
    sent = fake.requests[0].body
    assert (
        (defaulted["temperature"], defaulted["top_p"]) == (sent["temperature"], sent["top_p"]) == (0.7, 0.8)
    )
    assert chosen.json()["temperature"] == fake.requests[1].body["temperature"] == 0.2


async def test_with_no_sampling_sent_the_echo_is_the_responses_default_as_documented() -> None:
    """docs/operations.md: the Open Responses schema requires numbers, so sampling the gateway
    did not send reads 1.0 (the API's default), never a value of its own invention."""
    from tests.support.openresponses import validate_response

    async with gateway([text_reply("ok")]) as (client, fake, _):
        body = (await client.post("/v1/responses", json={"model": "some-unknown-model", "input": "x"})).json()
    sent = fake.requests[0].body
    assert "temperature" not in sent and "top_p" not in sent
    assert (body["temperature"], body["top_p"]) == (1.0, 1.0)
    validate_response(body)
