"""What each API key spends, counted where the store is: the limits' counters and the usage
ledger (server/keys/admission.py decides with them; docs/configuration.md "Keys and their limits").

A small async protocol, `Meter`, with one contract test suite (tests/store/test_meter.py) run
against every implementation: SQLite (store/sqlite_meter.py: every process on the machine sees
the same counts), Redis (store/redis_meter.py, a Lua script per admission) and PostgreSQL
(store/postgres_meter.py, one function call per admission), and `MemoryMeter` here, for
`store = "none"` (per process) and for a store that is down.

The counters of a key are fixed windows: requests and tokens in the current "minute" (window
number `floor(now / window)`), tokens in the current UTC day (`floor(now / 86400)`), and the
responses in flight as leases that expire unless renewed, so that a gateway that dies frees its
slots within a lease. An admission reads and moves them in one atomic step (`decide`, the rules
every implementation follows); tokens are charged later, in batches (`Charge`).

Clocks: the caller passes `now`. A window only moves forward: a process whose clock is a little
behind counts into the newer window another process already opened.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Protocol

DAY_SECONDS = 86_400

# Why an admission was refused, by the limit that refused it (also the order they are checked).
TOKENS_PER_DAY = "tokens_per_day"
MAX_CONCURRENT = "max_concurrent"
REQUESTS_PER_MINUTE = "requests_per_minute"
TOKENS_PER_MINUTE = "tokens_per_minute"
REFUSALS = (TOKENS_PER_DAY, MAX_CONCURRENT, REQUESTS_PER_MINUTE, TOKENS_PER_MINUTE)


@dataclass(frozen=True, slots=True)
class KeyLimits:
    """A key's limits; None: that limit does not apply."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    tokens_per_day: int | None = None
    max_concurrent: int | None = None


@dataclass(frozen=True, slots=True)
class Admit:
    """One admission to decide: `lease` names the slot taken when `max_concurrent` applies, held
    until `release` or `lease_until` (unix seconds), whichever comes first."""

    key: str
    limits: KeyLimits
    now: float
    window: float  # seconds of the "minute"
    lease: str = ""
    lease_until: float = 0.0

    @property
    def minute(self) -> int:
        return math.floor(self.now / self.window)

    @property
    def day(self) -> int:
        return math.floor(self.now / DAY_SECONDS)


@dataclass(slots=True)
class KeyState:
    """A key's counters: the window they count in, and what was counted there."""

    minute: int = 0
    minute_requests: int = 0
    minute_tokens: int = 0
    day: int = 0
    day_tokens: int = 0

    def rolled(self, minute: int, day: int) -> KeyState:
        """The counters as of window `minute` and day `day`: a newer window starts at zero; an
        older one (a clock behind) counts into the newer one already open."""
        state = replace(self)
        if minute > state.minute:
            state.minute, state.minute_requests, state.minute_tokens = minute, 0, 0
        if day > state.day:
            state.day, state.day_tokens = day, 0
        return state

    def charged(self, minute: int, day: int, tokens: int) -> KeyState:
        """The counters with `tokens` spent in window `minute` of day `day` added: to a past
        window they no longer count (but to the day, if it is the same)."""
        state = replace(self)
        if minute == state.minute:
            state.minute_tokens += tokens
        elif minute > state.minute:
            state.minute, state.minute_requests, state.minute_tokens = minute, 0, tokens
        if day == state.day:
            state.day_tokens += tokens
        elif day > state.day:
            state.day, state.day_tokens = day, tokens
        return state


@dataclass(frozen=True, slots=True)
class Verdict:
    """What an admission decided, with the counters after it (for the rate-limit headers)."""

    refused: str | None  # one of REFUSALS, or None: admitted
    minute_requests: int  # requests in this window, this one included when admitted
    minute_tokens: int
    day_tokens: int
    in_flight: int  # leases held, this one included when admitted (0 without max_concurrent)

    @property
    def admitted(self) -> bool:
        return self.refused is None


def decide(state: KeyState, in_flight: int, ask: Admit) -> tuple[Verdict, KeyState]:
    """The rules of an admission, which every implementation follows in one atomic step:
    `state` is the key's counters already rolled to `ask`'s window and day, `in_flight` its live
    leases. Returns the verdict and the counters to keep (unchanged when refused)."""
    limits = ask.limits
    refused: str | None = None
    if limits.tokens_per_day is not None and state.day_tokens >= limits.tokens_per_day:
        refused = TOKENS_PER_DAY
    elif limits.max_concurrent is not None and in_flight >= limits.max_concurrent:
        refused = MAX_CONCURRENT
    elif limits.requests_per_minute is not None and state.minute_requests >= limits.requests_per_minute:
        refused = REQUESTS_PER_MINUTE
    elif limits.tokens_per_minute is not None and state.minute_tokens >= limits.tokens_per_minute:
        refused = TOKENS_PER_MINUTE
    if refused is None:
        state = replace(state, minute_requests=state.minute_requests + 1)
        if limits.max_concurrent is not None:
            in_flight += 1
    verdict = Verdict(refused, state.minute_requests, state.minute_tokens, state.day_tokens, in_flight)
    return verdict, state


