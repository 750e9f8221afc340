"""Usage: each answered response's tokens (input, cached, output, reasoning) and one request,
added to the ledger per key, UTC day, route, upstream and face (store/meter.py), and the tokens
to the key's windows for tokens_per_minute and tokens_per_day; and `GET /v1/usage`, which reads
it.

The ledger's rows are not written per response: answers are summed in memory and written every
FLUSH_SECONDS (one call for all that ended meanwhile), and at the end. A store that is down keeps
them in memory until it answers again (the sums are per key, day, route, upstream and face: a
few rows). The tokens of a key with a token limit are not batched: server/keys/admission.py charges them
to its windows as each answer ends, so that a budget holds for requests sent back to back.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs

from codexgate.errors import GatewayError, InvalidRequest
from codexgate.server.asgi import Receive, Scope, Send
from codexgate.server.exchange import Exchange
from codexgate.server.guard import API_KEY_NAME
from codexgate.server.http_errors import send_json
from codexgate.store.base import StoreError
from codexgate.store.meter import (
    DAY_SECONDS,
    ROW_FIELDS,
    UNKNOWN_FACE,
    Charge,
    MemoryMeter,
    Meter,
    UsageRow,
)

log = logging.getLogger("codexgate.usage")

FLUSH_SECONDS = 1.0
DEFAULT_DAYS = 30  # GET /v1/usage without start_date: the last 30 days
ADMIN_REQUIRED = "admin_key_required"
STORE_UNAVAILABLE = "store_unavailable"
EVERY_KEY = "*"


# The face of an exchange (server/exchange.py) as the ledger names it. The ledger says which API
# a key's clients spoke, not how they reached it: a Responses turn over a WebSocket is one over
# HTTP (the same requests, the same answers), and Codex moves between the two on its own (it
# falls back to HTTP when a socket fails), which would split one client's day into two rows.
# The live view and /metrics keep "responses-ws" apart, where the transport is what is asked.
_LEDGER_FACES = {"responses-ws": "responses"}


def ledger_face(face: str | None) -> str:
    """The ledger's name for `face`: responses, chat, compact, messages."""
    if not face:
        return UNKNOWN_FACE
    return _LEDGER_FACES.get(face, face)


def utc_date(at: float) -> str:
    """The UTC date of the timestamp `at`, as YYYY-MM-DD."""
    return _iso_day(math.floor(at / DAY_SECONDS))


@functools.lru_cache(maxsize=4)  # every answer asks (its usage row's day), nearly always for today
def _iso_day(day: int) -> str:
    return dt.datetime.fromtimestamp(day * DAY_SECONDS, dt.UTC).date().isoformat()


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value > 0 else 0


