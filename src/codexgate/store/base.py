"""The store: responses kept for `previous_response_id`, `item_reference`, `GET` and `DELETE`
of `/v1/responses/{id}`, and the secret that seals compaction handles.

A small async protocol with one contract test suite (tests/store/) run against every
implementation: SQLite (store/sqlite.py, the embedded default), Redis (store/redis.py) and
PostgreSQL (store/postgres.py) for several gateway processes or hosts.

Ownership is part of every key: a response belongs to the inbound key that made it (`owner`,
the key's name; "" when the gateway has no keys), and a lookup under another owner finds
nothing, exactly as an unknown id does, so one caller cannot even learn that another's id
exists.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import orjson

from codexgate.redact import Redactor, redact_url, url_secrets

Item = dict[str, Any]

# How far `chain` walks back at most: a longer chain is refused rather than rebuilt slowly.
MAX_CHAIN = 10_000


@dataclass(slots=True)
class StoredResponse:
    id: str
    owner: str
    created_at: float  # unix seconds
    previous_response_id: str | None
    input: list[Item]  # this request's own input items (references resolved), each with an `id`
    output: list[Item]  # the response's output items, each with an `id`
    response: dict[str, Any]  # the response object of the terminal event, as `GET` returns it
    size: int = 0  # bytes as stored; set by the store

    def item_ids(self) -> list[str]:
        """The ids of the input and output items, each once, in order (items without a string
        id cannot be referenced, so they are not indexed)."""
        seen: dict[str, None] = {}
        for item in (*self.input, *self.output):
            item_id = item.get("id")
            if isinstance(item_id, str):
                seen.setdefault(item_id, None)
        return list(seen)


@dataclass(slots=True)
class Retention:
    """What the store keeps: responses younger than `max_age` seconds, and, past `max_bytes`
    in total, the newest only. None: no limit."""

    max_age: float | None = 30 * 24 * 3600.0
    max_bytes: int | None = 1 << 30

    def oldest_kept(self, now: float | None = None) -> float:
        """The smallest `created_at` still within `max_age` (-inf without an age limit): reads
        compare against it, so an expired record is never returned even before `prune` runs."""
        if self.max_age is None:
            return -math.inf
        return (time.time() if now is None else now) - self.max_age


@dataclass(slots=True)
class StoreStats:
    responses: int = 0
    bytes: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class Store(Protocol):
    """Every method may be called concurrently from many requests. No method blocks the event
    loop: file and network I/O run in threads or async drivers."""

    name: str  # "sqlite", "redis", "postgres"

    async def open(self) -> None:
        """Connect, create tables if needed. Raises StoreError with a message a user can act on
        (which server, which path) when the store cannot be reached."""
        ...

    async def close(self) -> None: ...

    async def put(self, record: StoredResponse) -> None:
        """Keep `record` (replacing one with the same id and owner). Durable when it returns:
        a `kill -9` of the gateway right after does not lose it. Concurrent puts are committed
        together where the store can (one transaction for many writers)."""
        ...

    async def get(self, response_id: str, owner: str) -> StoredResponse | None:
        """None when unknown, expired, deleted, or another owner's."""
        ...

    async def chain(self, response_id: str, owner: str) -> list[StoredResponse]:
        """The response and those it continues (by `previous_response_id`), oldest first,
        ending with `response_id`. Stops where a link is missing (the first record's
        `previous_response_id` is then not None) or after MAX_CHAIN records. Empty when
        `response_id` itself is unknown to this owner."""
        ...

    async def items(self, item_ids: list[str], owner: str) -> dict[str, Item]:
        """Input or output items of this owner's stored responses, by item id; ids not found
        are absent from the answer."""
        ...

    async def delete(self, response_id: str, owner: str) -> bool:
        """False when there was nothing of this owner's to delete."""
        ...

    async def prune(self) -> int:
        """Apply the retention; how many responses were removed."""
        ...

    async def stats(self) -> StoreStats: ...

    async def secret(self) -> bytes:
        """32 random bytes created once per store and shared by every process using it (the
        key that seals compaction handles)."""
        ...


class StoreError(Exception):
    """The store cannot be used (unreachable, unwritable, corrupt)."""


# Helpers shared by the implementations: one encoding of a record's body, so a record moved
# between stores keeps its size, one row of it for the SQL stores, and one reading of the
# retention.

# A record's row in the SQL stores (SQLite, PostgreSQL), in this order (`record_of_row`).
RECORD_COLUMNS = "id, owner, created_at, previous_response_id, size, body"


def encode_body(record: StoredResponse) -> bytes:
    """The stored body of `record`: orjson of {input, output, response}."""
    return orjson.dumps({"input": record.input, "output": record.output, "response": record.response})


def record_of_row(row: Iterable[Any]) -> StoredResponse:
    """The record of a row of RECORD_COLUMNS (a tuple, an asyncpg Record), its body made by
    `encode_body`."""
    response_id, owner, created_at, previous, size, body = row
    data = orjson.loads(body)
    return StoredResponse(
        id=response_id,
        owner=owner,
        created_at=created_at,
        previous_response_id=previous,
        input=data["input"],
        output=data["output"],
        response=data["response"],
        size=size,
    )


def pick_items(records: Iterable[StoredResponse], wanted: Iterable[str]) -> dict[str, Item]:
    """The items of `records` whose ids are in `wanted`; where two records hold the same id
    (a later request repeats an earlier item), the first of `records` wins, so callers pass
    them newest first."""
    want = set(wanted)
    found: dict[str, Item] = {}
    for record in records:
        for item in (*record.input, *record.output):
            item_id = item.get("id")
            if isinstance(item_id, str) and item_id in want and item_id not in found:
                found[item_id] = item
    return found


Client = TypeVar("Client")


class ServerStore(Generic[Client]):
    """What the stores on a server (Redis, PostgreSQL) share: their driver's client while
    open, where they are, in words with the URL's secrets redacted, and the driver's errors as
    StoreError."""

    kind: ClassVar[str]  # "Redis", "PostgreSQL"
    driver_errors: ClassVar[tuple[type[Exception], ...]]  # what the driver raises

    def __init__(self, url: str) -> None:
        self._redactor = Redactor(url_secrets(url))
        self._where = f"the {self.kind} store at {redact_url(url)}"
        self._client: Client | None = None  # set by `open`, None again once closed

    @property
    def _db(self) -> Client:
        """The open client (a pool of connections). Raises StoreError when the store is not
        open."""
        if self._client is None:
            raise self._not_open()
        return self._client

    @contextlib.contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        """Raises StoreError for an error of the driver, saying what failed (`doing`: "read")."""
        try:
            yield
        except self.driver_errors as exc:
            detail = self._redactor.redact(str(exc) or type(exc).__name__)
            raise StoreError(f"cannot {doing} {self._where}: {detail}") from exc

    def _not_open(self) -> StoreError:
        return StoreError(f"{self._where} is not open")
