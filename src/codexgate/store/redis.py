"""The store on a Redis server, for several gateway processes or hosts.

Keys (all under `prefix`; owners and ids are percent-quoted, so ":" separates unambiguously):

    r:{owner}:{id}        the record, a JSON string, expiring `max_age` after its created_at
    i:{owner}:{item_id}   the id of the response holding that item, expiring with it
    t                     sorted set of "{owner}:{id}" by created_at (what prune walks)
    m                     hash "{owner}:{id}" -> [size, [its item keys]] as JSON: what
                          removing a record must undo, kept after the record itself expired
    bytes                 the total size of the records in `t`
    secret                the 32-byte secret

A put, a delete and a prune's removals are Lua scripts: atomic like MULTI/EXEC, and, unlike
it, able to read the record being replaced (its size, its item keys) in the same step, so two
gateways replacing or deleting the same record at once leave the counter and index right.

An item id held by two responses of one owner points at the later put; deleting that one
drops the index entry (the earlier holder's copy is then no longer found by id).
"""

from __future__ import annotations

import secrets
from typing import Any
from urllib.parse import quote, unquote

import orjson
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from codexgate.redact import redact_url
from codexgate.store.base import (
    MAX_CHAIN,
    Item,
    Retention,
    ServerStore,
    StoredResponse,
    StoreError,
    StoreStats,
    pick_items,
)

# KEYS: record, t, m, bytes, new item keys...  ARGV: member, value, created_at, expire-at in
# ms ("" for never), size, response id, the member's new entry in m.
_PUT = """
local old = redis.call('HGET', KEYS[3], ARGV[1])
local delta = tonumber(ARGV[5])
if old then
  local entry = cjson.decode(old)
  delta = delta - entry[1]
  for _, key in ipairs(entry[2]) do
    if redis.call('GET', key) == ARGV[6] then redis.call('DEL', key) end
  end
end
redis.call('SET', KEYS[1], ARGV[2])
if ARGV[4] ~= '' then redis.call('PEXPIREAT', KEYS[1], ARGV[4]) end
for i = 5, #KEYS do
  redis.call('SET', KEYS[i], ARGV[6])
  if ARGV[4] ~= '' then redis.call('PEXPIREAT', KEYS[i], ARGV[4]) end
end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[7])
redis.call('INCRBY', KEYS[4], delta)
return 1
"""

# KEYS: t, m, bytes.  ARGV: (member, record key, response id) triples.
# Returns {entries removed from t, records deleted (not already expired)}.
_REMOVE = """
local entries, records = 0, 0
for i = 1, #ARGV, 3 do
  local member, record, id = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  records = records + redis.call('DEL', record)
  local old = redis.call('HGET', KEYS[2], member)
  if old then
    local entry = cjson.decode(old)
    for _, key in ipairs(entry[2]) do
      if redis.call('GET', key) == id then redis.call('DEL', key) end
    end
    redis.call('HDEL', KEYS[2], member)
    redis.call('DECRBY', KEYS[3], entry[1])
    entries = entries + 1
  end
  redis.call('ZREM', KEYS[1], member)
end
return {entries, records}
"""

_PAGE = 500  # members per script call or range read
_CONNECTIONS = 32


def _member(owner: str, response_id: str) -> str:
    return f"{quote(owner, safe='')}:{quote(response_id, safe='')}"


