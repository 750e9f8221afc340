"""The meter (store/meter.py) in the PostgreSQL store's database, shared by every gateway using
it.

An admission is one statement, `SELECT * FROM codexgate_admit(...)`: the function locks the
key's row (FOR UPDATE), so admissions of one key, from any gateway, follow one another; each of
its later statements then reads what the one before it committed (READ COMMITTED takes a
snapshot per statement), and it applies the rules of meter.decide. Admissions, releases and
renewals go through a small pool of their own with `synchronous_commit = off`: they do not wait
for the WAL's flush (some 250 us each), and a server that crashes loses at most its last
fraction of a second of them (counts of the current minute, leases that expire anyway). A charge
is one upsert of the keys' windows (meter.KeyState.charged in SQL) and one of the ledger, in
one transaction, through the store's own pool: written durably, as the stored responses.

The tables are made and changed by the migrations in MIGRATIONS (store/postgres.py `migrate`),
when the meter opens; the admission function is replaced then.
"""

from __future__ import annotations

import logging
from typing import Any

import asyncpg

from codexgate.store.meter import Admit, Charge, UsageRow, Verdict
from codexgate.store.postgres import PostgresStore, migrate

log = logging.getLogger("codexgate.store")

_LOCK = 0x636F6465786762  # an advisory lock id: two gateways creating the tables at once wait

# The meter's tables as first released (IF NOT EXISTS: a database made by a release before
# migrations has them already, and only the record is added).
_TABLES = """
CREATE TABLE IF NOT EXISTS codexgate_key_state (
    key TEXT PRIMARY KEY, minute BIGINT NOT NULL DEFAULT 0,
    minute_requests BIGINT NOT NULL DEFAULT 0, minute_tokens BIGINT NOT NULL DEFAULT 0,
    day BIGINT NOT NULL DEFAULT 0, day_tokens BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS codexgate_key_leases (
    key TEXT NOT NULL, lease TEXT NOT NULL, expires_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (key, lease)
);
CREATE TABLE IF NOT EXISTS codexgate_usage (
    date TEXT NOT NULL, key TEXT NOT NULL, model TEXT NOT NULL, upstream TEXT NOT NULL,
    requests BIGINT NOT NULL, input_tokens BIGINT NOT NULL, cached_tokens BIGINT NOT NULL,
    output_tokens BIGINT NOT NULL, reasoning_tokens BIGINT NOT NULL,
    PRIMARY KEY (date, key, model, upstream)
);
"""

# The face becomes part of a row's key; the rows already there were written before the ledger
# recorded it: '' (meter.UNKNOWN_FACE).
_USAGE_FACE = """
ALTER TABLE codexgate_usage ADD COLUMN face TEXT NOT NULL DEFAULT '';
ALTER TABLE codexgate_usage DROP CONSTRAINT codexgate_usage_pkey;
ALTER TABLE codexgate_usage ADD PRIMARY KEY (date, key, model, upstream, face);
"""

# Forward only (store/postgres.py `migrate`): a change to the meter's tables is a new line here.
MIGRATIONS = (
    ("meter_tables", _TABLES),
    ("usage_face", _USAGE_FACE),
)

