"""A short soak: thousands of Codex-sized streams through one `codexgate serve`, checking that
memory and file descriptors come back and that every stream ended well.

    uv run python bench/soak.py                      # 3,000 streams at concurrency 64
    uv run python bench/soak.py --streams 10000 --max-rss-growth-mb 40

Prints the gateway's RSS and open descriptors before, during (after each tenth) and after, and
exits 1 when a stream failed, RSS grew by more than --max-rss-growth-mb between the first tenth
and the end (the warm-up is excluded: caches and pools fill there), or descriptors did not come
back to the start plus the upstream connection pool (one per concurrent stream) plus 8.
Loopback only; bounded by --streams and --max-seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

import orjson

sys.path[:0] = [str(Path(__file__).resolve().parent)]

from client import new_session, run_load  # noqa: E402
from procs import BENCH, Processes, free_port, mem_status, wait_http  # noqa: E402
from run import start_gateway  # noqa: E402
from workload import Scenario, codex_request  # noqa: E402


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def soak(args: argparse.Namespace) -> int:
    with Processes() as procs:
        port = free_port()
        upstream = procs.start(
            "upstream", [sys.executable, str(BENCH / "fake_upstream_server.py"), "--port", str(port)]
        )
        upstream_url = f"http://127.0.0.1:{port}"
        wait_http(upstream, upstream_url + "/bench/stats")
        gateway, base = start_gateway(procs, upstream_url + "/v1")
        body = orjson.dumps({**codex_request(Scenario.parse(args.scenario)), "stream": True})
        url = base + "/v1/responses"
        rounds = 10
        per_round = max(1, args.streams // rounds)
        rss: list[float] = []
        fds_start = open_fds(gateway.pid)
        start_mb = mem_status(gateway.pid)["VmRSS"] / 2**20
        print(f"gateway pid {gateway.pid}: RSS {start_mb:.1f} MB, {fds_start} fds")
        failed = 0
        async with new_session() as session:
            for n in range(rounds):
                result = await run_load(
                    session, url, body, "gateway", concurrency=args.concurrency,
                    max_streams=per_round, max_seconds=args.max_seconds / rounds,
                )  # fmt: skip
                failed += result.failed
                rss.append(mem_status(gateway.pid)["VmRSS"] / 2**20)
                print(
                    f"after {(n + 1) * per_round:>6} streams: RSS {rss[-1]:6.1f} MB, "
                    f"{open_fds(gateway.pid)} fds, {result.failed} failed"
                    + (f" ({result.first_error()[:80]})" if result.failed else ""),
                    flush=True,
                )
        await asyncio.sleep(1.0)  # let the gateway close what the client closed
        fds_end = open_fds(gateway.pid)
        growth = rss[-1] - rss[0]
        print(f"RSS after warm-up {rss[0]:.1f} MB, at the end {rss[-1]:.1f} MB (growth {growth:+.1f} MB)")
        print(f"descriptors {fds_start} at start, {fds_end} at the end (client connections closed; the "
              f"upstream pool stays); failed streams {failed}")  # fmt: skip
        # The gateway keeps up to one pooled upstream connection per concurrent stream.
        ok = failed == 0 and growth <= args.max_rss_growth_mb and fds_end <= fds_start + args.concurrency + 8
        print("PASS" if ok else "FAIL")
        return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--streams", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--scenario", default="bench:text:100:4:0:0", help="reply shape (bench/workload.py)")
    parser.add_argument("--max-seconds", type=float, default=600.0)
    parser.add_argument("--max-rss-growth-mb", type=float, default=20.0)
    return asyncio.run(soak(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
