"""What admitting a request by its key's limits costs, on each store (server/keys/admission.py,
store/meter.py; docs/configuration.md "Keys and their limits").

    uv run python bench/admission.py [--quick] [--stores memory,sqlite,redis,postgres]

Two parts, per store (Redis and PostgreSQL are throwaway servers, tests/store/servers.py):

1. In process: `Admission.admit` then `Admission.settle` (which releases the slot) for a key
   with every limit set (requests_per_minute, tokens_per_minute, tokens_per_day,
   max_concurrent: the longest path, a lease taken and freed), one after another, then 32 at
   once: microseconds per admission (p50, p90) and per release, and admissions per second.
2. End to end: `codexgate serve` on that store in front of the fake upstream
   (bench/fake_upstream_server.py; a Codex-sized request, 5 ms prefill, deltas 1 ms apart), the
   same requests alternated between a key without limits, the limited key and the upstream
   directly: what the gateway adds to the first token (free key - direct), what admission adds
   (limited key - free key) and its share, and the gateway's CPU per request for each key.

The end-to-end figures carry the noise of a shared machine: compare the rows of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(ROOT), str(BENCH)]

from client import pct  # noqa: E402
from procs import Processes, clean_env, cpu_seconds, free_port, source_info, wait_http  # noqa: E402
from workload import Scenario, codex_request  # noqa: E402

from codexgate.config import ApiKeyConfig  # noqa: E402
from codexgate.server.exchange import Exchange  # noqa: E402
from codexgate.server.keys.admission import Admission  # noqa: E402
from codexgate.store import Store, meter_of, open_store  # noqa: E402
from codexgate.store.base import Retention  # noqa: E402

LIMITED = ApiKeyConfig(
    name="limited", key_env="BENCH_LIMITED_KEY", requests_per_minute=10**9, tokens_per_minute=10**12,
    tokens_per_day=10**14, max_concurrent=10**6,
)  # fmt: skip
SECRETS = {"free": "bench-free-key-000001", "limited": "bench-limited-key-0002"}
STREAMED = Scenario("text", 50, 4, 1, 5)  # section 1a of bench/run.py: 5 ms prefill, deltas 1 ms apart
CONFIG = """
[[api_keys]]
name = "free"
key_env = "BENCH_FREE_KEY"