# Code, not data: replaced at every open, so that a gateway runs the rules it was released with.
_FUNCTIONS = """
CREATE OR REPLACE FUNCTION codexgate_admit(
    k TEXT, now_s DOUBLE PRECISION, minute_n BIGINT, day_n BIGINT, rpm BIGINT, tpm BIGINT, tpd BIGINT,
    maxc BIGINT, lease_id TEXT, lease_until DOUBLE PRECISION
) RETURNS TABLE (refused TEXT, minute_requests BIGINT, minute_tokens BIGINT, day_tokens BIGINT,
                 in_flight BIGINT)
LANGUAGE plpgsql AS $$
DECLARE
    s codexgate_key_state%ROWTYPE;
    live BIGINT := 0;
    verdict TEXT := NULL;
BEGIN
    SELECT * INTO s FROM codexgate_key_state AS t WHERE t.key = k FOR UPDATE;
    IF NOT FOUND THEN  -- the key's first admission
        INSERT INTO codexgate_key_state AS t (key) VALUES (k) ON CONFLICT DO NOTHING;
        SELECT * INTO s FROM codexgate_key_state AS t WHERE t.key = k FOR UPDATE;
    END IF;
    IF minute_n > s.minute THEN
        s.minute := minute_n; s.minute_requests := 0; s.minute_tokens := 0;
    END IF;
    IF day_n > s.day THEN
        s.day := day_n; s.day_tokens := 0;
    END IF;
    IF maxc IS NOT NULL THEN  -- the leases that did not expire (those that did go)
        WITH gone AS (
            DELETE FROM codexgate_key_leases AS l WHERE l.key = k AND l.expires_at < now_s RETURNING 1
        ) SELECT (SELECT count(*) FROM codexgate_key_leases AS l WHERE l.key = k)
            - (SELECT count(*) FROM gone) INTO live;
    END IF;
    IF tpd IS NOT NULL AND s.day_tokens >= tpd THEN verdict := 'tokens_per_day';
    ELSIF maxc IS NOT NULL AND live >= maxc THEN verdict := 'max_concurrent';
    ELSIF rpm IS NOT NULL AND s.minute_requests >= rpm THEN verdict := 'requests_per_minute';
    ELSIF tpm IS NOT NULL AND s.minute_tokens >= tpm THEN verdict := 'tokens_per_minute';
    END IF;
    IF verdict IS NULL THEN
        s.minute_requests := s.minute_requests + 1;
        UPDATE codexgate_key_state AS t SET minute = s.minute, minute_requests = s.minute_requests,
            minute_tokens = s.minute_tokens, day = s.day, day_tokens = s.day_tokens WHERE t.key = k;
        IF maxc IS NOT NULL THEN
            live := live + 1;
            INSERT INTO codexgate_key_leases AS l VALUES (k, lease_id, lease_until)
                ON CONFLICT (key, lease) DO UPDATE SET expires_at = excluded.expires_at;
        END IF;
    END IF;
    RETURN QUERY SELECT verdict, s.minute_requests, s.minute_tokens, s.day_tokens, live;
END $$;
"""

# Each key once per statement (a batch holding a key twice is split, `_rounds`).
_CHARGE = """
INSERT INTO codexgate_key_state AS s (key, minute, minute_requests, minute_tokens, day, day_tokens)
SELECT k, m, 0, t, d, t FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[]) AS c(k, m, d, t)
ON CONFLICT (key) DO UPDATE SET
    minute_tokens = CASE WHEN excluded.minute = s.minute THEN s.minute_tokens + excluded.minute_tokens
                         WHEN excluded.minute > s.minute THEN excluded.minute_tokens
                         ELSE s.minute_tokens END,
    minute_requests = CASE WHEN excluded.minute > s.minute THEN 0 ELSE s.minute_requests END,
    minute = GREATEST(s.minute, excluded.minute),
    day_tokens = CASE WHEN excluded.day = s.day THEN s.day_tokens + excluded.day_tokens
                      WHEN excluded.day > s.day THEN excluded.day_tokens
                      ELSE s.day_tokens END,
    day = GREATEST(s.day, excluded.day)
"""

_ADD_USAGE = """
INSERT INTO codexgate_usage AS u (date, key, model, upstream, face, requests, input_tokens,
                                  cached_tokens, output_tokens, reasoning_tokens)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[],
                     $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[])
ON CONFLICT (date, key, model, upstream, face) DO UPDATE SET
    requests = u.requests + excluded.requests, input_tokens = u.input_tokens + excluded.input_tokens,
    cached_tokens = u.cached_tokens + excluded.cached_tokens,
    output_tokens = u.output_tokens + excluded.output_tokens,
    reasoning_tokens = u.reasoning_tokens + excluded.reasoning_tokens
"""