class Ledger:
    """What this process's answers spent, not yet written to the meter."""

    def __init__(
        self,
        meter: Meter,
        *,
        window: float = 60.0,
        clock: Callable[[], float],
        fallback: Callable[[], MemoryMeter | None] = lambda: None,
        keep_days: int = 400,
        ready: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.meter = meter
        self.window = window
        self.clock = clock
        self._fallback = fallback  # while the store is down: the meter counting in the process
        self.rows: dict[tuple[str, str, str, str, str], UsageRow] = {}
        self.charges: dict[tuple[str, int, int], int] = {}
        self._flush: asyncio.TimerHandle | None = None
        self._writing: asyncio.Task[None] | None = None
        self.keep_days = keep_days
        self._ready = ready  # opens the meter when nothing did yet
        self._pruned_on = ""  # rows older than keep_days are dropped once a day, at a write

    def record(self, exchange: Exchange, key: str, route: str, charged: bool) -> int:
        """An answered response of `key`: its row (by the face the client spoke, `ledger_face`),
        and its tokens (returned) charged to the key's windows with the next write when `charged`."""
        usage = exchange.usage or {}
        now = self.clock()
        added = UsageRow(
            key, utc_date(now), route[:200], (exchange.upstream or "")[:200], ledger_face(exchange.face), 1,
            _count(usage.get("input_tokens")),
            _count((usage.get("input_tokens_details") or {}).get("cached_tokens")),
            _count(usage.get("output_tokens")),
            _count((usage.get("output_tokens_details") or {}).get("reasoning_tokens")),
        )  # fmt: skip
        row = self.rows.get(added.where)
        if row is None:
            self.rows[added.where] = added
        else:
            row.add(added)
        tokens = added.input_tokens + added.output_tokens
        if charged and tokens:
            self.charge_later(
                Charge(key, math.floor(now / self.window), math.floor(now / DAY_SECONDS), tokens)
            )
        self._soon()
        return tokens

    def charge_later(self, charge: Charge) -> None:
        """Tokens to add to a key's windows with the next write (counted in the process now
        while the store does not answer)."""
        where = (charge.key, charge.minute, charge.day)
        self.charges[where] = self.charges.get(where, 0) + charge.tokens
        fallback = self._fallback()
        if fallback is not None:
            state = fallback.states.get(charge.key)
            if state is not None:
                fallback.states[charge.key] = state.charged(charge.minute, charge.day, charge.tokens)
        self._soon()

    def _soon(self) -> None:
        if self._flush is None and self._writing is None:
            self._flush = asyncio.get_running_loop().call_later(FLUSH_SECONDS, self._start_writing)

    def _start_writing(self) -> None:
        self._flush = None
        self._writing = asyncio.create_task(self._write_then_clear(), name="codexgate-usage-flush")

    async def _write_then_clear(self) -> None:
        try:
            await self.write()
        finally:
            self._writing = None
            if (self.rows or self.charges) and self._flush is None:
                self._flush = asyncio.get_running_loop().call_later(FLUSH_SECONDS, self._start_writing)

    async def write(self) -> None:
        """Write what is pending now. A store that fails keeps it pending (logged)."""
        if not (self.rows or self.charges):
            return
        rows, self.rows = self.rows, {}
        charges, self.charges = self.charges, {}
        try:
            if self._ready is not None:
                await self._ready()
            today = utc_date(self.clock())
            if self._pruned_on != today:
                await self.meter.prune(_days_before(today, self.keep_days))
                self._pruned_on = today
            await self.meter.charge(
                [Charge(key, minute, day, tokens) for (key, minute, day), tokens in charges.items()],
                list(rows.values()),
            )
        except (StoreError, GatewayError) as exc:
            log.error("usage not written (kept in memory; written when the store answers): %s", exc)
            for where, row in rows.items():
                kept = self.rows.setdefault(where, row)
                if kept is not row:
                    kept.add(row)
            for window, tokens in charges.items():
                self.charges[window] = self.charges.get(window, 0) + tokens

    async def close(self) -> None:
        """Write what is pending (the gateway is stopping)."""
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        if self._writing is not None:
            await asyncio.shield(self._writing)
        await self.write()


class UsageRoute:
    """`GET /v1/usage`: the caller's own rows; an admin key (or any caller of a gateway without
    keys) may name another key (`?key=NAME`) or every key (`?key=*`)."""

    def __init__(self, ledger: Ledger, is_admin: Callable[[str | None], bool]) -> None:
        self.ledger = ledger
        self.is_admin = is_admin

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        caller = scope.get(API_KEY_NAME)
        query = _query(scope)
        end = _date(query.get("end_date"), "end_date") or utc_date(self.ledger.clock())
        start = _date(query.get("start_date"), "start_date") or _days_before(end, DEFAULT_DAYS - 1)
        if start > end:
            raise InvalidRequest("start_date is after end_date.", param="start_date")
        key: str | None = caller or ""
        asked = query.get("key")
        if asked is not None and asked != key:
            if not self.is_admin(caller):
                # The caller must change its request (another key), as for a model it may not use.
                raise InvalidRequest(
                    "Only an API key with admin = true may read another key's usage.",
                    code=ADMIN_REQUIRED, param="key", status=403,
                )  # fmt: skip
            key = None if asked == EVERY_KEY else asked
        rows = await self.read(key, start, end)
        data = [{name: getattr(row, name) for name in ROW_FIELDS} for row in rows]
        await send_json(send, 200, {"object": "list", "data": data})

    async def read(self, key: str | None, start: str, end: str) -> list[UsageRow]:
        """The ledger's rows, this process's pending ones written first. Raises GatewayError
        (503) when the store does not answer."""
        await self.ledger.write()
        try:
            return await self.ledger.meter.usage(key, start, end)
        except StoreError as exc:
            raise GatewayError(f"Usage cannot be read: {exc}", code=STORE_UNAVAILABLE, status=503) from None


def _query(scope: Scope) -> dict[str, str]:
    raw = scope.get("query_string", b"").decode("latin-1")
    return {key: values[-1] for key, values in parse_qs(raw).items()}


def _date(value: str | None, param: str) -> str | None:
    if value is None:
        return None
    try:
        return dt.date.fromisoformat(value).isoformat()
    except ValueError:
        said = f"{param} must be a date written YYYY-MM-DD, not {value[:40]!r}."
        raise InvalidRequest(said, param=param) from None


def _days_before(date: str, days: int) -> str:
    return (dt.date.fromisoformat(date) - dt.timedelta(days=days)).isoformat()