def _text(value: object) -> str:
    """A member as redis-py hands it back (bytes, the client decodes nothing)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _split_member(member: str) -> tuple[str, str]:
    owner, _, response_id = member.partition(":")
    return unquote(owner), unquote(response_id)


class RedisStore(ServerStore[aioredis.Redis]):
    name = "redis"
    kind = "Redis"
    driver_errors = (RedisError, OSError)

    def __init__(self, url: str, retention: Retention, prefix: str = "codexgate:") -> None:
        super().__init__(url)
        self.url = url
        self.retention = retention
        self.prefix = prefix
        self._secret: bytes | None = None
        self._t = f"{prefix}t"
        self._m = f"{prefix}m"
        self._bytes = f"{prefix}bytes"

    # -- keys and errors ---------------------------------------------------------------------

    def _record_key(self, owner: str, response_id: str) -> str:
        return f"{self.prefix}r:{_member(owner, response_id)}"

    def _item_key(self, owner: str, item_id: str) -> str:
        return f"{self.prefix}i:{_member(owner, item_id)}"

    # -- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        with self._errors("reach"):
            # Blocking: past `_CONNECTIONS` requests in flight, a caller waits for a connection
            # instead of failing, as a burst of puts would otherwise.
            pool = aioredis.BlockingConnectionPool.from_url(
                self.url, max_connections=_CONNECTIONS, timeout=30, socket_connect_timeout=5
            )
            client = aioredis.Redis.from_pool(pool)
            try:
                await client.ping()
                # Whoever sets it first wins; every process then reads that one.
                await client.set(f"{self.prefix}secret", secrets.token_bytes(32), nx=True)
                value = await client.get(f"{self.prefix}secret")
            except BaseException:
                await client.aclose()
                raise
        if not isinstance(value, bytes) or len(value) != 32:
            await client.aclose()
            raise StoreError(f"{self._where} holds a damaged secret")
        self._client, self._secret = client, value

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    # -- the protocol ------------------------------------------------------------------------

    async def put(self, record: StoredResponse) -> None:
        value = orjson.dumps(
            {
                "id": record.id,
                "owner": record.owner,
                "created_at": record.created_at,
                "previous_response_id": record.previous_response_id,
                "input": record.input,
                "output": record.output,
                "response": record.response,
            }
        )
        record.size = len(value)
        item_keys = [self._item_key(record.owner, item_id) for item_id in record.item_ids()]
        max_age = self.retention.max_age
        expire_at = "" if max_age is None else str(int((record.created_at + max_age) * 1000))
        member = _member(record.owner, record.id)
        with self._errors("write to"):
            await self._db.eval(
                _PUT,
                4 + len(item_keys),
                self._record_key(record.owner, record.id),
                self._t,
                self._m,
                self._bytes,
                *item_keys,
                member,
                value,
                repr(record.created_at),
                expire_at,
                str(len(value)),
                record.id,
                orjson.dumps([len(value), item_keys]),
            )

    def _decode(self, value: Any, oldest: float) -> StoredResponse | None:
        if not isinstance(value, bytes):
            return None
        data = orjson.loads(value)
        if data["created_at"] < oldest:  # past max_age, its key not yet expired
            return None
        return StoredResponse(
            id=data["id"],
            owner=data["owner"],
            created_at=data["created_at"],
            previous_response_id=data["previous_response_id"],
            input=data["input"],
            output=data["output"],
            response=data["response"],
            size=len(value),
        )

    async def get(self, response_id: str, owner: str) -> StoredResponse | None:
        with self._errors("read"):
            value = await self._db.get(self._record_key(owner, response_id))
        return self._decode(value, self.retention.oldest_kept())

    async def chain(self, response_id: str, owner: str) -> list[StoredResponse]:
        oldest = self.retention.oldest_kept()
        found: list[StoredResponse] = []
        next_id: str | None = response_id
        with self._errors("read"):
            # One lookup per link: each record names the next key to read.
            while next_id is not None and len(found) < MAX_CHAIN:
                record = self._decode(await self._db.get(self._record_key(owner, next_id)), oldest)
                if record is None:
                    break
                found.append(record)
                next_id = record.previous_response_id
        found.reverse()
        return found

    async def items(self, item_ids: list[str], owner: str) -> dict[str, Item]:
        wanted = list(dict.fromkeys(item_ids))
        if not wanted:
            return {}
        oldest = self.retention.oldest_kept()
        with self._errors("read"):
            holders = await self._db.mget([self._item_key(owner, item_id) for item_id in wanted])
            response_ids = list(dict.fromkeys(h.decode() for h in holders if isinstance(h, bytes)))
            if not response_ids:
                return {}
            values = await self._db.mget([self._record_key(owner, rid) for rid in response_ids])
        records = [r for r in (self._decode(v, oldest) for v in values) if r is not None]
        records.sort(key=lambda r: r.created_at, reverse=True)
        return pick_items(records, wanted)

    async def _remove(self, members: list[str]) -> tuple[int, int]:
        entries = records = 0
        for start in range(0, len(members), _PAGE):
            args: list[str] = []
            for member in members[start : start + _PAGE]:
                owner, response_id = _split_member(member)
                args += [member, self._record_key(owner, response_id), response_id]
            with self._errors("write to"):
                result = await self._db.eval(_REMOVE, 3, self._t, self._m, self._bytes, *args)
            entries += int(result[0])
            records += int(result[1])
        return entries, records

    async def delete(self, response_id: str, owner: str) -> bool:
        _, records = await self._remove([_member(owner, response_id)])
        return records > 0

    async def prune(self) -> int:
        removed = 0
        oldest = self.retention.oldest_kept()
        if self.retention.max_age is not None:
            with self._errors("read"):
                old = await self._db.zrangebyscore(self._t, "-inf", f"({oldest!r}")
            removed += (await self._remove([_text(m) for m in old]))[0]
        if self.retention.max_bytes is not None:
            removed += (await self._remove(await self._over_budget(self.retention.max_bytes)))[0]
        return removed

    async def _over_budget(self, max_bytes: int) -> list[str]:
        """The members past `max_bytes`, counting sizes from the newest down."""
        with self._errors("read"):
            total = int(await self._db.get(self._bytes) or 0)
            if total <= max_bytes:
                return []
            running, start = 0, 0
            over: list[str] = []
            while True:
                page = [_text(m) for m in await self._db.zrevrange(self._t, start, start + _PAGE - 1)]
                if not page:
                    return over
                entries = await self._db.hmget(self._m, page)
                for member, entry in zip(page, entries, strict=True):
                    running += orjson.loads(entry)[0] if entry is not None else 0
                    if running > max_bytes:
                        over.append(member)
                start += _PAGE

    async def stats(self) -> StoreStats:
        with self._errors("read"):
            count = await self._db.zcard(self._t)
            total = await self._db.get(self._bytes)
        extra = {"url": redact_url(self.url), "prefix": self.prefix}
        return StoreStats(responses=int(count), bytes=int(total or 0), extra=extra)

    async def secret(self) -> bytes:
        if self._secret is None:
            raise self._not_open()
        return self._secret