[[api_keys]]
name = "limited"
key_env = "BENCH_LIMITED_KEY"
requests_per_minute = 1000000000
tokens_per_minute = 1000000000000
tokens_per_day = 100000000000000
max_concurrent = 1000000
"""


# -- the stores ------------------------------------------------------------------------------


@contextlib.contextmanager
def store_url(kind: str) -> Iterator[str | None]:
    """A throwaway server for `kind` (its URL), or None for the stores that need none."""
    if kind in ("memory", "sqlite"):
        yield None
        return
    from tests.store.servers import postgres_server, redis_server

    with redis_server() if kind == "redis" else postgres_server() as url:
        yield url


def make_store(kind: str, url: str | None, folder: Path) -> Store | None:
    if kind == "memory":
        return None
    return open_store(kind, path=folder / "store.sqlite3", url=url, retention=Retention())


# -- part 1: in process ----------------------------------------------------------------------


async def in_process(kind: str, url: str | None, folder: Path, n: int) -> dict[str, float]:
    store = make_store(kind, url, folder)
    if store is not None:
        await store.open()
    admission = Admission(meter_of(store), shared=store is not None)
    admission.configure([LIMITED])
    try:
        await admission.start()
        ended = Exchange()  # not answered: settling it only frees the slot
        for _ in range(50):  # warm: connections, statements prepared, scripts loaded
            await admission.settle(await admission.admit("limited", "m"), ended)
        admits, releases = [], []
        for _ in range(n):
            t0 = time.perf_counter()
            ticket = await admission.admit("limited", "m")
            t1 = time.perf_counter()
            await admission.settle(ticket, ended)
            releases.append(time.perf_counter() - t1)
            admits.append(t1 - t0)
        assert ticket.refusal is None and ticket.lease
        concurrent, wall = await _at_once(admission, ended, 32, n)
        return {
            "admit_p50": pct(admits, 0.5) * 1e6, "admit_p90": pct(admits, 0.9) * 1e6,
            "release_p50": pct(releases, 0.5) * 1e6,
            "at_once_p50": pct(concurrent, 0.5) * 1e6, "at_once_p99": pct(concurrent, 0.99) * 1e6,
            "per_s": len(concurrent) / wall,
        }  # fmt: skip
    finally:
        await admission.close()
        if store is not None:
            await store.close()


async def _at_once(admission: Admission, ended: Exchange, tasks: int, n: int) -> tuple[list[float], float]:
    """`tasks` callers admitting and settling back to back, `n` admissions in all."""
    latencies: list[float] = []

    async def caller() -> None:
        while len(latencies) < n:
            t0 = time.perf_counter()
            ticket = await admission.admit("limited", "m")
            latencies.append(time.perf_counter() - t0)
            await admission.settle(ticket, ended)

    t0 = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(tasks)))
    return latencies, time.perf_counter() - t0


# -- part 2: end to end ----------------------------------------------------------------------


async def first_token(session: aiohttp.ClientSession, url: str, body: bytes, key: str | None) -> float:
    """Seconds to the first text delta of one streamed answer (gateway or upstream)."""
    headers = {"content-type": "application/json"}
    if key is not None:
        headers["authorization"] = f"Bearer {key}"
    marker = b"response.output_text.delta" if key is not None else b'"delta":{"content":"'
    t0 = time.perf_counter()
    found = 0.0
    async with session.post(url, data=body, headers=headers) as reply:
        if reply.status != 200:
            raise RuntimeError(f"{url}: HTTP {reply.status}: {(await reply.read())[:300]!r}")
        seen = b""
        async for chunk in reply.content.iter_any():
            if not found:
                seen = seen[-64:] + chunk
                at = seen.find(marker)
                while at >= 0 and seen.startswith(marker + b'"', at):  # the role chunk's empty content
                    at = seen.find(marker, at + 1)
                if at >= 0:
                    found = time.perf_counter() - t0
    return found


@contextlib.asynccontextmanager
async def gateway(
    procs: Processes, kind: str, url: str | None, upstream: str, folder: Path
) -> AsyncIterator[Any]:
    config = folder / "keys.toml"
    config.write_text(CONFIG)
    port = free_port()
    env = {**clean_env(), "BENCH_FREE_KEY": SECRETS["free"], "BENCH_LIMITED_KEY": SECRETS["limited"]}
    env["CODEXGATE_STORE"] = "none" if kind == "memory" else kind
    env["CODEXGATE_STORE_PATH"], env["CODEXGATE_STORE_URL"] = str(folder / "e2e.sqlite3"), url or ""
    argv = [sys.executable, "-m", "codexgate.cli", "serve", "--port", str(port), "--upstream", upstream,
            "--no-discover", "--log-level", "warning", "--config", str(config)]  # fmt: skip
    proc = procs.start(f"gateway-{kind}", argv, env=env)
    base = f"http://127.0.0.1:{port}"
    wait_http(proc, base + "/healthz")
    try:
        yield proc, base
    finally:
        procs.stop(proc)


async def end_to_end(
    procs: Processes, kind: str, url: str | None, up_base: str, folder: Path, rounds: int
) -> dict[str, float]:
    serving = gateway(procs, kind, url, up_base + "/v1", folder)
    async with serving as (proc, base), aiohttp.ClientSession() as session:
        body = orjson.dumps(codex_request(STREAMED))
        gw_url, up_url = base + "/v1/responses", up_base + "/v1/chat/completions"
        await first_token(session, gw_url, body, SECRETS["free"])
        async with session.get(up_base + "/bench/last-body") as reply:
            chat = await reply.read()  # what the gateway sent upstream: the direct path sends the same
        paths = [("direct", up_url, chat, None), ("free", gw_url, body, SECRETS["free"]),
                 ("limited", gw_url, body, SECRETS["limited"])]  # fmt: skip
        firsts: dict[str, list[float]] = {name: [] for name, *_ in paths}
        for n in range(10 + rounds):
            for name, target, payload, key in paths[n % 3 :] + paths[: n % 3]:  # the order rotates
                seconds = await first_token(session, target, payload, key)
                if n >= 10:
                    firsts[name].append(seconds)
        cpu = {}
        for name in ("free", "limited", "free", "limited"):  # CPU per request, in alternating blocks
            before = cpu_seconds(proc.pid)
            for _ in range(rounds):
                await first_token(session, gw_url, body, SECRETS[name])
            await asyncio.sleep(0.05)
            cpu.setdefault(name, []).append((cpu_seconds(proc.pid) - before) / rounds)
    p50 = {name: pct(values, 0.5) * 1e3 for name, values in firsts.items()}
    return {
        "gateway_adds_ms": p50["free"] - p50["direct"], "admission_adds_ms": p50["limited"] - p50["free"],
        "cpu_free_us": min(cpu["free"]) * 1e6, "cpu_limited_us": min(cpu["limited"]) * 1e6,
    }  # fmt: skip


# -- the report ------------------------------------------------------------------------------


def report(rows: dict[str, dict[str, float]]) -> None:
    print("\n1. In process: Admission.admit + settle for a key with every limit (a lease taken, freed)")
    print(f"{'store':10} {'admit p50':>10} {'admit p90':>10} {'release p50':>12} {'32 at once p50':>15} "
          f"{'p99':>9} {'admits/s':>9}")  # fmt: skip
    for kind, r in rows.items():
        if "admit_p50" in r:
            print(f"{kind:10} {r['admit_p50']:8.0f}us {r['admit_p90']:8.0f}us {r['release_p50']:10.0f}us "
                  f"{r['at_once_p50']:13.0f}us {r['at_once_p99']:7.0f}us {r['per_s']:9.0f}")  # fmt: skip
    print("\n2. End to end (codexgate serve, p50 of the first text delta; CPU: the gateway's per request)")
    print(f"{'store':10} {'gateway adds':>13} {'admission adds':>15} {'share':>6} {'CPU free key':>13} "
          f"{'CPU limited':>12} {'CPU of admission':>17}")  # fmt: skip
    for kind, r in rows.items():
        if "gateway_adds_ms" in r:
            added = r["gateway_adds_ms"]
            share = r["admission_adds_ms"] / added if added > 0 else float("nan")
            print(f"{kind:10} {r['gateway_adds_ms']:11.2f}ms {r['admission_adds_ms']:13.2f}ms {share:6.0%} "
                  f"{r['cpu_free_us']:11.0f}us {r['cpu_limited_us']:10.0f}us "
                  f"{r['cpu_limited_us'] - r['cpu_free_us']:15.0f}us")  # fmt: skip


async def run(args: argparse.Namespace) -> None:
    n, rounds = (300, 40) if args.quick else (2000, 150)
    rows: dict[str, dict[str, float]] = {}
    with Processes() as procs, tempfile.TemporaryDirectory(prefix="bench-admission-") as tmp:
        up_port = free_port()
        argv = [sys.executable, str(BENCH / "fake_upstream_server.py"), "--port", str(up_port)]
        up = procs.start("upstream", argv)
        up_base = f"http://127.0.0.1:{up_port}"
        wait_http(up, up_base + "/bench/stats")
        for kind in args.stores.split(","):
            folder = Path(tmp) / kind
            folder.mkdir()
            with store_url(kind) as url:
                print(f"{kind}: in process...", flush=True)
                rows[kind] = await in_process(kind, url, folder, n)
                if not args.no_e2e:
                    print(f"{kind}: end to end...", flush=True)
                    rows[kind].update(await end_to_end(procs, kind, url, up_base, folder, rounds))
    print(f"\n{source_info()}; {len(os.sched_getaffinity(0))} CPUs; {n} admissions, {rounds} rounds")
    report(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer admissions and rounds")
    parser.add_argument("--stores", default="memory,sqlite,redis,postgres", help="comma-separated")
    parser.add_argument("--no-e2e", action="store_true", help="part 1 only")
    asyncio.run(run(parser.parse_args()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
