"""The meter (store/meter.py) on the Redis store's server, shared by every gateway using it.

Keys, under the store's prefix (a key name percent-quoted):

    k:{key}     hash m, mr, mt, d, dt: the window and its requests and tokens, the day and its
                tokens (KeyState), expiring two days after its last change
    l:{key}     sorted set of leases by the time they expire
    u:{date}    hash "{key} {model} {upstream} {face} {n}" -> count n of the date's row
                (COUNT_FIELDS); a field written before the ledger recorded faces has no
                "{face}" and is read as a row of meter.UNKNOWN_FACE
    u           sorted set of the dates that have a ledger hash, by day number (what reads and
                prunes walk)

An admission is one Lua script (`_ADMIT`, the rules of meter.decide): atomic, one round trip.
A charge is a script per key's window and HINCRBYs for the ledger, in one MULTI/EXEC.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from codexgate.store.meter import (
    COUNT_FIELDS,
    DAY_SECONDS,
    UNKNOWN_FACE,
    Admit,
    Charge,
    UsageRow,
    Verdict,
    sorted_rows,
)

if TYPE_CHECKING:
    from codexgate.store.redis import RedisStore

# KEYS: state, leases.  ARGV: now, minute, day, rpm, tpm, tpd, max_concurrent ("" for none),
# lease, lease_until, the state's and the leases' lifetimes in ms.
_ADMIT = """
local s = redis.call('HMGET', KEYS[1], 'm', 'mr', 'mt', 'd', 'dt')
local m, mr, mt = tonumber(s[1]) or 0, tonumber(s[2]) or 0, tonumber(s[3]) or 0
local d, dt = tonumber(s[4]) or 0, tonumber(s[5]) or 0
local minute, day = tonumber(ARGV[2]), tonumber(ARGV[3])
if minute > m then m, mr, mt = minute, 0, 0 end
if day > d then d, dt = day, 0 end
local rpm, tpm, tpd, maxc = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local live = 0
if maxc then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[1])
  live = redis.call('ZCARD', KEYS[2])
end
local refused = ''
if tpd and dt >= tpd then refused = 'tokens_per_day'
elseif maxc and live >= maxc then refused = 'max_concurrent'
elseif rpm and mr >= rpm then refused = 'requests_per_minute'
elseif tpm and mt >= tpm then refused = 'tokens_per_minute'
end
if refused == '' then
  mr = mr + 1
  redis.call('HSET', KEYS[1], 'm', m, 'mr', mr, 'mt', mt, 'd', d, 'dt', dt)
  redis.call('PEXPIRE', KEYS[1], ARGV[10])
  if maxc then
    live = live + 1
    redis.call('ZADD', KEYS[2], ARGV[9], ARGV[8])
    redis.call('PEXPIRE', KEYS[2], ARGV[11])
  end
