"""Who may use the gateway: API keys, reload, loopback-only without keys, Host, content type,
CORS and the WebSocket upgrade (server/guard.py, server/auth.py)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from codexgate.app import build_app
from codexgate.cli import main
from codexgate.config import ConfigError, load_settings
from codexgate.server.app import GatewayApp
from codexgate.server.auth import KeyRing, resolve_api_keys
from codexgate.server.serve import check_exposure
from tests.support.asgi_client import StreamingASGITransport
from tests.support.asgi_upstream import ASGIUpstreamTransport
from tests.support.fake_upstream import FakeUpstream, text_reply

UPSTREAM = "http://upstream.test/v1"
ALICE, BOB = "alice-secret-key-0001", "bob-secret-key-0002"
ENV = {"ALICE_KEY": ALICE, "BOB_KEY": BOB}
TWO_KEYS = """
[[api_keys]]
name = "alice"
key_env = "ALICE_KEY"

[[api_keys]]
name = "bob"
key_env = "BOB_KEY"
"""


@asynccontextmanager
async def gateway(
    *,
    config: Path | None = None,
    environ: dict[str, str] | None = None,
    client: tuple[str, int] = ("127.0.0.1", 50000),
    script: Any = (),
    **settings: Any,
) -> AsyncIterator[tuple[httpx.AsyncClient, GatewayApp]]:
    environ = {} if environ is None else environ
    flags = {"discover": False, "upstream": UPSTREAM, **settings}
    settings_obj = load_settings(flags, config, environ=environ)
    transport = ASGIUpstreamTransport(FakeUpstream(script, models=["m1"]))
    app = build_app(settings_obj, transport=transport, environ=environ, config_file=config)
    async with httpx.AsyncClient(
        transport=StreamingASGITransport(app, client=client), base_url="http://gw", timeout=10
    ) as http:
        yield http, app


def keyed_config(tmp_path: Path, text: str = TWO_KEYS) -> Path:
    path = tmp_path / "gw.toml"
    path.write_text(text)
    return path


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def assert_invalid_key(response: httpx.Response) -> None:
    assert response.status_code == 401
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "invalid_api_key"
    assert response.headers["www-authenticate"].startswith("Bearer")


# -- keys


async def test_both_header_forms_are_accepted_and_a_wrong_or_missing_key_is_401(tmp_path: Path) -> None:
    async with gateway(config=keyed_config(tmp_path), environ=ENV) as (http, _):
        assert (await http.get("/v1/models", headers=bearer(ALICE))).status_code == 200
        assert (await http.get("/v1/models", headers={"x-api-key": BOB})).status_code == 200
        assert_invalid_key(await http.get("/v1/models"))
        assert_invalid_key(await http.get("/v1/models", headers=bearer("alice-secret-key-0009")))
        assert_invalid_key(await http.get("/v1/models", headers={"authorization": f"Basic {ALICE}"}))


async def test_responses_needs_a_key_and_works_with_one(tmp_path: Path) -> None:
    body = {"model": "m", "input": "hi"}
    async with gateway(config=keyed_config(tmp_path), environ=ENV, script=[text_reply("hello")]) as (http, _):
        assert_invalid_key(await http.post("/v1/responses", json=body))
        response = await http.post("/v1/responses", json=body, headers={"x-api-key": ALICE})
        assert response.status_code == 200 and response.json()["status"] == "completed"


async def test_keys_from_codexgate_api_keys_are_named_or_numbered() -> None:
    keys = resolve_api_keys([], {"CODEXGATE_API_KEYS": f"ci={ALICE}, {BOB}"})
    assert keys == {"ci": ALICE, "CODEXGATE_API_KEYS#2": BOB}
    async with gateway(environ={"CODEXGATE_API_KEYS": f"ci={ALICE}"}) as (http, _):
        assert (await http.get("/v1/models", headers=bearer(ALICE))).status_code == 200
        assert_invalid_key(await http.get("/v1/models", headers=bearer(f"ci={ALICE}")))


@pytest.mark.parametrize(
    ("environ", "problem"),
    [
        ({"ALICE_KEY": ALICE}, "BOB_KEY is not set"),
        ({"ALICE_KEY": ALICE, "BOB_KEY": "short"}, "shorter than 8"),
        ({**ENV, "CODEXGATE_API_KEYS": f"alice={BOB}"}, "used twice"),
    ],
)
async def test_bad_key_configuration_is_a_clear_error(
    tmp_path: Path, environ: dict[str, str], problem: str
) -> None:
    settings = load_settings({"discover": False}, keyed_config(tmp_path), environ=environ)
    with pytest.raises(ConfigError, match=problem):
        build_app(settings, environ=environ)


def test_the_key_ring_keeps_digests_and_names_the_match() -> None:
    ring = KeyRing({"alice": ALICE, "bob": BOB})
    assert ring.match(BOB) == "bob" and ring.match(ALICE) == "alice"
    assert ring.match(ALICE[:-1]) is None and ring.match("") is None
    assert ALICE not in repr(vars(ring))


async def test_healthz_without_a_key_is_liveness_only(tmp_path: Path) -> None:
    async with gateway(config=keyed_config(tmp_path), environ=ENV) as (http, _):
        assert (await http.get("/healthz")).json() == {"status": "ok"}
        assert "upstreams" in (await http.get("/healthz", headers=bearer(ALICE))).json()
        assert_invalid_key(await http.get("/healthz", headers=bearer("not-a-key-at-all")))


async def test_a_key_removed_from_the_config_is_revoked_by_reload(tmp_path: Path) -> None:
    config = keyed_config(tmp_path)
    async with gateway(config=config, environ=ENV) as (http, app):
        assert (await http.get("/v1/models", headers=bearer(BOB))).status_code == 200
        config.write_text(TWO_KEYS.split('[[api_keys]]\nname = "bob"')[0])
        assert app.guard is not None
        app.guard.reload()  # what SIGHUP calls
        assert_invalid_key(await http.get("/v1/models", headers=bearer(BOB)))
        assert (await http.get("/v1/models", headers=bearer(ALICE))).status_code == 200
        config.write_text("[[api_keys]\nbroken")  # an unreadable file keeps the keys in force
        app.guard.reload()
        assert (await http.get("/v1/models", headers=bearer(ALICE))).status_code == 200


async def test_a_changed_config_file_is_noticed_by_its_mtime(tmp_path: Path) -> None:
    config = keyed_config(tmp_path)
    async with gateway(config=config, environ=ENV) as (http, app):
        assert app.guard is not None
        app.guard._check_every, app.guard._next_check = 0.0, 0.0  # at most once a second in production
        config.write_text(TWO_KEYS.replace('"bob"', '"bobby"').replace("BOB_KEY", "NO_SUCH_VAR"))
        os.utime(config, ns=(1, 1))  # a different mtime whatever the clock's resolution
        assert_invalid_key(await http.get("/v1/models", headers=bearer(BOB)))
        assert (await http.get("/v1/models", headers=bearer(ALICE))).status_code == 200


LIMITED = '[[models]]\nname = "coder"\n[[api_keys]]\nname = "alice"\nkey_env = "ALICE_KEY"\nrequests_per_minute = 7\n'


@pytest.mark.parametrize("how", ["sighup", "saved file"])
async def test_a_reload_a_start_would_refuse_keeps_the_keys_and_says_why_in_the_start_s_words(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    config = keyed_config(tmp_path, LIMITED)
    async with gateway(config=config, environ=ENV) as (http, app):
        assert app.guard is not None
        app.guard._check_every, app.guard._next_check = 0.0, 0.0  # at most once a second in production
        for mistake in ("requests_per_minute = -1", 'models = ["codr"]'):
            config.write_text(LIMITED.replace("requests_per_minute = 7", mistake))
            with pytest.raises(ConfigError) as at_start:
                load_settings({"discover": False, "upstream": UPSTREAM}, config, environ=ENV)
            caplog.clear()
            if how == "sighup":
                app.guard.reload()
            else:
                os.utime(config, ns=(len(mistake), len(mistake)))  # another mtime whatever the clock
                await http.get("/v1/models", headers=bearer(ALICE))
            [said] = [r.getMessage() for r in caplog.records if r.name == "codexgate.guard"]
            assert said == f"API keys not reloaded, the previous keys stay in force: {at_start.value}"
            assert "\n" not in said and "api_keys[0]" in said
            assert (await http.get("/v1/models", headers=bearer(ALICE))).status_code == 200
            assert app.admission.policies["alice"].limits.requests_per_minute == 7
            assert app.admission.policies["alice"].models is None
    assert "did you mean 'coder'?" in said  # the last mistake: a route misspelt


@pytest.mark.skipif(sys.platform == "win32", reason="SIGHUP")
async def test_sighup_reloads_the_keys_of_a_running_gateway(tmp_path: Path) -> None:
    config = keyed_config(tmp_path)
    env = {**os.environ, **ENV, "CODEXGATE_CONFIG": str(config)}
    env.pop("CODEXGATE_API_KEYS", None)
    args = ["-m", "codexgate.cli", "serve", "--port", "0", "--no-discover", "--upstream", UPSTREAM]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *args, env=env, stderr=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL
    )
    assert proc.stderr is not None

    async def line_matching(pattern: str) -> re.Match[str]:
        async with asyncio.timeout(20):
            while True:
                line = (await proc.stderr.readline()).decode()  # type: ignore[union-attr]
                assert line, "the gateway exited"
                if match := re.search(pattern, line):
                    return match

    try:
        port = (await line_matching(r"running on http://127\.0\.0\.1:(\d+)")).group(1)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            # the upstream is dead (503), but a key still buys the details
            assert "upstreams" in (await http.get("/healthz", headers=bearer(BOB))).json()
            config.write_text(TWO_KEYS.split('[[api_keys]]\nname = "bob"')[0])
            proc.send_signal(signal.SIGHUP)
            await line_matching(r"API keys reloaded: 1 in force; revoked: bob")
            assert_invalid_key(await http.get("/healthz", headers=bearer(BOB)))
            assert "upstreams" in (await http.get("/healthz", headers=bearer(ALICE))).json()
    finally:
        proc.terminate()
        async with asyncio.timeout(10):
            await proc.wait()


# -- no keys: loopback only


async def test_without_keys_a_remote_client_is_refused_unless_allowed() -> None:
    async with gateway(client=("192.0.2.7", 40000)) as (http, _):
        response = await http.get("/v1/models")
        assert response.status_code == 403 and response.json()["error"]["code"] == "remote_client_not_allowed"
    async with gateway(client=("192.0.2.7", 40000), allow_unauthenticated=True) as (http, _):
        assert (await http.get("/v1/models")).status_code == 200
    async with gateway(client=("::1", 40000)) as (http, _):
        assert (await http.get("/v1/models")).status_code == 200


async def test_with_keys_a_remote_client_with_a_key_is_served(tmp_path: Path) -> None:
    async with gateway(config=keyed_config(tmp_path), environ=ENV, client=("192.0.2.7", 1)) as (http, _):
        assert (await http.get("/v1/models", headers=bearer(ALICE))).status_code == 200
        assert_invalid_key(await http.get("/v1/models"))


def test_listening_beyond_loopback_without_keys_is_a_one_line_startup_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("CODEXGATE_API_KEYS", "CODEXGATE_CONFIG", "CODEXGATE_ALLOW_UNAUTHENTICATED"):
        monkeypatch.delenv(name, raising=False)
    assert main(["serve", "--host", "0.0.0.0", "--upstream", UPSTREAM, "--no-discover"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "refusing to listen on 0.0.0.0 without API keys" in err
    assert "--allow-unauthenticated" in err
    settings = load_settings({"host": "0.0.0.0", "allow_unauthenticated": True}, environ={})
    check_exposure(settings, has_keys=False)  # explicitly allowed
    check_exposure(load_settings({"host": "0.0.0.0"}, environ={}), has_keys=True)
    check_exposure(load_settings({"host": "::1"}, environ={}), has_keys=False)


# -- Host, content type, CORS


@pytest.mark.parametrize(
    ("host", "status"),
    [
        ("evil.example", 421),
        ("evil.example:8787", 421),
        ("localhost:8787", 200),
        ("localhost:9999", 200),  # port forwarding changes the port, not the name
        ("127.0.0.1:8787", 200),
        ("[::1]:8787", 200),
        ("192.0.2.10", 200),  # an IP literal cannot be rebound
        ("gw.internal:443", 200),  # allowed_hosts
    ],
)
async def test_host_must_be_an_address_localhost_or_an_allowed_name(host: str, status: int) -> None:
    async with gateway(allowed_hosts=["gw.internal"]) as (http, _):
        response = await http.get("/v1/models", headers={"host": host})
    assert response.status_code == status
    if status == 421:
        assert response.json()["error"]["code"] == "host_not_allowed"


async def test_a_post_that_is_not_json_is_415() -> None:
    async with gateway(script=[text_reply("hi")]) as (http, _):
        response = await http.post(
            "/v1/responses", content=b'{"model":"m","input":"x"}', headers={"content-type": "text/plain"}
        )
        assert response.status_code == 415 and response.json()["error"]["code"] == "unsupported_media_type"
        response = await http.post("/v1/responses", content=b'{"model":"m","input":"x"}')
        assert response.status_code == 415
        response = await http.post(
            "/v1/responses",
            content=b'{"model":"m","input":"x"}',
            headers={"content-type": "application/json; charset=utf-8"},
        )
        assert response.status_code == 200


async def test_cors_is_off_by_default() -> None:
    preflight = {"origin": "https://app.example", "access-control-request-method": "POST"}
    async with gateway() as (http, _):
        response = await http.options("/v1/responses", headers=preflight)
        assert response.status_code == 403 and response.json()["error"]["code"] == "origin_not_allowed"
        assert not [h for h in response.headers if h.startswith("access-control-")]
        response = await http.get("/v1/models", headers={"origin": "https://app.example"})
        assert response.status_code == 403
        response = await http.get("/v1/models")
        assert response.status_code == 200
        assert not [h for h in response.headers if h.startswith("access-control-")]


async def test_configured_cors_origins_get_preflights_and_headers(tmp_path: Path) -> None:
    preflight = {
        "origin": "https://app.example",
        "access-control-request-method": "POST",
        "access-control-request-headers": "authorization, content-type",
    }
    config = keyed_config(tmp_path)
    async with gateway(config=config, environ=ENV, cors_origins=["https://app.example"]) as (http, _):
        response = await http.options("/v1/responses", headers=preflight)  # no key on preflights
        assert response.status_code == 204
        assert response.headers["access-control-allow-origin"] == "https://app.example"
        assert "POST" in response.headers["access-control-allow-methods"]
        assert response.headers["access-control-allow-headers"] == "authorization, content-type"
        response = await http.get("/v1/models", headers={"origin": "https://app.example", **bearer(ALICE)})
        assert response.status_code == 200
        assert response.headers["access-control-allow-origin"] == "https://app.example"
        response = await http.get("/v1/models", headers={"origin": "https://app.example"})
        assert_invalid_key(response)  # the browser app can read why
        assert response.headers["access-control-allow-origin"] == "https://app.example"
        response = await http.options(
            "/v1/responses", headers={**preflight, "origin": "https://other.example"}
        )
        assert response.status_code == 403 and "access-control-allow-origin" not in response.headers


# -- WebSocket upgrade


async def websocket_answer(app: GatewayApp, headers: list[tuple[bytes, bytes]]) -> tuple[int, dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    messages = iter([{"type": "websocket.connect"}])

    async def receive() -> dict[str, Any]:
        return next(messages, {"type": "websocket.disconnect", "code": 1000})

    scope = {
        "type": "websocket",
        "path": "/v1/responses",
        "headers": [(b"host", b"127.0.0.1:8787"), *headers],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8787),
        "extensions": {"websocket.http.response": {}},
    }
    await app(scope, receive, send)
    if sent[0]["type"] == "websocket.accept":
        return 101, {}
    assert sent[0]["type"] == "websocket.http.response.start"
    return sent[0]["status"], orjson.loads(sent[1]["body"])


async def test_the_websocket_upgrade_needs_a_key(tmp_path: Path) -> None:
    async with gateway(config=keyed_config(tmp_path), environ=ENV) as (_, app):
        status, body = await websocket_answer(app, [])
        assert status == 401 and body["error"]["code"] == "invalid_api_key"
        status, body = await websocket_answer(
            app, [(b"origin", b"https://evil.example"), (b"x-api-key", ALICE.encode())]
        )
        assert status == 403 and body["error"]["code"] == "origin_not_allowed"
        status, body = await websocket_answer(app, [(b"authorization", f"Bearer {ALICE}".encode())])
        assert status == 101  # authenticated: the upgrade is accepted
