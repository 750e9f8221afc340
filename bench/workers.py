"""Streams per second through `codexgate serve --workers N`, for N = 1, 2 and every core.

    uv run python bench/workers.py [--quick]

The fake upstream (bench/fake_upstream_server.py) and the gateway run in their own processes,
the client in this one; Codex-sized request bodies (~50 KB), 100-delta text answers sent back to
back, 128 concurrent streams, as many as fit in the time. On a machine with few cores the
client and the fake upstream take CPU from the workers, so what N workers add is measured
against what this machine can give them: the table says how much CPU the gateway's processes
used, and the other processes' share.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

import orjson

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from client import GATEWAY, new_session, pct, run_load  # noqa: E402
from procs import Processes, clean_env, cpu_seconds, free_port, source_info, wait_http  # noqa: E402
from run import codexgate_argv  # noqa: E402
from workload import Scenario, codex_request  # noqa: E402


def tree_cpu(pid: int) -> float:
    """CPU seconds of a process and its children (the supervisor and its workers)."""
    pids = [pid]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:  # field 4: the parent's pid
                pids.append(int(entry.name))
    total = 0.0
    for p in pids:
        try:
            total += cpu_seconds(p)
        except OSError:  # ended meanwhile
            pass
    return total


async def measure(base: str, body: bytes, pid: int, args: argparse.Namespace) -> dict[str, float]:
    async with new_session() as session:
        url = base + "/v1/responses"
        await run_load(session, url, body, GATEWAY, concurrency=16, max_streams=64, max_seconds=10)  # warm
        cpu0, wall0 = tree_cpu(pid), time.perf_counter()
        result = await run_load(
            session,
            url,
            body,
            GATEWAY,
            concurrency=args.concurrency,
            max_streams=10**9,
            max_seconds=args.seconds,
        )
        cpu, wall = tree_cpu(pid) - cpu0, time.perf_counter() - wall0
    if result.failed:
        raise SystemExit(f"{result.failed} streams failed: {result.first_error()}")
    firsts = [r.first_delta for r in result.results if r.first_delta]
    return {
        "streams": result.ok,
        "per_s": result.ok / result.wall,
        "ttft_p50": pct(firsts, 0.5) * 1000 if firsts else float("nan"),
        "gateway_cores": cpu / wall,
    }


async def main_async(args: argparse.Namespace) -> None:
    cores = len(os.sched_getaffinity(0))
    counts = sorted({1, 2, cores})
    scenario = Scenario("text", 100, 4, 0.0)
    body = orjson.dumps(codex_request(scenario, history_bytes=45_000))
    print(
        f"codexgate workers benchmark ({cores} cores; python {sys.version.split()[0]}; "
        f"load average {os.getloadavg()[0]:.2f} at start)"
    )
    print(source_info())
    print(
        f"{len(body) // 1024} KB bodies, 100-delta answers, {args.concurrency} concurrent streams for "
        f"{args.seconds:g} s per row; fake upstream and client on the same machine, unpinned.\n"
    )
    print(f"  {'workers':>7}  {'streams/s':>9}  {'vs 1':>5}  {'TTFT p50 ms':>11}  {'gateway cores':>13}")
    first: float | None = None
    with Processes() as procs:
        up_port = free_port()
        upstream = procs.start(
            "upstream", [sys.executable, str(BENCH / "fake_upstream_server.py"), "--port", str(up_port)]
        )
        up = f"http://127.0.0.1:{up_port}"
        wait_http(upstream, up + "/bench/stats")
        for count in counts:
            port = free_port()
            env = {**clean_env(), "CODEXGATE_STORE": "none", "CODEXGATE_UI": "false"}
            gateway = procs.start(
                "gateway", [*codexgate_argv(port, up + "/v1"), "--workers", str(count)], env=env
            )
            base = f"http://127.0.0.1:{port}"
            wait_http(gateway, base + "/healthz")
            await asyncio.sleep(1.0)  # every worker up
            row = await measure(base, body, gateway.pid, args)
            first = first or row["per_s"]
            print(
                f"  {count:>7}  {row['per_s']:>9.0f}  {row['per_s'] / first:>4.2f}x  {row['ttft_p50']:>11.1f}"
                f"  {row['gateway_cores']:>13.2f}"
            )
            procs.stop(gateway)
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="5 s per row instead of 20")
    parser.add_argument("--concurrency", type=int, default=128)
    args = parser.parse_args()
    args.seconds = 5.0 if args.quick else 20.0
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
