"""Remote compaction through the gateway (codex-contract.md §6), on a chat upstream: a request
whose last item is `compaction_trigger` gets exactly one `compaction` item holding the summary
the upstream wrote; the item, sent back in later input, becomes that summary again; a forged
or another key's item is refused; `POST /v1/responses/compact` answers the same way."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.support.fake_upstream import FakeUpstream, text_reply
from tests.support.gateways import gateway_over
from tests.support.sse import sse_events

JSON = dict[str, Any]
ALICE = "alice-key-0123456789abcdef"
BOB = "bob-key-0123456789abcdefgh"
SUMMARY = "SUMMARY: the user counted to two; next, count to three."
TOOLS = [{"type": "function", "name": "shell", "parameters": {"type": "object", "properties": {}}}]


def model(body: JSON) -> Any:
    last = str(body["messages"][-1]["content"])
    if "summary" in last.lower() and "handoff" in last.lower():
        return text_reply(SUMMARY, reasoning="Condensing.")
    return text_reply("ok")


def user(text: str) -> JSON:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def assistant(text: str) -> JSON:
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


@asynccontextmanager
async def gateway(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, FakeUpstream]]:
    fake = FakeUpstream(model)
    environ = {"CODEXGATE_API_KEYS": f"alice={ALICE},bob={BOB}"}
    async with gateway_over(fake, environ, store_path=str(tmp_path / "s.db")) as url:
        headers = {"Authorization": f"Bearer {ALICE}"}
        async with httpx.AsyncClient(base_url=url + "/v1", headers=headers, timeout=10) as client:
            yield client, fake


HISTORY = [user("count to one"), assistant("one"), user("count to two"), assistant("two")]


async def test_a_compaction_trigger_gets_exactly_one_compaction_item(tmp_path: Path) -> None:
    async with gateway(tmp_path) as (client, fake):
        body = {
            "model": "m",
            "input": [*HISTORY, {"type": "compaction_trigger"}],
            "tools": TOOLS,
            "stream": True,
        }
        reply = await client.post("/responses", json=body)
        events = sse_events(reply.content)
        summarising = fake.requests[-1].body
        done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
        assert len(done) == 1 and done[0]["type"] == "compaction"
        assert events[-1]["type"] == "response.completed"
        assert events[-1]["response"]["output"] == done
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        assert "tools" not in summarising
        assert "compaction_trigger" not in str(summarising)

        # The item comes back in the next turn's input: the upstream reads the summary.
        after = {"model": "m", "input": [user("count to one"), done[0], user("go on")]}
        follow = await client.post("/responses", json=after)
        assert follow.status_code == 200, follow.text
        seen = fake.requests[-1].body["messages"]
        assert any(SUMMARY in str(m["content"]) for m in seen)
        assert done[0]["encrypted_content"] not in str(seen)

        forged = dict(done[0], encrypted_content=done[0]["encrypted_content"][:-4] + "AAAA")
        refused = await client.post("/responses", json={"model": "m", "input": [forged, user("go on")]})
        assert refused.status_code == 400
        assert refused.json()["error"]["param"] == "input[0].encrypted_content"
        theirs = await client.post("/responses", json=after, headers={"Authorization": f"Bearer {BOB}"})
        assert theirs.status_code == 400


async def test_the_compact_endpoint(tmp_path: Path) -> None:
    async with gateway(tmp_path) as (client, _):
        reply = await client.post("/responses/compact", json={"model": "m", "input": HISTORY})
        missing = await client.post("/responses/compact", json={"input": HISTORY})
        compacted = reply.json()
        follow = await client.post(
            "/responses", json={"model": "m", "input": [*compacted["output"], user("continue")]}
        )
    assert reply.status_code == 200, reply.text
    assert compacted["object"] == "response.compaction"
    assert set(compacted) >= {"id", "created_at", "output", "usage"}
    kinds = [item["type"] for item in compacted["output"]]
    assert kinds == ["message", "message", "compaction"]  # the user's messages, then the summary
    assert all(isinstance(item.get("id"), str) for item in compacted["output"])
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "model"
    assert follow.status_code == 200, follow.text