_USAGE = """
SELECT key, date, model, upstream, face, requests, input_tokens, cached_tokens, output_tokens,
       reasoning_tokens
FROM codexgate_usage WHERE date >= $1 AND date <= $2 AND ($3::text IS NULL OR key = $3)
ORDER BY date COLLATE "C", key COLLATE "C", model COLLATE "C", upstream COLLATE "C", face COLLATE "C"
"""


def _rounds(charges: list[Charge]) -> list[list[Charge]]:
    """`charges` in batches that hold each key once (ON CONFLICT may touch a row once)."""
    rounds: list[list[Charge]] = []
    for charge in charges:
        for batch in rounds:
            if all(other.key != charge.key for other in batch):
                batch.append(charge)
                break
        else:
            rounds.append([charge])
    return rounds


def _columns(rows: list[Any]) -> list[list[Any]]:
    return [list(column) for column in zip(*rows, strict=True)]


class PostgresMeter:
    def __init__(self, store: PostgresStore) -> None:
        self._store = store
        self._quick: asyncpg.Pool | None = None  # admissions, releases, renewals: no WAL flush awaited

    async def open(self) -> None:
        with self._store._errors("reach"):
            async with self._store._db.acquire() as conn, conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK)
                applied = await migrate(conn, MIGRATIONS)
                await conn.execute(_FUNCTIONS)
            for name in applied:
                log.info("the PostgreSQL store: migration %s applied", name)
            if self._quick is None:
                self._quick = await asyncpg.create_pool(
                    self._store.dsn, min_size=1, max_size=10, timeout=10, command_timeout=60,
                    server_settings={"synchronous_commit": "off"},
                )  # fmt: skip

    async def close(self) -> None:
        if self._quick is not None:
            await self._quick.close()
            self._quick = None

    @property
    def _counts(self) -> asyncpg.Pool:
        if self._quick is None:
            raise self._store._not_open()
        return self._quick

    async def admit(self, ask: Admit) -> Verdict:
        limits = ask.limits
        with self._store._errors("count in"):
            row = await self._counts.fetchrow(
                "SELECT * FROM codexgate_admit($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                ask.key, ask.now, ask.minute, ask.day, limits.requests_per_minute, limits.tokens_per_minute,
                limits.tokens_per_day, limits.max_concurrent, ask.lease, ask.lease_until,
            )  # fmt: skip
        assert row is not None
        return Verdict(row[0], row[1], row[2], row[3], row[4])

    async def release(self, key: str, lease: str) -> None:
        with self._store._errors("count in"):
            released = "DELETE FROM codexgate_key_leases WHERE key = $1 AND lease = $2"
            await self._counts.execute(released, key, lease)

    async def renew(self, leases: list[tuple[str, str]], until: float) -> None:
        keys, ids = _columns(leases) if leases else ([], [])
        with self._store._errors("count in"):
            await self._counts.execute(
                "UPDATE codexgate_key_leases AS l SET expires_at = $1 FROM unnest($2::text[], $3::text[])"
                " AS h(key, lease) WHERE l.key = h.key AND l.lease = h.lease",
                until, keys, ids,
            )  # fmt: skip

    async def charge(self, charges: list[Charge], rows: list[UsageRow]) -> None:
        with self._store._errors("count in"):
            async with self._store._db.acquire() as conn, conn.transaction():
                for batch in _rounds(sorted(charges, key=lambda c: (c.key, c.minute, c.day))):
                    columns = _columns([(c.key, c.minute, c.day, c.tokens) for c in batch])
                    await conn.execute(_CHARGE, *columns)
                if rows:
                    ordered = sorted(rows, key=lambda row: row.where)  # one lock order for every gateway
                    columns = _columns([(*row.where, *row.counts()) for row in ordered])
                    await conn.execute(_ADD_USAGE, *columns)

    async def usage(self, key: str | None, start: str, end: str) -> list[UsageRow]:
        with self._store._errors("read"):
            rows = await self._store._db.fetch(_USAGE, start, end, key)
        return [UsageRow(*row) for row in rows]

    async def prune(self, before: str) -> None:
        with self._store._errors("write to"):
            await self._store._db.execute("DELETE FROM codexgate_usage WHERE date < $1", before)
