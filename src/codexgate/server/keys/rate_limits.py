"""What a limited key's answers say: OpenAI's `x-ratelimit-*` headers on every answer, and the
refusal (429 `rate_limit_exceeded` or `insufficient_quota`) when a limit is reached, saying which
and when to try again (server/keys/admission.py decides)."""

from __future__ import annotations

import math

from codexgate.errors import GatewayError, KeyBudgetSpent, KeyLimitReached
from codexgate.server.keys.policy import KeyPolicy
from codexgate.store.meter import (
    DAY_SECONDS,
    MAX_CONCURRENT,
    REQUESTS_PER_MINUTE,
    TOKENS_PER_DAY,
    Admit,
    KeyLimits,
    Verdict,
)

Headers = list[tuple[bytes, bytes]]


def rate_headers(limits: KeyLimits, verdict: Verdict, ask: Admit) -> Headers | None:
    """OpenAI's rate-limit headers for a key with a per-minute limit: the limit, what remains of
    it in this window, and how long until the window starts again (`1m0s`, `12.5s`, `250ms`)."""
    rpm, tpm = limits.requests_per_minute, limits.tokens_per_minute
    if rpm is None and tpm is None:
        return None
    reset = duration((ask.minute + 1) * ask.window - ask.now)
    headers: Headers = []
    if rpm is not None:
        headers += [
            (b"x-ratelimit-limit-requests", b"%d" % rpm),
            (b"x-ratelimit-remaining-requests", b"%d" % max(0, rpm - verdict.minute_requests)),
            (b"x-ratelimit-reset-requests", reset),
        ]
    if tpm is not None:
        headers += [
            (b"x-ratelimit-limit-tokens", b"%d" % tpm),
            (b"x-ratelimit-remaining-tokens", b"%d" % max(0, tpm - verdict.minute_tokens)),
            (b"x-ratelimit-reset-tokens", reset if verdict.minute_tokens else b"0s"),
        ]
    return headers


def duration(seconds: float) -> bytes:
    """A duration as OpenAI writes one in its reset headers: `1m0s`, `12.5s`, `250ms`."""
    if seconds < 1:
        return b"%dms" % max(0, math.ceil(seconds * 1000))
    minutes, rest = divmod(seconds, 60)
    text = f"{rest:.3f}".rstrip("0").rstrip(".") + "s"
    return (f"{int(minutes)}m" + text if minutes else text).encode()


def refusal_for(policy: KeyPolicy, verdict: Verdict, ask: Admit) -> GatewayError:
    """The answer to a refused admission, saying which limit and when to try again."""
    limits, key = policy.limits, policy.name
    if verdict.refused == TOKENS_PER_DAY:
        wait = (ask.day + 1) * DAY_SECONDS - ask.now
        hours, minutes = int(wait // 3600), int(wait % 3600 // 60)
        return KeyBudgetSpent(
            f"The API key '{key}' has spent its budget of {limits.tokens_per_day} tokens for today "
            f"({verdict.day_tokens} used); it renews at 00:00 UTC, in {hours}h{minutes:02d}m.",
            retry_after=wait,
        )
    if verdict.refused == MAX_CONCURRENT:
        return KeyLimitReached(
            f"The API key '{key}' has {verdict.in_flight} responses in flight, its limit "
            f"(max_concurrent). Please try again in 1s.",
            retry_after=1.0,
        )
    wait = (ask.minute + 1) * ask.window - ask.now
    if verdict.refused == REQUESTS_PER_MINUTE:
        what = f"requests per minute: limit {limits.requests_per_minute}, used {verdict.minute_requests}"
    else:
        what = f"tokens per minute: limit {limits.tokens_per_minute}, used {verdict.minute_tokens}"
    return KeyLimitReached(
        f"Rate limit reached for the API key '{key}' on {what}. Please try again in {math.ceil(wait)}s.",
        retry_after=wait,
    )
