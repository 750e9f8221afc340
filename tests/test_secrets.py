"""Secrets never leave: a run of requests, failing ones included, against a real upstream on
loopback that echoes every request header (and its URL) in its error bodies, with inbound keys,
upstream keys and URL credentials configured. Everything the run wrote (log records at DEBUG,
response bodies and headers) must hold none of the secrets."""

from __future__ import annotations

import logging
import random
from collections import deque
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import orjson
import pytest

from codexgate.app import build_app
from codexgate.config import load_settings
from codexgate.redact import MASK, Redactor, _masked, basic_credentials, redact_patterns, redact_url
from codexgate.server.serve import log_startup
from codexgate.translate.upstream_errors import classify
from tests.support.asgi_client import StreamingASGITransport, asgi_lifespan
from tests.support.servers import arun_asgi_server

INBOUND = "inbound-alice-key-7f3e9a"
UPSTREAM_KEY = "upstream-key-0123456789abcdef"  # no sk- shape: only the exact match masks it
PASSWORD_B = "p@ss-w0rd-b/9"  # needs percent-encoding in a URL
PASSWORD_A = "pass-a-4d2c8e"  # next to an API key: not sent, never shown
PASSWORD_C = "pass-c-unreachable-77"
SECRETS = [
    INBOUND,
    UPSTREAM_KEY,
    PASSWORD_A,
    PASSWORD_B,
    quote(PASSWORD_B, safe=""),
    PASSWORD_C,
    basic_credentials("bob", PASSWORD_B),
]


