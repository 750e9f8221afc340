"""The real Codex CLI through codexgate served as `codexgate serve` serves it: API keys and the
connection limits (head timeout, idle cap) in front of a multi-turn session with a tool call."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from codexgate.app import build_app
from codexgate.config import Settings, load_settings
from codexgate.server.serve import connection_limits, uvicorn_config
from tests.e2e.codex_cli import CodexRun, run_codex_in
from tests.support.fake_upstream import FakeUpstream, Reply, text_reply, tool_calls_reply
from tests.support.processes import wait_until
from tests.support.servers import run_asgi_server

pytestmark = pytest.mark.e2e

MODEL = "local-coder"
KEY = "codex-e2e-key-5d1f0c"


@contextmanager
def secure_gateway(upstream: str, **limits: Any) -> Iterator[str]:
    environ = {"CODEXGATE_API_KEYS": f"codex={KEY}"}
    settings = load_settings({"upstream": upstream, "discover": False, **limits}, environ=environ)
    app = build_app(settings, environ=environ)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    wired = Settings(port=port, **limits)
    config = uvicorn_config(app, wired, connection_limits(wired), log_config=None)
    config.ws = "none"
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started or not thread.is_alive(), 10, "the gateway did not start")
        assert thread.is_alive(), "the gateway did not start"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def codex_with_key(tmp_path: Path, gateway: str, prompt: str, key: str, **options: Any) -> CodexRun:
    """Codex sending `key` as its bearer token."""
    env = {"CODEXGATE_TEST_KEY": key}
    return run_codex_in(
        tmp_path, prompt, base_url=gateway, model=MODEL, env_key="CODEXGATE_TEST_KEY", env=env, **options
    )


def two_turns(body: dict[str, Any]) -> Reply:
    if any(m["role"] == "tool" for m in body["messages"]):
        return text_reply("The file says hello.")
    return tool_calls_reply([("exec_command", json.dumps({"cmd": "cat note.txt"}))])


def test_codex_runs_a_tool_turn_with_a_key_through_the_limited_server(tmp_path: Path) -> None:
    fake = FakeUpstream(two_turns)
    with run_asgi_server(fake) as upstream:
        limits = {"header_timeout": 1.0, "max_idle_connections": 2, "keep_alive_timeout": 5}
        with secure_gateway(upstream + "/v1", **limits) as gateway:
            (tmp_path / "work").mkdir()
            (tmp_path / "work" / "note.txt").write_text("hello\n")
            run = codex_with_key(tmp_path, gateway, "What does note.txt say?", KEY)
            assert run.ok, run.describe()
            assert run.final_message == "The file says hello."
            assert len(fake.requests) == 2
            # Codex retries a 401 like a cut stream (five times, 6 s of backoff): once is enough here.
            retry_once = ("-c", "model_providers.codexgate.stream_max_retries=1")
            refused = codex_with_key(
                tmp_path, gateway, "hi", "not-the-key-000", home="home2", timeout=60, extra_args=retry_once
            )
            assert not refused.ok
            # Codex shows why: "unexpected status 401 Unauthorized: Incorrect API key provided."
            assert any("401" in e and "Incorrect API key" in e for e in refused.errors), refused.describe()
            assert len(fake.requests) == 2  # the refused run never reached the upstream
