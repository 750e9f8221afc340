"""Observers (server/observe.py) see every exchange start, its batches when they ask, and its
end, on every face and transport; a failing observer never breaks a request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from codexgate.app import build_app
from codexgate.config import load_settings
from codexgate.server.exchange import Exchange
from codexgate.server.observe import Observer
from codexgate.wire.responses_events import Event
from tests.support.fake_upstream import FakeUpstream, text_reply
from tests.support.servers import arun_asgi_server


class Recording(Observer):
    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []

    def started(self, exchange: Exchange) -> None:
        self.seen.append(("started", exchange.req.model))

    def wants_batches(self, exchange: Exchange) -> bool:
        return True

    def batch(self, exchange: Exchange, events: list[Event]) -> None:
        self.seen.append(("batch", [e["type"] for e in events]))

    def finished(self, exchange: Exchange) -> None:
        terminal = exchange.terminal["type"] if exchange.terminal else None
        self.seen.append(("finished", (exchange.face, exchange.outcome, terminal)))


class Broken(Observer):
    def started(self, exchange: Exchange) -> None:
        raise RuntimeError("observer bug")

    def finished(self, exchange: Exchange) -> None:
        raise RuntimeError("observer bug")


async def test_observers_see_each_exchange(tmp_path: Path) -> None:
    recording = Recording()
    async with arun_asgi_server(FakeUpstream(lambda body: text_reply("hi"))) as fake_url:
        settings = load_settings(
            {"upstream": fake_url + "/v1", "discover": False, "store": "none"}, environ={}
        )
        app = build_app(settings, environ={})
        app.observers.add(Broken())
        app.observers.add(recording)
        async with arun_asgi_server(app, lifespan="on") as url, httpx.AsyncClient(base_url=url) as client:
            streamed = await client.post("/v1/responses", json={"model": "m", "input": "x", "stream": True})
            whole = await client.post(
                "/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "x"}]}
            )
            refused = await client.post("/v1/responses", json={"input": "x"})
    assert streamed.status_code == whole.status_code == 200 and refused.status_code == 400
    kinds = [kind for kind, _ in recording.seen]
    assert kinds.count("started") == 2 and kinds.count("finished") == 3
    # An exchange ends (its usage settled, its observers told) after its client has the whole
    # answer, so the next request's end may be seen first: the ends in any order.
    finished = [what for kind, what in recording.seen if kind == "finished"]
    assert sorted(finished, key=repr) == sorted(
        [
            ("responses", "completed", "response.completed"),
            ("chat", "completed", "response.completed"),
            ("responses", "invalid_request_error", None),
        ],
        key=repr,
    )
    batches = [what for kind, what in recording.seen if kind == "batch"]
    assert batches[0][0] == "response.created" and batches[-1][-1] == "response.completed"
