"""Building the gateway from settings: what it says about its upstreams when it starts."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from codexgate.app import build_app
from codexgate.config import load_settings
from tests.support.asgi_upstream import ASGIUpstreamTransport
from tests.support.fake_upstream import FakeUpstream
from tests.support.processes import until


class Lifespan:
    """Drives an ASGI app's lifespan by hand: startup, then shutdown."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None

    async def startup(self) -> dict[str, Any]:
        self.task = asyncio.create_task(self.app({"type": "lifespan"}, self.inbox.get, self.outbox.put))
        await self.inbox.put({"type": "lifespan.startup"})
        return await asyncio.wait_for(self.outbox.get(), 5)

    async def shutdown(self) -> None:
        await self.inbox.put({"type": "lifespan.shutdown"})
        assert (await asyncio.wait_for(self.outbox.get(), 5))["type"] == "lifespan.shutdown.complete"
        assert self.task is not None
        await self.task


def by_host(apps: dict[str, Any]) -> Any:
    """One ASGI app per upstream host, behind the one test transport."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await apps[scope["server"][0]](scope, receive, send)

    return app


async def never_answers(scope: Any, receive: Any, send: Any) -> None:
    while (await receive())["type"] != "http.disconnect":  # never sends headers
        pass


def config(tmp_path: Path, *upstreams: str) -> Path:
    path = tmp_path / "gw.toml"
    path.write_text("".join(f"[[upstreams]]\n{u}\n" for u in upstreams))
    return path


async def test_at_start_each_upstream_gets_one_line_saying_whether_it_answers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    file = config(
        tmp_path,
        'name = "good"\nbase_url = "http://good.test/v1"',
        'name = "moved"\nbase_url = "http://moved.test/v1"',
        'name = "agent"\nkind = "codex"\ncodex_bin = "/nonexistent/codex"',
    )
    good = FakeUpstream([], models=["qwen3-coder", "llama3"])

    async def not_found(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    transport = ASGIUpstreamTransport(by_host({"good.test": good, "moved.test": not_found}))
    app = build_app(load_settings({"discover": False}, file, environ={}), transport=transport, environ={})
    lifespan = Lifespan(app)
    with caplog.at_level(logging.INFO, logger="codexgate"):
        assert (await lifespan.startup())["type"] == "lifespan.startup.complete"
        await until(lambda: sum("upstream '" in r.getMessage() for r in caplog.records) >= 3, 5)
        await lifespan.shutdown()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("upstream '")]
    assert "upstream 'good' (http://good.test/v1): reachable, 2 models: qwen3-coder, llama3" in lines
    assert any(
        line.startswith("upstream 'moved': wrong path: a server answers at http://moved.test/v1")
        for line in lines
    )
    assert (
        "upstream 'agent' (codex): not asked at start; codex app-server starts on the first request" in lines
    )


async def test_the_start_does_not_wait_for_an_upstream_that_never_answers(tmp_path: Path) -> None:
    file = config(tmp_path, 'name = "slow"\nbase_url = "http://slow.test/v1"')
    transport = ASGIUpstreamTransport(never_answers)
    app = build_app(load_settings({"discover": False}, file, environ={}), transport=transport, environ={})
    lifespan = Lifespan(app)
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert (await lifespan.startup())["type"] == "lifespan.startup.complete"
    assert loop.time() - started < 0.5  # the probe waits up to 2 s, in the background
    await lifespan.shutdown()  # and is cancelled with the rest


def test_every_kind_of_upstream_has_its_backend_and_each_route_gets_its_kind_s_view(tmp_path: Path) -> None:
    """BACKEND_KINDS is the one table from a kind to its backend: a kind the settings take
    without a line there would fail at start."""
    from codexgate.app import BACKEND_KINDS
    from codexgate.backends.chat.backend import ChatBackend
    from codexgate.backends.codex.backend import CodexBackend
    from codexgate.backends.embedded.backend import EmbeddedBackend
    from codexgate.backends.responses.backend import ResponsesBackend
    from codexgate.config import UPSTREAM_KINDS

    assert tuple(BACKEND_KINDS) == UPSTREAM_KINDS
    path = config(
        tmp_path,
        'name = "c"\nbase_url = "http://c.test/v1"\ndeveloper_role = "system"',
        'name = "r"\nkind = "responses"\nbase_url = "http://r.test/v1"',
        'name = "x"\nkind = "codex"',
        'name = "e"\nkind = "embedded"',
    )
    path.write_text(
        path.read_text()
        + "".join(f'[[models]]\nname = "m{u}"\nupstream = "{u}"\nthink_tags = "off"\n' for u in "crxe")
    )
    app = build_app(
        load_settings({}, path, environ={}), transport=ASGIUpstreamTransport(never_answers), environ={}
    )
    backends = app.router.backends
    kinds = {name: type(backend) for name, backend in backends.items()}
    assert kinds == {"c": ChatBackend, "r": ResponsesBackend, "x": CodexBackend, "e": EmbeddedBackend}
    routes = {name: app.router.resolve(f"m{name}").backend for name in "crxe"}
    assert routes["x"] is backends["x"]  # the agent takes the model per request
    for name in "cre":
        route = routes[name]
        assert type(route) is kinds[name] and route is not backends[name]
        assert route.target.dialect.think_tags == "off"  # type: ignore[attr-defined]
    assert routes["c"].target.dialect.developer_role == "system"  # type: ignore[attr-defined]