end
return {refused, mr, mt, dt, live}
"""

# KEYS: state.  ARGV: minute, day, tokens, the state's lifetime in ms (meter.KeyState.charged).
_CHARGE = """
local s = redis.call('HMGET', KEYS[1], 'm', 'mr', 'mt', 'd', 'dt')
local m, mr, mt = tonumber(s[1]) or 0, tonumber(s[2]) or 0, tonumber(s[3]) or 0
local d, dt = tonumber(s[4]) or 0, tonumber(s[5]) or 0
local minute, day, t = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if minute == m then mt = mt + t elseif minute > m then m, mr, mt = minute, 0, t end
if day == d then dt = dt + t elseif day > d then d, dt = day, t end
redis.call('HSET', KEYS[1], 'm', m, 'mr', mr, 'mt', mt, 'd', d, 'dt', dt)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
"""

_STATE_MS = 2 * DAY_SECONDS * 1000


def _day_number(date: str) -> int:
    return dt.date.fromisoformat(date).toordinal()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisMeter:
    def __init__(self, store: RedisStore, lease_seconds: float = 60.0) -> None:
        self._store = store
        self._prefix = store.prefix
        self._lease_ms = str(int(lease_seconds * 2000))
        self._admit: Any = None
        self._charge: Any = None

    def _state_key(self, key: str) -> str:
        return f"{self._prefix}k:{quote(key, safe='')}"

    def _leases_key(self, key: str) -> str:
        return f"{self._prefix}l:{quote(key, safe='')}"

    async def open(self) -> None:
        db = self._store._db
        self._admit = db.register_script(_ADMIT)
        self._charge = db.register_script(_CHARGE)

    async def close(self) -> None:
        return None

    async def admit(self, ask: Admit) -> Verdict:
        limits = ask.limits
        args = [
            repr(ask.now), ask.minute, ask.day,
            *("" if n is None else n for n in (limits.requests_per_minute, limits.tokens_per_minute,
                                               limits.tokens_per_day, limits.max_concurrent)),
            ask.lease, repr(ask.lease_until), _STATE_MS, self._lease_ms,
        ]  # fmt: skip
        with self._store._errors("count in"):
            refused, requests, tokens, day_tokens, in_flight = await self._admit(
                keys=[self._state_key(ask.key), self._leases_key(ask.key)], args=args
            )
        return Verdict(_text(refused) or None, int(requests), int(tokens), int(day_tokens), int(in_flight))

    async def release(self, key: str, lease: str) -> None:
        with self._store._errors("count in"):
            await self._store._db.zrem(self._leases_key(key), lease)

    async def renew(self, leases: list[tuple[str, str]], until: float) -> None:
        with self._store._errors("count in"):
            async with self._store._db.pipeline(transaction=False) as pipe:
                for key, lease in leases:
                    pipe.zadd(self._leases_key(key), {lease: until}, xx=True)
                await pipe.execute()

    async def charge(self, charges: list[Charge], rows: list[UsageRow]) -> None:
        with self._store._errors("count in"):
            async with self._store._db.pipeline(transaction=True) as pipe:
                for spent in charges:
                    args = [spent.minute, spent.day, spent.tokens, _STATE_MS]
                    await self._charge(keys=[self._state_key(spent.key)], args=args, client=pipe)
                for row in rows:
                    self._add_row(pipe, row)
                await pipe.execute()

    def _add_row(self, pipe: Any, row: UsageRow) -> None:
        ledger = f"{self._prefix}u:{row.date}"
        where = " ".join(quote(part, safe="") for part in (row.key, row.model, row.upstream, row.face))
        for n, count in enumerate(row.counts()):
            if count:
                pipe.hincrby(ledger, f"{where} {n}", count)
        if not any(row.counts()):
            pipe.hincrby(ledger, f"{where} 0", 0)  # a row of zeros is a row all the same
        pipe.zadd(f"{self._prefix}u", {row.date: _day_number(row.date)})

    async def usage(self, key: str | None, start: str, end: str) -> list[UsageRow]:
        db = self._store._db
        with self._store._errors("read"):
            dates = [_text(d) for d in await db.zrangebyscore(f"{self._prefix}u", _day_number(start),
                                                              _day_number(end))]  # fmt: skip
            async with db.pipeline(transaction=False) as pipe:
                for date in dates:
                    pipe.hgetall(f"{self._prefix}u:{date}")
                ledgers = await pipe.execute()
        rows: dict[tuple[str, str, str, str, str], UsageRow] = {}
        for date, ledger in zip(dates, ledgers, strict=True):
            for name, value in ledger.items():
                parts = [unquote(part) for part in _text(name).split(" ")]
                if len(parts) == 4:  # written before faces: "{key} {model} {upstream} {n}"
                    parts.insert(3, UNKNOWN_FACE)
                row_key, model, upstream, face, n = parts
                if key is not None and row_key != key:
                    continue
                where = (date, row_key, model, upstream, face)
                row = rows.setdefault(where, UsageRow(row_key, date, model, upstream, face))
                count = COUNT_FIELDS[int(n)]
                setattr(row, count, getattr(row, count) + int(value))  # an old field and a new one
        return sorted_rows(rows.values())

    async def prune(self, before: str) -> None:
        db = self._store._db
        index = f"{self._prefix}u"
        with self._store._errors("write to"):
            old = [_text(d) for d in await db.zrangebyscore(index, "-inf", f"({_day_number(before)}")]
            if old:
                await db.delete(*(f"{self._prefix}u:{date}" for date in old))
                await db.zrem(index, *old)
