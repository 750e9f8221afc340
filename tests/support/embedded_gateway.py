"""The gateway with its lifespan (the embedded model starts there) on a real socket, and its
`/healthz` waited on under a deadline: for the embedded model's tests, on the stand-in
(tests/backends/embedded/) and for real (tests/test_embedded_model.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx

from codexgate.app import build_app
from codexgate.config import load_settings
from tests.support.servers import arun_asgi_server

Health = dict[str, Any]


@asynccontextmanager
async def gateway(flags: dict[str, Any], timeout: float = 30) -> AsyncIterator[httpx.AsyncClient]:
    """The gateway built from `flags`, served with its lifespan; a client of it whose requests
    time out after `timeout` seconds."""
    app = build_app(load_settings(flags, environ={}), environ={})
    async with arun_asgi_server(app, lifespan="on", shutdown_timeout=5) as url:
        async with httpx.AsyncClient(base_url=url, timeout=timeout) as client:
            yield client


async def health_when(
    client: httpx.AsyncClient, check: Callable[[Health], bool], seconds: float = 30
) -> Health:
    """`/healthz` once `check` holds for it, polled; fails the test after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        health: Health = (await client.get("/healthz")).json()
        if check(health):
            return health
        assert time.monotonic() < deadline, f"/healthz never got there: {health}"
        await asyncio.sleep(0.05)


def in_state(state: str) -> Callable[[Health], bool]:
    """A check that the embedded model is in `state` (`serving`, `downloading`, `failed`...)."""
    return lambda health: bool(health.get("embedded", {}).get("state") == state)


serving = in_state("serving")
