"""The live view of a pool (observability/live_view.py): each route's members with their health
as /healthz has them, updated live, and the member that answered each turn; the page in
headless Chromium with three keys and a pool of three upstreams, one of them a port nothing
listens on, with screenshots in the test's temporary directory."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from codexgate.app import build_app
from codexgate.config import load_settings
from codexgate.observability.live_view import LiveView
from tests.observability.test_live_view import DEADLINE, _need_chromium, settled_state, sse_events
from tests.support.fake_upstream import FakeUpstream, text_reply
from tests.support.processes import free_port
from tests.support.servers import arun_asgi_server

KEYS = {"ALICE": "alice-secret-key-1", "BOB": "bob-secret-key-22", "CAROL": "carol-secret-key-333"}
CAROL = {"authorization": f"Bearer {KEYS['CAROL']}"}  # the admin: sees every key's day


@dataclass
class Pool:
    url: str
    view: LiveView
    dead: str  # the address of the member nothing listens on


def _fake(name: str, chunks: int) -> FakeUpstream:
    # Answers of a few hundred milliseconds: the latency chart's top label reads "NNN ms".
    return FakeUpstream(
        lambda body: text_reply(f"from {name}. " * chunks, chunk_chars=8, delay_between_chunks=0.02),
        models=["m"],
    )


@asynccontextmanager
async def pool_gateway() -> AsyncIterator[Pool]:
    """Three keys, each with a budget and a rate (carol an admin), and the route `coder` of a
    pool of three: `dead` (nothing listens there), `b` and `c` (capped at 2), in turn."""
    dead = f"127.0.0.1:{free_port()}"
    async with arun_asgi_server(_fake("b", 12)) as b_url, arun_asgi_server(_fake("c", 20)) as c_url:
        limits = {"tokens_per_day": 50_000, "requests_per_minute": 600}
        flags = {
            "discover": False,
            "store": "none",
            "upstreams": [
                {"name": "dead", "base_url": f"http://{dead}/v1"},
                {"name": "b", "base_url": b_url + "/v1"},
                {"name": "c", "base_url": c_url + "/v1", "max_concurrent": 2},
            ],
            "models": [
                {
                    "name": "coder",
                    "upstreams": ["dead", "b", "c"],
                    "model": "m",
                    "sticky": False,
                    "balance": "round_robin",
                },
            ],  # fmt: skip
            "api_keys": [
                {"name": "alice", "key_env": "ALICE", **limits},
                {"name": "bob", "key_env": "BOB", **limits},
                {"name": "carol", "key_env": "CAROL", "admin": True, **limits},
            ],
        }
        app = build_app(load_settings(flags, environ=KEYS), environ=KEYS)
        view = next(o for o in app.observers.all if isinstance(o, LiveView))
        view.keys_seconds = view.pools_seconds = 0.1
        async with arun_asgi_server(app, lifespan="on") as url:
            yield Pool(url, view, dead)


async def ask(client: httpx.AsyncClient, key: str, text: str = "hi") -> httpx.Response:
    body = {"model": "coder", "input": text, "stream": True}
    response = await client.post("/v1/responses", json=body, headers={"authorization": f"Bearer {KEYS[key]}"})
    assert response.status_code == 200, response.text
    return response


async def test_state_shows_each_member_s_health_and_the_member_that_answered_each_turn() -> None:
    async with pool_gateway() as pool, httpx.AsyncClient(base_url=pool.url, timeout=DEADLINE) as client:
        answered = [
            (await ask(client, "CAROL", f"turn {n}")).headers["x-codexgate-upstream"] for n in range(4)
        ]
        state = await settled_state(client, CAROL)
        health = (await client.get("/healthz", headers=CAROL)).json()
    assert sorted(set(answered)) == ["b", "c"]  # the dead one failed over each time it was first
    assert state["pools"]["routes"] == health["routes"]
    assert state["pools"]["routes"]["coder"]["members"] == ["dead", "b", "c"]
    members = state["pools"]["members"]
    assert members["dead"]["state"] in ("cooling", "probing") and members["dead"]["usable"] is False
    assert f"nothing is listening on {pool.dead}" in members["dead"]["last_error"]
    assert (members["b"]["state"], members["c"]["state"], members["c"]["max_concurrent"]) == (
        "usable",
        "usable",
        2,
    )
    for name in ("dead", "b", "c"):  # as /healthz has them
        assert members[name]["usable"] == health["upstreams"][name]["usable"]
        assert members[name]["state"] == health["upstreams"][name]["state"]
    turns = list(reversed(state["turns"]))  # oldest first
    assert [(t["route"], t["upstream"]) for t in turns] == [("coder", name) for name in answered]
    # What the answering member counted while the turn ran (its upstream, not the route's name).
    assert all(t["repairs"] == {"think.none": 1} for t in turns), [t["repairs"] for t in turns]


async def test_the_pools_event_says_when_a_member_goes_down() -> None:
    async with pool_gateway() as pool, httpx.AsyncClient(base_url=pool.url, timeout=DEADLINE) as client:
        seen: list[tuple[str, Any]] = []
        async with asyncio.timeout(DEADLINE), client.stream("GET", "/ui/events", headers=CAROL) as events:
            buffer = ""
            asked = False
            async for chunk in events.aiter_text():
                buffer += chunk
                seen = sse_events(buffer)
                if not asked and seen:
                    asked = True
                    for n in range(3):  # one of them tries the dead member first
                        await ask(client, "ALICE", f"turn {n}")
                pools = [data["pools"] for kind, data in seen if kind == "pools"]
                if pools and pools[-1]["members"]["dead"]["state"] == "cooling":
                    break
    first = seen[0][1]["pools"]["members"]["dead"]
    # Before any request tried it, its /models said nothing answers: down, not usable.
    assert seen[0][0] == "state" and (first["state"], first["usable"]) == ("down", False)
    assert first["problem"].startswith(f"unreachable: nothing answers at http://{pool.dead}/v1")


async def test_the_page_shows_the_pool_the_member_that_answered_and_every_key(tmp_path: Path) -> None:
    _need_chromium()
    from playwright.async_api import async_playwright, expect

    problems: list[str] = []
    shots: list[Path] = []

    async def shot(page: Any, name: str) -> None:
        path = tmp_path / f"{len(shots) + 1:02d}-{name}.png"
        await page.screenshot(path=str(path))
        shots.append(path)
        print(f"screenshot: {path}")

    async with pool_gateway() as pool, httpx.AsyncClient(base_url=pool.url, timeout=DEADLINE) as client:
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path="/usr/bin/chromium", headless=True)
            try:
                page = await browser.new_page(viewport={"width": 1440, "height": 900})
                page.set_default_timeout(DEADLINE * 1000)
                page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
                page.on("pageerror", lambda e: problems.append(str(e)))
                await page.goto(pool.url + "/ui")
                await page.fill("#key", KEYS["CAROL"])
                await page.press("#key", "Enter")
                await expect(page.locator("#conn-text")).to_have_text("live")
                members = page.locator("#pools tr.member")
                await expect(members).to_have_count(3)
                await expect(page.locator('#pools tr[data-member="dead"]')).to_contain_text("down")
                await shot(page, "pool-before-any-turn")

                answered = []
                for n, key in enumerate(["ALICE", "BOB", "CAROL", "CAROL", "CAROL", "CAROL"]):
                    answered.append((await ask(client, key, f"turn {n}")).headers["x-codexgate-upstream"])
                dead = page.locator('#pools tr[data-member="dead"]')
                await expect(dead).not_to_have_class("member ms-usable")
                await expect(dead.locator("td.err")).to_contain_text(f"nothing is listening on {pool.dead}")
                for name in ("b", "c"):
                    row = page.locator(f'#pools tr[data-member="{name}"]')
                    await expect(row.locator(".pill")).to_have_text("usable")
                await expect(page.locator('#pools tr[data-member="c"]')).to_contain_text("0 / 2")

                rows = page.locator("#turns .turn")
                await expect(rows).to_have_count(4)  # carol's own turns
                await expect(page.locator("#turns .turn.st-live")).to_have_count(0)
                for row_index, member in enumerate(reversed(answered[2:])):  # newest first
                    await expect(rows.nth(row_index).locator(".up")).to_have_text("→ " + member)
                await expect(page.locator("#detail .facts")).to_contain_text("Answered by" + answered[-1])

                keys = page.locator("#keys .key")
                await expect(keys).to_have_count(3)
                for name in ("alice", "bob", "carol"):
                    await expect(page.locator("#keys")).to_contain_text(name)
                await expect(page.locator("#chart-latency rect").first).to_be_visible()
                await shot(page, "pool-with-a-dead-member")

                # Measured in one go: the panels are drawn again with every update.
                boxes = await page.evaluate(MEASURE)
                for box in boxes["keys"]:  # every key whole inside its panel, none scrolled away
                    assert _inside(box, boxes["panel"]), (box, boxes["panel"])
                assert len(boxes["keys"]) == 3 and not boxes["scrolled"]  # their bars and limits too
                top_text = boxes["top_text"]
                assert top_text.endswith(" ms"), top_text  # e.g. "488 ms", the widest kind
                assert _inside(boxes["top"], boxes["chart"]), boxes
            finally:
                await browser.close()
    assert [p for p in problems if "401" not in p] == []
    assert all(path.stat().st_size > 10_000 for path in shots)


MEASURE = """() => {
  const rect = (node) => { const r = node.getBoundingClientRect(); return { x: r.x, y: r.y, width: r.width, height: r.height }; };
  const top = document.querySelector("#chart-latency text.axis");
  return {
    panel: rect(document.getElementById("keys")),
    scrolled: document.getElementById("keys").scrollHeight > document.getElementById("keys").clientHeight,
    keys: [...document.querySelectorAll("#keys .key")].map(rect),
    chart: rect(document.getElementById("chart-latency")),
    top: rect(top),
    top_text: top.textContent,
  };
}"""


def _inside(box: Any, outer: Any) -> bool:
    return bool(
        box["x"] >= outer["x"] - 0.5
        and box["y"] >= outer["y"] - 0.5
        and box["x"] + box["width"] <= outer["x"] + outer["width"] + 0.5
        and box["y"] + box["height"] <= outer["y"] + outer["height"] + 0.5
    )
