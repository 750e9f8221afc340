"""The contract of store/base.py, held by every implementation: each test runs against SQLite,
Redis and PostgreSQL (conftest.py), each on storage of its own."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from codexgate.store.base import Retention, Store, StoredResponse, encode_body
from codexgate.store.sqlite import SqliteStore
from tests.store.conftest import Backend

REPO = Path(__file__).resolve().parents[2]


def record(
    response_id: str,
    owner: str = "alice",
    *,
    previous: str | None = None,
    created_at: float | None = None,
    text: str = "hello",
) -> StoredResponse:
    """A record shaped like the gateway's: one input and one output message, each with an id."""
    output = [
        {
            "type": "message",
            "id": f"{response_id}-out",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": f"answer to {text}", "annotations": []}],
        }
    ]
    return StoredResponse(
        id=response_id,
        owner=owner,
        created_at=time.time() if created_at is None else created_at,
        previous_response_id=previous,
        input=[
            {
                "type": "message",
                "id": f"{response_id}-in",
                "role": "user",
                "content": [{"type": "input_text", "text": text}],
            }
        ],
        output=output,
        response={
            "id": response_id,
            "object": "response",
            "status": "completed",
            "output": output,
            "usage": None,
        },
    )


def fields(rec: StoredResponse) -> dict[str, Any]:
    return {
        "id": rec.id,
        "owner": rec.owner,
        "created_at": rec.created_at,
        "previous_response_id": rec.previous_response_id,
        "input": rec.input,
        "output": rec.output,
        "response": rec.response,
    }


async def test_put_then_get_returns_every_field(store: Store) -> None:
    text = "naïve 🙂 " + "x" * 100_000  # non-ASCII and past a page or two
    rec = record("resp_1", previous="resp_0", text=text, created_at=time.time())  # sub-second too
    rec.response["metadata"] = {"nested": [1, 2.5, None, True, {"k": "v"}]}
    await store.put(rec)
    got = await store.get("resp_1", "alice")
    assert got is not None
    assert fields(got) == fields(rec)
    assert got.size == rec.size >= len(encode_body(rec)) > 100_000
    stats = await store.stats()
    assert (stats.responses, stats.bytes) == (1, rec.size)


async def test_unknown_ids_find_nothing(store: Store) -> None:
    assert await store.get("resp_nope", "alice") is None
    assert await store.chain("resp_nope", "alice") == []
    assert await store.items(["nope"], "alice") == {}
    assert await store.items([], "alice") == {}
    assert await store.delete("resp_nope", "alice") is False


async def test_another_owner_finds_nothing(store: Store) -> None:
    await store.put(record("resp_1", "alice"))
    await store.put(record("resp_2", "alice", previous="resp_1"))
    assert await store.get("resp_1", "bob") is None
    assert await store.get("resp_1", "") is None
    assert await store.chain("resp_2", "bob") == []
    assert await store.items(["resp_1-in", "resp_2-out"], "bob") == {}
    assert await store.delete("resp_1", "bob") is False
    # bob's record of the same id is his own and leaves alice's alone
    await store.put(record("resp_1", "bob", text="bob's"))
    mine, his = await store.get("resp_1", "alice"), await store.get("resp_1", "bob")
    assert mine is not None and his is not None
    assert mine.input[0]["content"][0]["text"] == "hello"
    assert his.input[0]["content"][0]["text"] == "bob's"
    assert [r.id for r in await store.chain("resp_2", "alice")] == ["resp_1", "resp_2"]
    assert await store.delete("resp_1", "bob") is True
    assert await store.get("resp_1", "alice") is not None


async def test_a_put_with_the_same_id_replaces(store: Store) -> None:
    first = record("resp_1", text="first")
    first.input.append({"type": "message", "id": "only-in-first", "role": "user", "content": []})
    await store.put(first)
    second = record("resp_1", text="second " * 50, previous="resp_0")
    second.output[0]["id"] = "only-in-second"
    await store.put(second)
    got = await store.get("resp_1", "alice")
    assert got is not None and fields(got) == fields(second)
    assert await store.items(["only-in-first", "only-in-second"], "alice") == {
        "only-in-second": second.output[0]
    }
    stats = await store.stats()
    assert (stats.responses, stats.bytes) == (1, second.size)


async def test_chain_is_oldest_first_and_stops_at_a_missing_link(store: Store) -> None:
    for i, previous in [(1, None), (2, "resp_1"), (3, "resp_2"), (5, "resp_4")]:
        await store.put(record(f"resp_{i}", previous=previous, created_at=1_800_000_000.0 + i))
    assert [r.id for r in await store.chain("resp_3", "alice")] == ["resp_1", "resp_2", "resp_3"]
    assert [r.id for r in await store.chain("resp_2", "alice")] == ["resp_1", "resp_2"]
    broken = await store.chain("resp_5", "alice")
    assert [r.id for r in broken] == ["resp_5"] and broken[0].previous_response_id == "resp_4"
    full = await store.chain("resp_3", "alice")
    assert fields(full[0]) == fields(record("resp_1", created_at=1_800_000_000.0 + 1))
    await store.delete("resp_2", "alice")
    assert [r.id for r in await store.chain("resp_3", "alice")] == ["resp_3"]


async def test_chain_stops_after_max_chain(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.modules[type(store).__module__], "MAX_CHAIN", 5)
    previous = None
    for i in range(8):
        await store.put(record(f"resp_{i}", previous=previous, created_at=1_800_000_000.0 + i))
        previous = f"resp_{i}"
    chain = await store.chain("resp_7", "alice")
    assert [r.id for r in chain] == [f"resp_{i}" for i in range(3, 8)]
    assert chain[0].previous_response_id == "resp_2"  # the caller can tell it was cut


