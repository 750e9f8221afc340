"""Pools with real processes: model servers (tests/support/model_server.py) one of which is
killed mid-run, a context too long for one route answered by its fallback, and two gateway
workers sending one conversation to the same model server."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx

from tests.support.model_server import model_server
from tests.support.processes import serve_process


def write_config(path: Path, upstreams: dict[str, str], models: str) -> Path:
    tables = "".join(f'[[upstreams]]\nname = "{n}"\nbase_url = "{url}"\n\n' for n, url in upstreams.items())
    path.write_text('discover = false\nstore = "none"\n\n' + tables + models)
    return path


def turn(client: httpx.Client, conversation: str, text: str, model: str = "coder") -> httpx.Response:
    body = {"model": model, "input": text, "prompt_cache_key": conversation}
    return client.post("/v1/responses", json=body, timeout=30)


def answer(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    text: str = response.json()["output"][0]["content"][0]["text"]
    return text


def test_a_killed_member_loses_no_conversation_and_health_says_so(tmp_path: Path) -> None:
    with model_server("a") as a, model_server("b") as b:
        config = write_config(
            tmp_path / "c.toml", {"a": a.url, "b": b.url},
            '[[models]]\nname = "coder"\nupstreams = ["a", "b"]\nmodel = "m"\n',
        )  # fmt: skip
        with serve_process("--config", str(config)) as gateway, httpx.Client(base_url=gateway.base) as client:
            homes = {f"c{i}": answer(turn(client, f"c{i}", f"c{i} turn 1")) for i in range(10)}
            assert set(homes.values()) == {"from a", "from b"}  # both members serve conversations
            a.kill()
            second = {c: answer(turn(client, c, f"{c} turn 2")) for c in homes}
            fresh = [answer(turn(client, f"new{i}", "hello")) for i in range(5)]
            health: dict[str, Any] = client.get("/healthz").json()
    assert all(second[c] == "from b" for c in homes)  # those on a continue on b
    assert all(second[c] == homes[c] for c in homes if homes[c] == "from b")  # the others stay
    assert fresh == ["from b"] * 5
    assert health["status"] == "ok" and health["upstreams"]["a"]["usable"] is False
    assert health["upstreams"]["a"]["state"] in ("cooling", "probing") and health["upstreams"]["b"]["usable"]
    assert health["routes"]["coder"]["members"] == ["a", "b"]


def test_a_context_too_long_for_the_route_is_answered_by_its_fallback(tmp_path: Path) -> None:
    with model_server("small", "--context-chars", "200") as small, model_server("big") as big:
        config = write_config(
            tmp_path / "c.toml", {"small": small.url, "big": big.url},
            '[[models]]\nname = "coder"\nupstream = "small"\nmodel = "m"\nfallbacks = ["coder-big"]\n\n'
            '[[models]]\nname = "coder-big"\nupstream = "big"\nmodel = "m"\n',
        )  # fmt: skip
        with serve_process("--config", str(config)) as gateway, httpx.Client(base_url=gateway.base) as client:
            short = turn(client, "c", "a short question")
            long = turn(client, "c", "a long question " + "word " * 100)
        access = [line for line in gateway.output if "face=responses" in line]
    assert answer(short) == "from small" and answer(long) == "from big"
    assert long.json()["model"] == "coder"  # the model the client asked for
    assert long.headers["x-codexgate-route"] == "coder-big" and short.headers["x-codexgate-route"] == "coder"
    assert "route=coder-big" in access[-1] and "upstream=big" in access[-1]


def test_two_workers_send_one_conversation_to_the_same_member(tmp_path: Path) -> None:
    with model_server("a") as a, model_server("b") as b:
        config = write_config(
            tmp_path / "c.toml", {"a": a.url, "b": b.url},
            '[[models]]\nname = "coder"\nupstreams = ["a", "b"]\nmodel = "m"\n',
        )  # fmt: skip
        with serve_process("--config", str(config), "--workers", "2") as gateway:
            answers = []
            for attempt in range(60):  # a new connection each: the kernel spreads them over workers
                with httpx.Client(base_url=gateway.base, headers={"connection": "close"}) as client:
                    answers.append(answer(turn(client, "one-conversation", f"turn {attempt}")))
                workers = set(re.findall(r"face=responses .*worker=(\d)", "\n".join(gateway.output)))
                if len(workers) == 2 and attempt >= 9:
                    break
        counts = a.stats()["chat"], b.stats()["chat"]
    assert workers == {"1", "2"}, "both workers answered"
    assert len(set(answers)) == 1 and sorted(counts)[0] == 0  # one model server had them all