@dataclass(frozen=True, slots=True)
class Charge:
    """Tokens a key spent in window `minute` of day `day` (answers that ended then), summed."""

    key: str
    minute: int
    day: int
    tokens: int


# The face of a ledger row written before the ledger recorded faces: not known.
UNKNOWN_FACE = ""


@dataclass(slots=True)
class UsageRow:
    """One row of the ledger: a key's answered responses on one UTC date (YYYY-MM-DD), by the
    route that answered, its upstream, and the face the client spoke (server/keys/usage.py
    `ledger_face`: responses, chat, compact, messages; UNKNOWN_FACE for rows from before)."""

    key: str
    date: str
    model: str
    upstream: str
    face: str
    requests: int = 0
    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0

    @property
    def where(self) -> tuple[str, str, str, str, str]:
        return (self.date, self.key, self.model, self.upstream, self.face)

    def counts(self) -> tuple[int, int, int, int, int]:
        return (self.requests, self.input_tokens, self.cached_tokens, self.output_tokens,
                self.reasoning_tokens)  # fmt: skip

    def add(self, other: UsageRow) -> None:
        self.requests += other.requests
        self.input_tokens += other.input_tokens
        self.cached_tokens += other.cached_tokens
        self.output_tokens += other.output_tokens
        self.reasoning_tokens += other.reasoning_tokens


COUNT_FIELDS = ("requests", "input_tokens", "cached_tokens", "output_tokens", "reasoning_tokens")
ROW_FIELDS = ("key", "date", "model", "upstream", "face", *COUNT_FIELDS)  # a row as JSON, in order


def sorted_rows(rows: Iterable[UsageRow]) -> list[UsageRow]:
    """Rows in the order every implementation answers: by date, key, model, upstream, face."""
    return sorted(rows, key=lambda row: row.where)


class Meter(Protocol):
    """Every method may be called concurrently from many requests and processes; each raises
    StoreError when the store cannot be used."""

    async def open(self) -> None:
        """Create what the meter keeps, once the store is open."""
        ...

    async def close(self) -> None:
        """Let go of what `open` took (before the store closes)."""
        ...

    async def admit(self, ask: Admit) -> Verdict:
        """Decide `ask` by `decide`, atomically: no two admissions of a key, in any process,
        read the same counters. One round trip to the store."""
        ...

    async def release(self, key: str, lease: str) -> None:
        """Free the slot `lease` of `key` (nothing if it expired or was never taken)."""
        ...

    async def renew(self, leases: list[tuple[str, str]], until: float) -> None:
        """Extend the leases (key, lease) still held to `until`."""
        ...

    async def charge(self, charges: list[Charge], rows: list[UsageRow]) -> None:
        """Add spent tokens to the keys' windows (`KeyState.charged`) and rows to the ledger
        (summed into the row of the same date, key, model, upstream and face), together."""
        ...

    async def usage(self, key: str | None, start: str, end: str) -> list[UsageRow]:
        """The ledger's rows of `key` (None: every key) from date `start` to `end`, both
        included, in `sorted_rows` order."""
        ...

    async def prune(self, before: str) -> None:
        """Drop the ledger's rows dated before `before`."""
        ...


@dataclass(slots=True)
class MemoryMeter:
    """The meter of one process: `store = "none"`, and what counts while a store is down."""

    states: dict[str, KeyState] = field(default_factory=dict)
    leases: dict[str, dict[str, float]] = field(default_factory=dict)
    ledger: dict[tuple[str, str, str, str, str], UsageRow] = field(default_factory=dict)

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def admit(self, ask: Admit) -> Verdict:
        state = self.states.get(ask.key, KeyState()).rolled(ask.minute, ask.day)
        held = self.leases.setdefault(ask.key, {})
        for lease in [lease for lease, until in held.items() if until < ask.now]:
            del held[lease]
        verdict, self.states[ask.key] = decide(state, len(held), ask)
        if verdict.admitted and ask.limits.max_concurrent is not None:
            held[ask.lease] = ask.lease_until
        return verdict

    async def release(self, key: str, lease: str) -> None:
        self.leases.get(key, {}).pop(lease, None)

    async def renew(self, leases: list[tuple[str, str]], until: float) -> None:
        for key, lease in leases:
            held = self.leases.get(key, {})
            if lease in held:
                held[lease] = until

    async def charge(self, charges: list[Charge], rows: list[UsageRow]) -> None:
        for charge in charges:
            state = self.states.get(charge.key, KeyState())
            self.states[charge.key] = state.charged(charge.minute, charge.day, charge.tokens)
        for row in rows:
            kept = self.ledger.get(row.where)
            if kept is None:
                self.ledger[row.where] = replace(row)
            else:
                kept.add(row)

    async def usage(self, key: str | None, start: str, end: str) -> list[UsageRow]:
        return sorted_rows(
            replace(row)
            for row in self.ledger.values()
            if start <= row.date <= end and (key is None or row.key == key)
        )

    async def prune(self, before: str) -> None:
        for where in [where for where in self.ledger if where[0] < before]:
            del self.ledger[where]

    def seed(self, key: str, state: KeyState) -> None:
        """Start counting `key` from `state` (the last counters the store answered), unless it
        is counted here already."""
        self.states.setdefault(key, replace(state))