class EchoUpstream:
    """A Chat Completions upstream that answers each request with the next reply of `script`
    and puts every header it received, and its URL, in the error it sends."""

    def __init__(self) -> None:
        self.script: deque[str] = deque()
        self.seen_headers: list[dict[str, str]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        self.seen_headers.append(headers)
        # The bare token too, in a shape no credential pattern recognises.
        tokens = [v.split()[-1] for k, v in headers.items() if k == "authorization"]
        echo = f"you sent {orjson.dumps(headers).decode()} to {scope['path']}; tokens {tokens}"
        # The script is for chat requests: a GET (the gateway's start-up probe) echoes a 400.
        kind = self.script.popleft() if self.script and scope["method"] == "POST" else "400"
        if kind == "stream_error":
            chunk = {"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}]}
            body = b"data: " + orjson.dumps(chunk) + b"\n\n"
            body += b"data: " + orjson.dumps({"error": {"message": echo, "code": 500}}) + b"\n\n"
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        body = orjson.dumps({"error": {"message": echo, "type": "error", "headers": headers}})
        await send(
            {
                "type": "http.response.start",
                "status": int(kind),
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})


def config_text(port: int) -> str:
    return f"""
max_retries = 1
retry_backoff = 0.01

[[api_keys]]
name = "alice"
key_env = "ALICE_KEY"

[[upstreams]]
name = "a"
base_url = "http://alice:{PASSWORD_A}@127.0.0.1:{port}/v1"
api_key_env = "UP_KEY"
learn_context_window = false

[[upstreams]]
name = "b"
base_url = "http://bob:{quote(PASSWORD_B, safe="")}@127.0.0.1:{port}/v1"
learn_context_window = false

[[upstreams]]
name = "c"
base_url = "http://carol:{PASSWORD_C}@127.0.0.1:9/v1"
connect_timeout = 2
learn_context_window = false

[[models]]
name = "ma"
upstream = "a"

[[models]]
name = "mb"
upstream = "b"

[[models]]
name = "mc"
upstream = "c"
"""


async def test_no_secret_appears_in_anything_the_gateway_writes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    upstream = EchoUpstream()
    written: list[str] = []
    async with arun_asgi_server(upstream) as upstream_url:
        port = int(upstream_url.rsplit(":", 1)[1])
        config = tmp_path / "gw.toml"
        config.write_text(config_text(port))
        environ = {"ALICE_KEY": INBOUND, "UP_KEY": UPSTREAM_KEY}
        settings = load_settings({"discover": False, "log_level": "debug"}, config, environ=environ)
        app = build_app(settings, environ=environ, config_file=config)  # the real aiohttp transport
        log_startup(settings, app)
        async with asgi_lifespan(app) as state:
            transport = StreamingASGITransport(app, state=state)
            async with httpx.AsyncClient(transport=transport, base_url="http://gw", timeout=30) as http:
                key = {"authorization": f"Bearer {INBOUND}"}
                runs: list[tuple[str, dict[str, Any], dict[str, str]]] = [
                    ("401", {"model": "ma", "input": "x", "stream": True}, key),
                    ("400", {"model": "mb", "input": "x"}, {"x-api-key": INBOUND}),
                    ("stream_error", {"model": "ma", "input": "x", "stream": True}, key),
                    ("stream_error", {"model": "mb", "input": "x"}, key),
                    ("500", {"model": "mb", "input": "x"}, key),  # retried once, logged, then 502
                    ("403", {"model": "mb", "input": "x", "stream": True}, key),
                    ("", {"model": "mc", "input": "x"}, key),  # unreachable
                    ("", {"model": "ma", "input": "x"}, {"authorization": f"Bearer {INBOUND}x"}),
                ]
                statuses = []
                for kind, body, headers in runs:
                    if kind:
                        upstream.script.extend([kind, kind] if kind == "500" else [kind])
                    response = await http.post("/v1/responses", json=body, headers=headers)
                    statuses.append(response.status_code)
                    written += [response.text, str(response.headers)]
                for path in ("/v1/models", "/healthz"):
                    response = await http.get(path, headers=key)
                    written += [response.text, str(response.headers)]
    written += [caplog.text, *(record.getMessage() for record in caplog.records)]

    # The run did what it should: each failure reached the client, the upstream saw the secrets.
    assert statuses == [502, 400, 200, 502, 502, 502, 502, 401]
    assert any(h.get("authorization") == f"Bearer {UPSTREAM_KEY}" for h in upstream.seen_headers)
    basic_b = f"Basic {basic_credentials('bob', PASSWORD_B)}"
    assert any(h.get("authorization") == basic_b for h in upstream.seen_headers)
    assert "upstream_authentication_failed" in written[0] and "'a'" in written[0]
    assert "you sent" in written[2] and "response.failed" in written[4]  # echoes were relayed
    assert "retry 1" in caplog.text  # the 500 was logged with its (echoing) message
    everything = "\n".join(written)
    for secret in SECRETS:
        assert secret not in everything, f"a secret leaked: {secret[:4]}..."
    assert MASK in everything


def test_an_upstream_url_with_credentials_is_masked_in_startup_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    url = f"http://bob:{quote(PASSWORD_B, safe='')}@127.0.0.1:1/v1"
    settings = load_settings({"upstream": url, "discover": False}, environ={})
    log_startup(settings, build_app(settings, environ={}))
    assert "upstream default (chat): http://[redacted]@127.0.0.1:1/v1" in caplog.text
    assert quote(PASSWORD_B, safe="") not in caplog.text and PASSWORD_B not in caplog.text


def test_credential_shapes_are_masked_without_knowing_the_values() -> None:
    assert redact_patterns("GET http://u:pw@host/v1 failed") == f"GET http://{MASK}@host/v1 failed"
    assert (
        redact_patterns('{"Authorization": "Bearer abc123def456"}') == f'{{"Authorization": "Bearer {MASK}"}}'
    )
    assert redact_patterns("x-api-key: zzzz9999") == f"x-api-key: {MASK}"
    assert redact_patterns("key sk-proj-0123456789abcdefXYZ") == f"key {MASK}"
    assert redact_patterns("basic functionality is missing") == "basic functionality is missing"
    assert redact_url("http://h:1/v1") == "http://h:1/v1"


def test_skipping_texts_without_a_cue_masks_the_same_as_running_every_pattern() -> None:
    """redact_patterns leaves an ASCII text with none of the patterns' cues as it is, without
    running them: over texts made of credential-shaped pieces in every case, and of near
    misses, it must give what the patterns give."""
    pieces = [
        "GET", "https://u:pw@host/v1", "user@example.com", "Authorization:", "BEARER", "Bearer",
        "bAsIc", "abc123def456", "X-API-KEY=", "Api_Key:", "apikey", "zzzz9999", "sk-0123456789abcdefXYZ",
        "SK-0123456789abcdefXYZ", "model=qwen3-coder", "status=200", '"', "'", "=", ":", "\n", "é", "K",
        "ſ", "\u212a",
    ]  # fmt: skip
    rng = random.Random(26)
    for _ in range(3000):
        text = rng.choice(["", " "]).join(rng.choice(pieces) for _ in range(rng.randint(1, 8)))
        assert redact_patterns(text) == _masked(text), text


def test_classify_masks_echoed_credentials_and_names_the_upstream_on_401() -> None:
    body = orjson.dumps({"error": {"message": "bad key Bearer sk-live-0123456789abcdefgh"}})
    error = classify(401, body, {}, upstream="vllm")
    assert error.status == 502 and error.code == "upstream_authentication_failed"
    assert "'vllm'" in error.message and "sk-live" not in error.message


def test_the_redactor_masks_known_values_longest_first() -> None:
    redactor = Redactor(["abcd1234", "abcd1234-longer"])
    assert redactor.redact("k=abcd1234-longer and abcd1234") == f"k={MASK} and {MASK}"
    assert redactor.redact("ab") == "ab"