async def test_items_finds_input_and_output_items_by_id(store: Store) -> None:
    one, two = record("resp_1", text="one"), record("resp_2", text="two")
    await store.put(one)
    await store.put(two)
    found = await store.items(["resp_1-in", "resp_2-out", "resp_1-out", "missing", "resp_1-in"], "alice")
    assert found == {"resp_1-in": one.input[0], "resp_2-out": two.output[0], "resp_1-out": one.output[0]}


async def test_delete_removes_the_record_and_its_items(store: Store) -> None:
    await store.put(record("resp_1"))
    await store.put(record("resp_2"))
    assert await store.delete("resp_1", "alice") is True
    assert await store.get("resp_1", "alice") is None
    assert await store.chain("resp_1", "alice") == []
    assert await store.items(["resp_1-in", "resp_2-in"], "alice") == {"resp_2-in": record("resp_2").input[0]}
    assert await store.delete("resp_1", "alice") is False
    assert (await store.stats()).responses == 1


async def test_expired_records_are_never_read_and_prune_removes_them(backend: Backend) -> None:
    store = await backend.open(Retention(max_age=60.0, max_bytes=None))
    old = time.time() - 3600
    for i in range(3):
        await store.put(record(f"old_{i}", created_at=old + i))
    await store.put(record("new_0"))
    await store.put(record("new_1", previous="old_2"))
    # before any prune
    assert await store.get("old_0", "alice") is None
    assert await store.chain("old_2", "alice") == []
    assert [r.id for r in await store.chain("new_1", "alice")] == ["new_1"]
    assert await store.items(["old_1-in", "new_0-in"], "alice") == {"new_0-in": record("new_0").input[0]}
    assert await store.prune() == 3
    assert await store.prune() == 0
    kept = [await store.get(i, "alice") for i in ("new_0", "new_1")]
    stats = await store.stats()
    assert stats.responses == 2
    assert stats.bytes == sum(rec.size for rec in kept if rec is not None)


async def test_past_max_bytes_prune_keeps_the_newest(backend: Backend) -> None:
    store = await backend.open(Retention(max_age=None, max_bytes=None))
    records = [record(f"resp_{i}", created_at=1_800_000_000.0 + i, text="t" * (100 + i)) for i in range(10)]
    for rec in reversed(records):  # put order must not matter, created_at does
        await store.put(rec)
    budget = sum(rec.size for rec in records[-3:])
    limited = await backend.open(Retention(max_age=None, max_bytes=budget))
    assert await limited.prune() == 7
    assert await limited.prune() == 0
    kept = [rec.id for rec in records if await store.get(rec.id, "alice") is not None]
    assert kept == ["resp_7", "resp_8", "resp_9"]
    assert (await store.stats()).bytes == budget
    assert await store.items(["resp_0-in"], "alice") == {}


async def test_the_secret_is_32_bytes_shared_and_stable(backend: Backend) -> None:
    first, second = backend.new(), backend.new()
    await asyncio.gather(first.open(), second.open())  # two processes creating the store at once
    secret = await first.secret()
    assert isinstance(secret, bytes) and len(secret) == 32
    assert await second.secret() == secret
    await first.close()
    await second.close()
    assert await (await backend.open()).secret() == secret


async def test_concurrent_puts_are_all_kept(store: Store) -> None:
    records = [record(f"resp_{i}", text=f"n{i}") for i in range(200)]
    await asyncio.gather(*(store.put(rec) for rec in records))
    assert (await store.stats()).responses == 200
    got = await asyncio.gather(*(store.get(rec.id, "alice") for rec in records))
    assert [fields(g) for g in got if g is not None] == [fields(rec) for rec in records]
    commits = getattr(store, "commits", None)
    if commits is not None:  # the stores that group-commit did
        assert commits < 50


async def test_a_new_instance_sees_everything(backend: Backend) -> None:
    store = await backend.open()
    records = [record(f"resp_{i}", previous=f"resp_{i - 1}" if i else None) for i in range(20)]
    for rec in records:
        await store.put(rec)
    await store.close()
    reopened = await backend.open()
    assert [fields(r) for r in await reopened.chain("resp_19", "alice")] == [fields(r) for r in records]


KILLED_WRITER = """
import asyncio, sys, time
from pathlib import Path
from codexgate.store.base import Retention, StoredResponse
from codexgate.store.sqlite import SqliteStore

async def main():
    store = SqliteStore(Path(sys.argv[1]), Retention())
    await store.open()
    i = 0
    while True:
        await store.put(StoredResponse(f"resp_{i}", "alice", time.time(), None, [], [], {"n": i}))
        print(f"ok {i}", flush=True)
        i += 1

asyncio.run(main())
"""


async def test_sqlite_keeps_every_acknowledged_put_through_kill_9(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    acknowledged: list[int] = []
    with subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(path)], stdout=subprocess.PIPE, text=True, cwd=REPO
    ) as writer:
        try:
            assert writer.stdout is not None
            for line in writer.stdout:
                acknowledged.append(int(line.split()[1]))
                if len(acknowledged) == 300:
                    break
        finally:
            os.kill(writer.pid, signal.SIGKILL)
    assert len(acknowledged) == 300, "the writer died before acknowledging 300 puts"
    store = SqliteStore(path, Retention())
    await store.open()
    try:
        for i in acknowledged:
            got = await store.get(f"resp_{i}", "alice")
            assert got is not None and got.response == {"n": i}
    finally:
        await store.close()
