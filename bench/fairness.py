"""Fair under pressure: when every member of a pool is at its `max_concurrent`, requests wait,
and they are served fairly across keys: one key's 40 queued requests do not starve another
key's one (docs/configuration.md "Keys and their limits"; the pool's wait queue takes callers in
turn).

    uv run python bench/fairness.py [--quick]

A pool route over two fake upstream processes (bench/fake_upstream_server.py), each with
`max_concurrent = 1`; every answer is 20 deltas 10 ms apart (~200 ms). Then:

1. alone: the first token of a request when nothing waits (the baseline);
2. one hog, one light key: the hog sends HOG requests at once (2 are served, 4 per member wait
   in the hog's line, the rest are told 503 with Retry-After and try again, as Codex does);
   meanwhile the light key sends its requests one after another. Fair: each of the light
   key's requests waits about one answer (a member frees, and the light key is next); first
   come, first served it would wait for half the hog's queue (HOG / 2 answers);
3. three keys: the hog's HOG, a second key's 10 at once, and the light key's one at a time.

Printed: each key's wait before its first token (p50, max) in ms and in answers, what first
come first served would have made the light key wait, and how many requests each upstream
served. Exit status 1 when the light key waited more at the p50 than a fair turn allows: a
request waits in one member's queue (the least busy when it came), where its key has one place
in K when K keys wait; with one slot freeing per answer, its turn comes within K answers.

This needs pools (`[[models]] upstreams = [...]`, `[[upstreams]] max_concurrent`): on a tree
without them it says so and exits 0 without measuring.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(ROOT), str(BENCH)]

from client import pct  # noqa: E402
from procs import Processes, clean_env, free_port, get_json, source_info, wait_http  # noqa: E402
from workload import Scenario  # noqa: E402

from codexgate.config import ConfigError, load_settings  # noqa: E402

ANSWER = Scenario("text", 20, 4, 10)  # ~200 ms: 20 deltas 10 ms apart
KEYS = {"hog": "bench-hog-key-0000001", "light": "bench-light-key-00002", "medium": "bench-medium-key-0003"}
MAX_TRIES = 100  # a request told 503 (its key's line full) tries again after Retry-After


def pool_config(ports: list[int], plain: bool = False) -> str:
    """The pool of `ports` (`plain`: no pool, "pool" routed to the first upstream, uncapped: a
    check of this harness where pools do not exist yet)."""
    cap = "" if plain else "max_concurrent = 1\n"
    members = "".join(
        f'[[upstreams]]\nname = "gpu{n}"\nbase_url = "http://127.0.0.1:{port}/v1"\n{cap}\n'
        for n, port in enumerate(ports, 1)
    )
    names = ", ".join(f'"gpu{n}"' for n in range(1, len(ports) + 1))
    route = 'upstream = "gpu1"' if plain else f"upstreams = [{names}]"
    return members + f'[[models]]\nname = "pool"\nmodel = "{ANSWER.model}"\n{route}\n'


def pools_exist(config: Path) -> str | None:
    """None when this tree reads the pool config; else why not."""
    try:
        load_settings({"discover": False}, config, environ={})
    except ConfigError as exc:
        return str(exc)
    return None


async def first_token(session: aiohttp.ClientSession, url: str, key: str) -> float:
    """Seconds from sending to the first text delta (the answer is read to its end). A 503
    (the key's line is full on every member) is sent again after its Retry-After, as Codex
    does; the time counts from the first try."""
    body = orjson.dumps({"model": "pool", "input": "hello", "stream": True})
    headers = {"content-type": "application/json", "authorization": f"Bearer {KEYS[key]}"}
    t0 = time.perf_counter()
    first = 0.0
    for _ in range(MAX_TRIES):
        async with session.post(url, data=body, headers=headers) as reply:
            if reply.status == 503 and reply.headers.get("retry-after"):
                await reply.read()
                await asyncio.sleep(float(reply.headers["retry-after"]))
                continue
            if reply.status != 200:
                raise RuntimeError(f"{key}: HTTP {reply.status}: {(await reply.read())[:300]!r}")
            async for chunk in reply.content.iter_any():
                if not first and b"response.output_text.delta" in chunk:
                    first = time.perf_counter() - t0
            return first
    raise RuntimeError(f"{key}: still 503 after {MAX_TRIES} tries")


async def one_after_another(session: aiohttp.ClientSession, url: str, key: str, count: int) -> list[float]:
    return [await first_token(session, url, key) for _ in range(count)]


async def at_once(session: aiohttp.ClientSession, url: str, key: str, count: int) -> list[float]:
    return list(await asyncio.gather(*(first_token(session, url, key) for _ in range(count))))


async def scenario(url: str, hog: int, light: int, medium: int) -> dict[str, list[float]]:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        hogging = asyncio.ensure_future(at_once(session, url, "hog", hog))
        await asyncio.sleep(0.3)  # the hog's requests fill the members and the queue
        others = {"light": asyncio.ensure_future(one_after_another(session, url, "light", light))}
        if medium:
            others["medium"] = asyncio.ensure_future(at_once(session, url, "medium", medium))
        waits = {"hog": await hogging, **{key: await task for key, task in others.items()}}
    return waits


def describe(name: str, waits: list[float], alone: float, answer: float) -> str:
    p50, worst = pct(waits, 0.5) - alone, max(waits) - alone
    return (f"  {name:7} {len(waits):3} requests  wait p50 {p50 * 1e3:7.0f} ms ({p50 / answer:5.1f} answers)"
            f"  max {worst * 1e3:7.0f} ms ({worst / answer:5.1f} answers)")  # fmt: skip


async def run(args: argparse.Namespace) -> int:
    hog = 16 if args.quick else 40
    with Processes() as procs, tempfile.TemporaryDirectory(prefix="bench-fairness-") as tmp:
        ports = [free_port(), free_port()]
        config = Path(tmp) / "pool.toml"
        config.write_text(pool_config(ports, args.plain))
        missing = pools_exist(config)
        if missing is not None:
            print(f"fairness: not measured: this tree has no pools yet ({missing})")
            return 0
        for n, up_port in enumerate(ports, 1):
            argv = [sys.executable, str(BENCH / "fake_upstream_server.py"), "--port", str(up_port)]
            wait_http(procs.start(f"upstream{n}", argv), f"http://127.0.0.1:{up_port}/bench/stats")
        port = free_port()
        env = {**clean_env(), "CODEXGATE_API_KEYS": ",".join(f"{k}={v}" for k, v in KEYS.items())}
        argv = [sys.executable, "-m", "codexgate.cli", "serve", "--port", str(port), "--config", str(config),
                "--no-discover", "--store", "none", "--log-level", "warning"]  # fmt: skip
        gateway = procs.start("gateway", argv, env=env)
        base = f"http://127.0.0.1:{port}"
        wait_http(gateway, base + "/healthz")
        url = base + "/v1/responses"
        async with aiohttp.ClientSession() as session:
            alone = pct(await one_after_another(session, url, "light", 10), 0.5)
        answer = ANSWER.chunks * ANSWER.delay_ms / 1000
        two = await scenario(url, hog, 5, 0)
        three = await scenario(url, hog, 5, 10)
        served = [get_json(f"http://127.0.0.1:{p}/bench/stats")["requests"] for p in ports]
    print(f"{source_info()}\nanswers of ~{answer * 1e3:.0f} ms; a request alone: first token in "
          f"{alone * 1e3:.0f} ms; upstreams served {served[0]} and {served[1]} requests")  # fmt: skip
    fifo = hog / 2
    print(f"first come, first served, the light key would wait ~{fifo:.0f} answers ({fifo * answer:.1f} s)")
    for title, waits in ((f"2. hog ({hog} at once) and light (one at a time)", two),
                         (f"3. hog ({hog}), medium (10 at once), light (one at a time)", three)):  # fmt: skip
        print(title)
        for name, values in waits.items():
            print(describe(name, values, alone, answer))
    bounds = {"two": 2, "three": 3}  # K answers for K keys waiting (the docstring)
    runs = {"two": two, "three": three}
    waited = {name: (pct(waits["light"], 0.5) - alone) / answer for name, waits in runs.items()}
    fair = all(waited[n] <= bounds[n] for n in bounds)
    verdict = "PASS" if fair else "FAIL"
    print(
        f"fair: {verdict} (the light key's p50 wait: {waited['two']:.1f} answers with two keys, at most "
        f"{bounds['two']:g}; {waited['three']:.1f} with three, at most {bounds['three']:g})"
    )
    return 0 if fair else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a 16-request hog instead of 40")
    parser.add_argument("--plain", action="store_true", help="no pool (nothing waits): checks this harness")
    return asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
