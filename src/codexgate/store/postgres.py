"""The store on a PostgreSQL server, for several gateway processes or hosts.

Tables as in the SQLite store (prefixed `codexgate_`, the database may be shared): records
with their body as BYTEA (the same orjson bytes, so sizes agree between stores), an item
index that follows its record by a cascading foreign key, and a one-row-per-key meta table
for the secret.

Puts are group-committed like SQLite's: while one transaction is in flight, the puts that
arrive wait together and go in the next one, a single multi-row upsert (rows sorted by key, so
two gateways writing the same records lock them in the same order and never deadlock).

Schema changes are migrations (`migrate`), as in the SQLite store: forward only, each named and
recorded in `codexgate_migrations` in the transaction that applies it.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Sequence
from typing import Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from codexgate.redact import redact_url
from codexgate.store.base import (
    MAX_CHAIN,
    RECORD_COLUMNS,
    Item,
    Retention,
    ServerStore,
    StoredResponse,
    StoreStats,
    encode_body,
    pick_items,
    record_of_row,
)

_SCHEMA_LOCK = 0x636F6465786761  # an advisory lock id: two gateways creating tables at once wait

_SCHEMA = """
CREATE TABLE IF NOT EXISTS codexgate_responses (
    owner TEXT NOT NULL,
    id TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    previous_response_id TEXT,
    size INTEGER NOT NULL,
    body BYTEA NOT NULL,
    PRIMARY KEY (owner, id)
);
CREATE INDEX IF NOT EXISTS codexgate_responses_by_age ON codexgate_responses (created_at);
CREATE TABLE IF NOT EXISTS codexgate_items (
    owner TEXT NOT NULL,
    item_id TEXT NOT NULL,
    response_id TEXT NOT NULL,
    PRIMARY KEY (owner, item_id, response_id),
    FOREIGN KEY (owner, response_id) REFERENCES codexgate_responses (owner, id) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS codexgate_items_by_response ON codexgate_items (owner, response_id);
CREATE TABLE IF NOT EXISTS codexgate_meta (key TEXT PRIMARY KEY, value BYTEA NOT NULL);
"""


_MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS codexgate_migrations (name TEXT PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)
"""


async def migrate(
    conn: asyncpg.Connection[Any] | PoolConnectionProxy[Any], migrations: Sequence[tuple[str, str]]
) -> list[str]:
    """Apply, in order, each of `migrations` (its name, recorded once applied and never reused;
    its SQL) the database has not recorded yet, and record it. The caller holds a transaction
    and an advisory lock, so two gateways opening the database at once apply each once. Returns
    the names applied. Raises what asyncpg raises (the transaction undoes it all)."""
    await conn.execute(_MIGRATIONS_TABLE)
    done = {row[0] for row in await conn.fetch("SELECT name FROM codexgate_migrations")}
    applied: list[str] = []
    for name, sql in migrations:
        if name in done:
            continue
        await conn.execute(sql)
        await conn.execute(
            "INSERT INTO codexgate_migrations (name, applied_at) VALUES ($1, $2)", name, time.time()
        )
        applied.append(name)
    return applied


_UPSERT = f"""
INSERT INTO codexgate_responses ({RECORD_COLUMNS})
SELECT * FROM unnest($1::text[], $2::text[], $3::float8[], $4::text[], $5::int[], $6::bytea[])
ON CONFLICT (owner, id) DO UPDATE SET created_at = excluded.created_at,
    previous_response_id = excluded.previous_response_id, size = excluded.size, body = excluded.body
"""

_DROP_ITEMS = """
DELETE FROM codexgate_items AS i USING unnest($1::text[], $2::text[]) AS k(owner, id)
WHERE i.owner = k.owner AND i.response_id = k.id
"""

_ADD_ITEMS = """
INSERT INTO codexgate_items (owner, item_id, response_id)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[]) ON CONFLICT DO NOTHING
"""

_CHAIN = f"""
WITH RECURSIVE chain(depth, owner, id, prev) AS (
    SELECT 0, owner, id, previous_response_id FROM codexgate_responses
        WHERE owner = $1 AND id = $2 AND created_at >= $3
    UNION ALL
    SELECT chain.depth + 1, r.owner, r.id, r.previous_response_id FROM chain
        JOIN codexgate_responses AS r ON r.owner = $1 AND r.id = chain.prev
        WHERE chain.depth + 1 < $4 AND r.created_at >= $3
)
SELECT {", ".join("r." + c for c in RECORD_COLUMNS.split(", "))}
FROM chain JOIN codexgate_responses AS r USING (owner, id) ORDER BY chain.depth DESC
"""

_ITEMS = f"""
SELECT {RECORD_COLUMNS} FROM codexgate_responses WHERE (owner, id) IN (
    SELECT owner, response_id FROM codexgate_items WHERE owner = $1 AND item_id = ANY($2::text[])
) AND created_at >= $3 ORDER BY created_at DESC, id DESC
"""

_OVER_BUDGET = """
DELETE FROM codexgate_responses WHERE (owner, id) IN (
    SELECT owner, id FROM (
        SELECT owner, id, SUM(size) OVER (
            ORDER BY created_at DESC, owner DESC, id DESC
            ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
        ) AS running FROM codexgate_responses
    ) AS t WHERE running > $1
)
"""


class _Put:
    __slots__ = ("record", "body", "future")

    def __init__(self, record: StoredResponse, body: bytes, future: asyncio.Future[None]) -> None:
        self.record, self.body, self.future = record, body, future


def _count(status: str) -> int:
    """The row count of a command status such as "DELETE 3"."""
    return int(status.rsplit(" ", 1)[-1])


class PostgresStore(ServerStore[asyncpg.Pool]):
    name = "postgres"
    kind = "PostgreSQL"
    driver_errors = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError, ValueError)

    def __init__(self, dsn: str, retention: Retention) -> None:
        super().__init__(dsn)
        self.dsn = dsn
        self.retention = retention
        self._secret: bytes | None = None
        self._pending: list[_Put] = []
        self._flusher: asyncio.Task[None] | None = None
        self.commits = 0  # put transactions committed (for tests and benchmarks)

    # -- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        with self._errors("reach"):
            pool = await asyncpg.create_pool(
                self.dsn, min_size=1, max_size=10, timeout=10, command_timeout=60
            )
            try:
                async with pool.acquire() as conn, conn.transaction():
                    await conn.execute("SELECT pg_advisory_xact_lock($1)", _SCHEMA_LOCK)
                    await conn.execute(_SCHEMA)
                    # Whoever inserts first wins; every process then reads that one.
                    await conn.execute(
                        "INSERT INTO codexgate_meta (key, value) VALUES ('secret', $1)"
                        " ON CONFLICT DO NOTHING",
                        secrets.token_bytes(32),
                    )
                    value = await conn.fetchval("SELECT value FROM codexgate_meta WHERE key = 'secret'")
            except BaseException:
                await pool.close()
                raise
        self._client, self._secret = pool, value

    async def close(self) -> None:
        if self._flusher is not None:
            await asyncio.shield(self._flusher)
        if self._client is not None:
            await self._client.close()
            self._client = None

    # -- puts, grouped -----------------------------------------------------------------------

    async def put(self, record: StoredResponse) -> None:
        self._db  # noqa: B018 - fail now, not in the flusher, when the store is not open
        body = encode_body(record)
        record.size = len(body)
        put = _Put(record, body, asyncio.get_running_loop().create_future())
        self._pending.append(put)
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush())
        await put.future

    async def _flush(self) -> None:
        """Commit what is pending, then what arrived meanwhile, until nothing is left."""
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                try:
                    await self._commit(batch)
                except Exception as exc:
                    if len(batch) > 1 and isinstance(exc.__cause__, asyncpg.PostgresError):
                        # The server refused the batch (say a NUL in one id): alone, each
                        # record succeeds or fails on its own, one bad one fails no other.
                        for put in batch:
                            await self._settle([put])
                    else:
                        self._resolve(batch, exc)
                else:
                    self._resolve(batch, None)
        finally:
            self._flusher = None

    async def _settle(self, batch: list[_Put]) -> None:
        try:
            await self._commit(batch)
        except Exception as exc:
            self._resolve(batch, exc)
        else:
            self._resolve(batch, None)

    @staticmethod
    def _resolve(batch: list[_Put], error: Exception | None) -> None:
        for put in batch:
            if put.future.done():  # the caller was cancelled
                continue
            if error is None:
                put.future.set_result(None)
            else:
                put.future.set_exception(error)

    async def _commit(self, batch: list[_Put]) -> None:
        latest: dict[tuple[str, str], _Put] = {}
        for put in batch:  # the same record twice in a batch: the later put wins
            latest[(put.record.owner, put.record.id)] = put
        puts = [latest[key] for key in sorted(latest)]
        records = [p.record for p in puts]
        items = [(r.owner, item_id, r.id) for r in records for item_id in r.item_ids()]
        with self._errors("write to"):
            async with self._db.acquire() as conn, conn.transaction():
                await conn.execute(
                    _UPSERT,
                    [r.id for r in records],
                    [r.owner for r in records],
                    [r.created_at for r in records],
                    [r.previous_response_id for r in records],
                    [len(p.body) for p in puts],
                    [p.body for p in puts],
                )
                await conn.execute(_DROP_ITEMS, [r.owner for r in records], [r.id for r in records])
                if items:
                    await conn.execute(_ADD_ITEMS, *(list(column) for column in zip(*items, strict=True)))
        self.commits += 1

    # -- the rest of the protocol ------------------------------------------------------------

    async def get(self, response_id: str, owner: str) -> StoredResponse | None:
        with self._errors("read"):
            row = await self._db.fetchrow(
                f"SELECT {RECORD_COLUMNS} FROM codexgate_responses"
                " WHERE owner = $1 AND id = $2 AND created_at >= $3",
                owner,
                response_id,
                self.retention.oldest_kept(),
            )
        return None if row is None else record_of_row(row)

    async def chain(self, response_id: str, owner: str) -> list[StoredResponse]:
        with self._errors("read"):
            rows = await self._db.fetch(_CHAIN, owner, response_id, self.retention.oldest_kept(), MAX_CHAIN)
        return [record_of_row(row) for row in rows]

    async def items(self, item_ids: list[str], owner: str) -> dict[str, Item]:
        wanted = list(dict.fromkeys(item_ids))
        if not wanted:
            return {}
        with self._errors("read"):
            rows = await self._db.fetch(_ITEMS, owner, wanted, self.retention.oldest_kept())
        return pick_items((record_of_row(row) for row in rows), wanted)

    async def delete(self, response_id: str, owner: str) -> bool:
        with self._errors("write to"):
            status = await self._db.execute(
                "DELETE FROM codexgate_responses WHERE owner = $1 AND id = $2", owner, response_id
            )
        return _count(status) > 0

    async def prune(self) -> int:
        removed = 0
        with self._errors("write to"):
            async with self._db.acquire() as conn, conn.transaction():
                status = await conn.execute(
                    "DELETE FROM codexgate_responses WHERE created_at < $1", self.retention.oldest_kept()
                )
                removed += _count(status)
                if self.retention.max_bytes is not None:
                    removed += _count(await conn.execute(_OVER_BUDGET, self.retention.max_bytes))
        return removed

    async def stats(self) -> StoreStats:
        with self._errors("read"):
            row: Any = await self._db.fetchrow(
                "SELECT COUNT(*) AS n, COALESCE(SUM(size), 0) AS total FROM codexgate_responses"
            )
        extra = {"dsn": redact_url(self.dsn)}
        return StoreStats(responses=int(row["n"]), bytes=int(row["total"]), extra=extra)

    async def secret(self) -> bytes:
        if self._secret is None:
            raise self._not_open()
        return self._secret
