"""Admission: whether a caller's API key may have this response now, by its limits
(`[[api_keys]]`: requests_per_minute, tokens_per_minute, max_concurrent, tokens_per_day,
models; docs/configuration.md "Keys and their limits").

Each request to a face is admitted once, before it is routed, over HTTP and WebSocket alike:
one round trip to the meter (store/meter.py) for a key with limits, none for a key without.
A response admitted under `max_concurrent` holds a lease for its life, renewed every
RENEW_SECONDS while held and released once the answer is delivered. The tokens of an answer of
a key with a token limit are charged to its windows before the answer's end goes out, so that
a budget holds for requests sent back to back; its usage row is written later, in batches, with
every other answer's (server/keys/usage.py).

Refusals are OpenAI's: 429 `rate_limit_exceeded` with Retry-After (Codex waits and retries),
429 `insufficient_quota` past the day's budget, 403 `model_not_allowed`. A limited key's
answers carry `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`.

A store that does not answer (an error, or nothing within STORE_TIMEOUT) neither lets every
key in unlimited nor locks every key out: admission goes on in this process alone
(`MemoryMeter`, from the last counts the store gave), logged as an error when it starts and
every minute while it lasts, and the store is asked again every RETRY_STORE_SECONDS.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from codexgate import timeouts
from codexgate.config import ApiKeyConfig
from codexgate.errors import GatewayError, ModelNotAllowed
from codexgate.server.exchange import Exchange
from codexgate.server.keys.policy import KeyPolicy
from codexgate.server.keys.rate_limits import Headers, rate_headers, refusal_for
from codexgate.server.keys.usage import Ledger, utc_date
from codexgate.store.base import StoreError
from codexgate.store.meter import (
    COUNT_FIELDS,
    DAY_SECONDS,
    Admit,
    Charge,
    KeyState,
    MemoryMeter,
    Meter,
    Verdict,
)

log = logging.getLogger("codexgate.admission")

__all__ = ["Admission", "KeyPolicy", "Ticket"]

LEASE_SECONDS = 60.0  # a slot of a gateway that died is free after this
RENEW_SECONDS = 20.0
STORE_TIMEOUT = 1.0  # an admission waits this long for the store, then counts in the process
RETRY_STORE_SECONDS = 5.0  # while the store is down, it is asked again this often
_REPEAT_DOWN_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class Ticket:
    """An admitted (or refused) request: whose, its lease (when `max_concurrent` applies) and
    where it was counted, the headers its answer carries, and the refusal to answer instead."""

    key: str  # the key's name; "" without keys
    lease: str = ""
    local: bool = False  # counted in this process (the store was down)
    headers: Headers | None = None
    refusal: GatewayError | None = None


_FREE = Ticket("")


class Admission:
    """The admission of every request of one gateway process. `route_of` names the route a
    model name (or alias) is served by; `ready` opens the store when no lifespan did."""

    def __init__(
        self,
        meter: Meter,
        *,
        window: float = 60.0,
        route_of: Callable[[str], str] = lambda name: name,
        ready: Callable[[], Awaitable[None]] | None = None,
        clock: Callable[[], float] = time.time,
        shared: bool = True,
        where: str = "",
        keep_days: int = 400,
    ) -> None:
        self.meter = meter
        self.window = window
        self.route_of = route_of
        self.clock = clock
        self.shared = shared  # False: the meter is this process's (store = "none")
        self.where = where  # which store, for the log
        self.policies: dict[str, KeyPolicy] = {}
        self._tickets: dict[str, Ticket] = {}  # the ticket of each key without limits
        self._ready = ready
        self._opened = False
        self._opening = asyncio.Lock()
        self.fallback = MemoryMeter()
        self.down_since: float | None = None  # the store stopped answering (monotonic); None: up
        self._retry_at = 0.0
        self._said_down_at = 0.0
        self._seen: dict[str, tuple[Admit, Verdict]] = {}  # the store's last counts, for the fallback
        self._held: dict[str, tuple[str, bool]] = {}  # lease -> (key, local)
        self._renewer: asyncio.Task[None] | None = None
        self._leases = (f"{os.getpid()}.{secrets.token_hex(4)}.{n}" for n in itertools.count())
        self.ledger = Ledger(
            meter, window=window, clock=clock, fallback=self._counting_here, keep_days=keep_days,
            ready=self._open,
        )  # fmt: skip

    def _counting_here(self) -> MemoryMeter | None:
        return self.fallback if self.down_since is not None else None

    # -- configuration

    def configure(self, keys: Sequence[ApiKeyConfig]) -> None:
        """The keys' policies (at start, and again when the keys are reloaded)."""
        self.policies = {config.name: KeyPolicy.of(config) for config in keys}
        self._tickets = {name: Ticket(name) for name in self.policies}

    @property
    def counting(self) -> bool:
        return any(policy.counted for policy in self.policies.values())

    async def start(self) -> None:
        """Open the meter (the store is open). Says where the limits are counted."""
        await self._open()
        if self.counting and self.shared:
            log.info("each key's limits are counted in the %s store, for every process using it", self.where)
        if self.counting and not self.shared:
            log.warning(
                'store = "none": each key\'s limits are counted in this process alone (with '
                "--workers N, or N gateways, a key may spend N times its limits); a store counts "
                "them for every process: sqlite for one machine, redis or postgres for several"
            )

    async def _open(self) -> None:
        async with self._opening:
            if self._opened:
                return
            if self._ready is not None:
                await self._ready()
            await self.meter.open()
            self._opened = True

    # -- admission

    async def admit(self, caller: str | None, model: str) -> Ticket:
        """The ticket of a request by `caller` for `model`; its `refusal` (403, 429) is the
        answer when set. One round trip to the meter for a key with limits, none otherwise."""
        key = caller or ""
        policy = self.policies.get(key)
        if policy is None:  # a key from CODEXGATE_API_KEYS, or none at all: no limits
            return self._tickets.setdefault(key, Ticket(key)) if key else _FREE
        if policy.models is not None and not self._may_use(policy.models, model):
            allowed = ", ".join(sorted(policy.models))
            refusal = ModelNotAllowed(
                f"The API key '{key}' may not use the model '{model[:200]}'; it may use: {allowed}.",
                param="model",
            )
            return Ticket(key, refusal=refusal)
        if not policy.counted:
            return self._tickets[key]
        if not self._opened:
            await self._open()
        now = self.clock()
        lease = next(self._leases) if policy.limits.max_concurrent is not None else ""
        ask = Admit(key, policy.limits, now, self.window, lease, now + LEASE_SECONDS)
        verdict, local = await self._decide(ask)
        headers = rate_headers(policy.limits, verdict, ask)
        if not verdict.admitted:
            return Ticket(key, headers=headers, refusal=refusal_for(policy, verdict, ask))
        if lease:
            self._hold(lease, key, local)
        return Ticket(key, lease, local, headers)

    def may_use(self, caller: str | None, model: str) -> bool:
        """Whether `caller`'s key may use `model` (its `models`; every model without them)."""
        policy = self.policies.get(caller or "")
        return policy is None or policy.models is None or self._may_use(policy.models, model)

    def _may_use(self, models: frozenset[str], model: str) -> bool:
        """Whether `model` is one of `models`, by its name or by the route it is an alias of."""
        return model in models or self.route_of(model) in models

    async def _decide(self, ask: Admit) -> tuple[Verdict, bool]:
        """The verdict, and whether this process alone counted it (the store did not answer)."""
        if self.down_since is None or time.monotonic() >= self._retry_at:
            try:
                with timeouts.timeout(STORE_TIMEOUT):
                    verdict = await self.meter.admit(ask)
            except (StoreError, TimeoutError) as exc:
                self._store_down(exc)
            else:
                if self.down_since is not None:
                    self._store_up()
                self._seen[ask.key] = (ask, verdict)
                return verdict, False
        self._say_still_down()
        self._seed_fallback(ask.key)
        return await self.fallback.admit(ask), True

    def _seed_fallback(self, key: str) -> None:
        """Count `key` in the process from the last counts the store gave (once)."""
        seen = self._seen.get(key)
        if seen is not None:
            last, n = seen
            self.fallback.seed(key, KeyState(last.minute, n.minute_requests, n.minute_tokens, last.day,
                                             n.day_tokens))  # fmt: skip

    def _store_down(self, exc: Exception) -> None:
        now = time.monotonic()
        self._retry_at = now + RETRY_STORE_SECONDS
        if self.down_since is not None:
            return
        self.down_since = self._said_down_at = now
        self.fallback = MemoryMeter()
        reason = str(exc) or f"no answer within {STORE_TIMEOUT:g} s"
        log.error(
            "the store does not answer (%s): each key's limits are now counted in this process "
            "alone, from the last counts the store gave, until it answers again (asked every %g s)",
            reason,
            RETRY_STORE_SECONDS,
        )

    def _say_still_down(self) -> None:
        now = time.monotonic()
        if self.down_since is not None and now - self._said_down_at >= _REPEAT_DOWN_SECONDS:
            self._said_down_at = now
            log.error(
                "the store has not answered for %.0f s: limits are counted in this process alone",
                now - self.down_since,
            )

    def _store_up(self) -> None:
        assert self.down_since is not None
        log.warning(
            "the store answers again after %.0f s: limits are counted in the store, for every process",
            time.monotonic() - self.down_since,
        )
        self.down_since = None

    # -- leases

    def _hold(self, lease: str, key: str, local: bool) -> None:
        self._held[lease] = (key, local)
        if self._renewer is None:
            self._renewer = asyncio.create_task(self._renew_held(), name="codexgate-lease-renewal")

    async def release(self, ticket: Ticket) -> None:
        """Free the ticket's slot, if it holds one. Never raises: a lease not released expires."""
        if not ticket.lease or self._held.pop(ticket.lease, None) is None:
            return
        if ticket.local:
            await self.fallback.release(ticket.key, ticket.lease)
            return
        try:
            with timeouts.timeout(STORE_TIMEOUT):
                await self.meter.release(ticket.key, ticket.lease)
        except (StoreError, TimeoutError) as exc:
            log.warning("a slot of key %r was not released (it frees itself within %g s): %s",
                        ticket.key, LEASE_SECONDS, exc or "no answer")  # fmt: skip

    async def _renew_held(self) -> None:
        """While leases are held, extend them every RENEW_SECONDS (one call for them all)."""
        try:
            while self._held:
                await asyncio.sleep(RENEW_SECONDS)
                until = self.clock() + LEASE_SECONDS
                held = list(self._held.items())
                await self.fallback.renew([(key, lease) for lease, (key, local) in held if local], until)
                stored = [(key, lease) for lease, (key, local) in held if not local]
                try:
                    with timeouts.timeout(STORE_TIMEOUT):
                        await self.meter.renew(stored, until)
                except Exception as exc:  # the store is down: the slots free themselves (LEASE_SECONDS)
                    log.warning("leases not renewed: %s", exc or "no answer")
        finally:
            self._renewer = None

    # -- the end of a response

    async def settle(self, ticket: Ticket, exchange: Exchange) -> None:
        """A response ended: free its slot, and add what it spent to the ledger (an answered
        one: it reached its terminal event). Never raises."""
        try:
            if ticket.lease:
                await self.release(ticket)
            if exchange.terminal is not None:
                route = getattr(exchange, "route", None) or self.route_of(exchange.model or "")
                policy = self.policies.get(ticket.key)
                spends = policy is not None and policy.spends_tokens
                tokens = self.ledger.record(
                    exchange, ticket.key, route, charged=policy is not None and policy.counted and not spends
                )
                if spends and tokens:
                    await self._charge_now(ticket, tokens)
        except Exception:
            log.exception("a response's usage was not counted")

    async def _charge_now(self, ticket: Ticket, tokens: int) -> None:
        """Add an answer's tokens to its key's windows before the client reads its end: the
        next request of the key, however soon, is admitted by counts that hold them (the
        ledger's rows are still written in batches). A store that does not answer: counted in
        this process, and written with the ledger's next batch."""
        now = self.clock()
        charge = Charge(ticket.key, math.floor(now / self.window), math.floor(now / DAY_SECONDS), tokens)
        if not ticket.local and self.down_since is None:
            try:
                with timeouts.timeout(STORE_TIMEOUT):
                    await self.meter.charge([charge], [])
                return
            except (StoreError, TimeoutError) as exc:
                self._store_down(exc)
        if self.down_since is not None:
            self._seed_fallback(ticket.key)
        self.ledger.charge_later(charge)

    async def day(self, viewer: str | None) -> list[dict[str, Any]]:
        """Today's (UTC) spend and limits of `viewer`'s key, or of every key for an admin or a
        gateway without keys (the live view). Empty when the store does not answer."""
        today = utc_date(self.clock())
        who = None if self.is_admin(viewer) else (viewer or "")
        try:
            await self.ledger.write()
            rows = await self.meter.usage(who, today, today)
        except (StoreError, GatewayError):
            return []
        names = [who] if who is not None else list(self.policies)
        days = {name: _day(name, self.policies.get(name)) for name in names}
        for row in rows:
            day = days.setdefault(row.key, _day(row.key, self.policies.get(row.key)))
            for name, count in zip(COUNT_FIELDS, row.counts(), strict=True):
                day[name] += count
        return sorted(days.values(), key=lambda d: str(d["key"]))

    def is_admin(self, caller: str | None) -> bool:
        """May `caller` read every key's usage: an admin key, or anyone when there are no keys."""
        policy = self.policies.get(caller or "")
        return caller is None or (policy is not None and policy.admin)

    async def close(self) -> None:
        """Write the usage not yet written, and let the meter go (the gateway is stopping)."""
        if self._renewer is not None:
            self._renewer.cancel()
        await self.ledger.close()
        await self.meter.close()


def _day(key: str, policy: KeyPolicy | None) -> dict[str, Any]:
    limits = asdict(policy.limits) if policy is not None else {}
    return {"key": key, **dict.fromkeys(COUNT_FIELDS, 0),
            "limits": {name: n for name, n in limits.items() if n is not None}}  # fmt: skip
