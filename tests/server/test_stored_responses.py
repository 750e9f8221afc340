"""Stored responses over HTTP, with the official `openai` SDK as the client and the default
SQLite store: `previous_response_id` chains, `item_reference`, `GET`/`DELETE` of a response,
its input items page by page, `store:false`, ownership by inbound key, and a store that
outlives the gateway (a restart, and `kill -9` of a real `codexgate serve`)."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from contextlib import AbstractContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.support.fake_upstream import FakeUpstream, text_reply
from tests.support.gateways import gateway_over
from tests.support.processes import ServedGateway, serve_process
from tests.support.servers import run_asgi_server

JSON = dict[str, Any]
ALICE = "alice-key-0123456789abcdef"
BOB = "bob-key-0123456789abcdefgh"


def echo(body: JSON) -> Any:
    """The scripted model: says what the user said so far, so each answer shows the history."""
    said = [str(m["content"]) for m in body["messages"] if m["role"] == "user"]
    return text_reply("heard: " + " / ".join(said))


def upstream_roles(fake: FakeUpstream) -> list[tuple[str, str]]:
    return [(m["role"], str(m["content"])) for m in fake.requests[-1].body["messages"]]


@asynccontextmanager
async def gateway(
    store_path: Path, keys: dict[str, str] | None = None, fake: FakeUpstream | None = None
) -> AsyncIterator[tuple[str, FakeUpstream]]:
    fake = fake or FakeUpstream(echo)
    environ = {"CODEXGATE_API_KEYS": ",".join(f"{n}={k}" for n, k in keys.items())} if keys else {}
    async with gateway_over(fake, environ, store_path=str(store_path)) as url:
        yield url, fake


def sdk(url: str, key: str = "unused") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key=key, base_url=url + "/v1", max_retries=0)


async def test_previous_response_id_carries_the_whole_chain(tmp_path: Path) -> None:
    async with gateway(tmp_path / "s.db") as (url, fake), sdk(url) as client:
        first = await client.responses.create(model="m", input="one", instructions="Be brief.")
        second = await client.responses.create(model="m", input="two", previous_response_id=first.id)
        stream = await client.responses.create(
            model="m", input="three", previous_response_id=second.id, stream=True
        )
        events = [event async for event in stream]
    assert first.output_text == "heard: one"
    assert second.output_text == "heard: one / two"
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == "heard: one / two / three"
    assert events[-1].response.previous_response_id == second.id
    # The chain's input and output reach the upstream; instructions only from this request.
    assert upstream_roles(fake) == [
        ("user", "one"),
        ("assistant", "heard: one"),
        ("user", "two"),
        ("assistant", "heard: one / two"),
        ("user", "three"),
    ]


async def test_store_false_keeps_nothing_and_unknown_ids_are_named(tmp_path: Path) -> None:
    async with gateway(tmp_path / "s.db") as (url, _), sdk(url) as client:
        kept_out = await client.responses.create(model="m", input="one", store=False)
        for missing in (kept_out.id, "resp_nothing"):
            with pytest.raises(openai.BadRequestError) as caught:
                await client.responses.create(model="m", input="two", previous_response_id=missing)
            error = caught.value.body
            assert isinstance(error, dict)
            assert error["code"] == "previous_response_not_found"
            assert error["param"] == "previous_response_id"
            assert missing in error["message"]
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve(kept_out.id)


async def test_item_references_resolve_to_stored_items(tmp_path: Path) -> None:
    async with gateway(tmp_path / "s.db") as (url, fake), sdk(url) as client:
        first = await client.responses.create(model="m", input="one")
        answer_id = first.output[0].id
        items = await client.responses.input_items.list(first.id)
        question_id = items.data[0].id
        second = await client.responses.create(
            model="m",
            input=[
                {"type": "item_reference", "id": question_id},
                {"type": "item_reference", "id": answer_id},
                {"role": "user", "content": "two"},
            ],
        )
        assert second.output_text == "heard: one / two"
        assert upstream_roles(fake) == [("user", "one"), ("assistant", "heard: one"), ("user", "two")]
        with pytest.raises(openai.BadRequestError) as caught:
            await client.responses.create(
                model="m",
                input=[{"role": "user", "content": "x"}, {"type": "item_reference", "id": "msg_unknown"}],
            )
    error = caught.value.body
    assert isinstance(error, dict)
    assert error["code"] == "item_not_found"
    assert error["param"] == "input[1]"
    assert "msg_unknown" in error["message"]


async def test_get_list_and_delete_a_stored_response(tmp_path: Path) -> None:
    turn = [{"role": "user", "content": f"part {n}"} for n in range(5)]
    async with gateway(tmp_path / "s.db") as (url, _), sdk(url) as client:
        created = await client.responses.create(model="m", input=turn)  # type: ignore[arg-type]
        fetched = await client.responses.retrieve(created.id)
        assert fetched.model_dump() == created.model_dump()
        newest = await client.responses.input_items.list(created.id, limit=2)
        assert [i.content[0].text for i in newest.data] == ["part 4", "part 3"]  # type: ignore[union-attr]
        assert (
            newest.has_more and newest.first_id == newest.data[0].id and newest.last_id == newest.data[1].id
        )
        rest = await client.responses.input_items.list(created.id, limit=5, after=newest.last_id)
        assert [i.content[0].text for i in rest.data] == ["part 2", "part 1", "part 0"]  # type: ignore[union-attr]
        assert not rest.has_more
        oldest = await client.responses.input_items.list(created.id, order="asc", limit=1)
        assert oldest.data[0].content[0].text == "part 0"  # type: ignore[union-attr]
        async with httpx.AsyncClient(base_url=url) as http:
            bad = await http.get(f"/v1/responses/{created.id}/input_items", params={"limit": 0})
            assert bad.status_code == 400 and bad.json()["error"]["param"] == "limit"
            deleted = await http.delete(f"/v1/responses/{created.id}")
            assert deleted.json() == {"id": created.id, "object": "response", "deleted": True}
            assert (await http.get(f"/v1/responses/{created.id}")).status_code == 404
            assert (await http.delete(f"/v1/responses/{created.id}")).status_code == 404
            assert (await http.put(f"/v1/responses/{created.id}")).status_code == 405


async def test_a_response_belongs_to_the_key_that_made_it(tmp_path: Path) -> None:
    async with gateway(tmp_path / "s.db", keys={"alice": ALICE, "bob": BOB}) as (url, _):
        async with sdk(url, ALICE) as alice, sdk(url, BOB) as bob:
            mine = await alice.responses.create(model="m", input="secret plan")
            with pytest.raises(openai.NotFoundError):
                await bob.responses.retrieve(mine.id)
            with pytest.raises(openai.NotFoundError):
                await bob.responses.input_items.list(mine.id)
            with pytest.raises(openai.BadRequestError):
                await bob.responses.create(model="m", input="more", previous_response_id=mine.id)
            with pytest.raises(openai.BadRequestError):
                await bob.responses.create(
                    model="m", input=[{"type": "item_reference", "id": mine.output[0].id}]
                )
            with pytest.raises(openai.NotFoundError):
                await bob.responses.delete(mine.id)
            assert (await alice.responses.retrieve(mine.id)).id == mine.id
            follow = await alice.responses.create(model="m", input="go", previous_response_id=mine.id)
            assert follow.output_text == "heard: secret plan / go"


async def test_a_chain_continues_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with gateway(path) as (url, _), sdk(url) as client:
        first = await client.responses.create(model="m", input="before")
    async with gateway(path) as (url, _), sdk(url) as client:
        after = await client.responses.create(model="m", input="after", previous_response_id=first.id)
    assert after.output_text == "heard: before / after"


def serving_from(upstream: str, store_path: Path) -> AbstractContextManager[ServedGateway]:
    """`codexgate serve` with its store at `store_path`."""
    return serve_process(
        "--no-discover", "--upstream", upstream, env={"CODEXGATE_STORE_PATH": str(store_path)}
    )


def test_what_was_acknowledged_survives_kill_9(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    acknowledged: list[str] = []
    with run_asgi_server(FakeUpstream(echo)) as upstream:
        with serving_from(upstream + "/v1", path) as gw:
            for n in range(20):
                body = {"model": "m", "input": f"turn {n}", "stream": n % 2 == 0}
                reply = httpx.post(gw.base + "/v1/responses", json=body, timeout=10)
                assert reply.status_code == 200
                if body["stream"]:
                    acknowledged.append(reply.text.split('"id":"', 1)[1].split('"', 1)[0])
                else:
                    acknowledged.append(reply.json()["id"])
            gw.process.send_signal(signal.SIGKILL)
            gw.process.wait(timeout=10)
        with serving_from(upstream + "/v1", path) as gw:
            for response_id in acknowledged:
                assert httpx.get(f"{gw.base}/v1/responses/{response_id}", timeout=10).status_code == 200
            reply = httpx.post(
                gw.base + "/v1/responses",
                json={"model": "m", "input": "next", "previous_response_id": acknowledged[-1]},
                timeout=10,
            )
    assert reply.json()["output"][0]["content"][0]["text"] == "heard: turn 19 / next"
