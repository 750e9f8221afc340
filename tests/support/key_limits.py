"""What the tests of a key's limits across processes share: a config with limited keys, a
window short enough not to wait for, a burst of requests spread over gateways, and the usage
they read back.

    config = limits_config(tmp_path, requests_per_minute=5)
    fresh_window(WINDOW, BURST_SECONDS)  # at least 5 s left of the current window
    statuses = burst([one, two], 15, ALICE)
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from tests.support.fake_upstream import ChatReply, Usage

WINDOW = 60.0  # seconds: the "minute" (rate_window_seconds) as served
BURST_SECONDS = 5.0  # a burst starts with at least this much of its window left (fresh_window)
ALICE, BOB, CAROL = "alice-limited-key-0001", "bob-limited-key-0002", "carol-limited-key-0003"
KEY_ENV = {"ALICE_KEY": ALICE, "BOB_KEY": BOB, "CAROL_KEY": CAROL}
USAGE = Usage(prompt_tokens=1200, completion_tokens=300, cached_tokens=1000, reasoning_tokens=120)


def limits_config(tmp_path: Path, **keys: dict[str, Any]) -> Path:
    """A config file with the keys named (alice, carol) with their limits, and bob, an admin
    key without limits."""
    text = f"rate_window_seconds = {WINDOW:g}\n"
    for name, limits in {**keys, "bob": {"admin": True}}.items():
        text += f'[[api_keys]]\nname = "{name}"\nkey_env = "{name.upper()}_KEY"\n'
        text += "".join(f"{setting} = {str(value).lower()}\n" for setting, value in limits.items())
    path = tmp_path / "limits.toml"
    path.write_text(text)
    return path


def answer_with_usage(body: dict[str, Any]) -> ChatReply:
    """Every answer reports USAGE, whatever was asked."""
    return ChatReply(text="counted", usage=USAGE)


def fresh_window(window: float, needed: float) -> None:
    """Until at least `needed` seconds are left of the current window (waits at most `needed`)."""
    left = window - time.time() % window
    if left < needed:
        time.sleep(left + 0.05)


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def post(base: str, key: str, **body: Any) -> httpx.Response:
    return httpx.post(base + "/v1/responses", json={"model": "m", "input": "hi", **body}, headers=bearer(key),
                      timeout=30)  # fmt: skip


def burst(bases: list[str], count: int, key: str) -> list[int]:
    """`count` requests at once, spread in turn over `bases`; their statuses."""
    with ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(lambda n: post(bases[n % len(bases)], key), range(count)))
    return [reply.status_code for reply in replies]


def usage_of(base: str, key: str, query: str = "") -> list[dict[str, Any]]:
    reply = httpx.get(base + "/v1/usage" + query, headers=bearer(key), timeout=30)
    assert reply.status_code == 200, reply.text
    data: list[dict[str, Any]] = reply.json()["data"]
    return data
