"""The stateful surface over a Responses upstream: the outer gateway (kind = "responses") keeps
the chain and answers compaction itself; the upstream (a second codexgate over a scripted chat
model) only ever sees whole, stateless requests (`store: false`, no previous id, no compaction
items)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import openai

from tests.support.fake_upstream import FakeUpstream, text_reply
from tests.support.gateways import responses_chain

JSON = dict[str, Any]


def model(body: JSON) -> Any:
    said = [str(m["content"]) for m in body["messages"] if m["role"] == "user"]
    if "Write that handoff summary" in said[-1]:
        return text_reply("SUMMARY: one, then two.")
    return text_reply("heard: " + " / ".join(said))


@asynccontextmanager
async def chain(tmp_path: Path) -> AsyncIterator[tuple[openai.AsyncOpenAI, FakeUpstream]]:
    """The outer gateway keeps the chain (its own store); the inner one stores nothing."""
    fake = FakeUpstream(model)
    outer_config = f'store_path = "{tmp_path / "outer.db"}"\n'
    async with responses_chain(tmp_path, fake, outer_config=outer_config, store="none") as client:
        yield client, fake


async def test_chains_and_compaction_over_a_responses_upstream(tmp_path: Path) -> None:
    async with chain(tmp_path) as (client, fake):
        first = await client.responses.create(model="m", input="one")
        second = await client.responses.create(model="m", input="two", previous_response_id=first.id)
        compacted = await client.responses.create(
            model="m",
            input=[{"role": "user", "content": "one"}, {"type": "compaction_trigger"}],  # type: ignore[list-item]
            stream=True,
        )
        events = [event async for event in compacted]
        item = events[-1].response.output[0].model_dump()  # type: ignore[attr-defined]
        after = await client.responses.create(
            model="m",
            input=[item, {"role": "user", "content": "three"}],  # type: ignore[list-item]
        )
    assert second.output_text == "heard: one / two"
    assert item["type"] == "compaction"
    assert sum(1 for e in events if e.type == "response.output_item.done") == 1
    assert "SUMMARY: one, then two." in after.output_text
    sent = str(fake.requests[-1].body["messages"])
    assert "SUMMARY: one, then two." in sent and item["encrypted_content"] not in sent
