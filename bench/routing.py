"""Routing: a pool of two real llama.cpp servers (the embedded model's runtime, `--parallel 4`
each, one thread each), sticky against round-robin in one run, and what a failover costs.

    uv run python bench/routing.py                 # the issue's shape: 6k-token prefixes (~30 min)
    uv run python bench/routing.py --quick         # 1.5k-token prefixes, 4 conversations (~5 min)
    uv run python bench/routing.py --only failover # the failover cost alone (seconds)

1. Sticky against round-robin. Conversations like Codex's: each a distinct prefix of
   `--prefix-tokens` (code, numbered per conversation so none shares another's), growing each
   turn by the last answer and a new question; the conversations take their turns in rounds
   (the next once every answer is in), each round's requests 0.1 s apart in a shuffled order
   (seeded, the same for both policies); each turn is a streamed `/v1/responses` request with
   the conversation's `prompt_cache_key`, as Codex sends. For each policy the servers start
   fresh (empty caches) under a gateway whose route `coder` pools them, each member with
   `max_concurrent` = its slots: `sticky = true`, then `sticky = false` with
   `balance = "round_robin"`. Printed: the time to first token (first
   turns, whose prefill neither policy can skip, apart from the later ones), and the prompt
   tokens each server evaluated (llama.cpp's /metrics: `prompt_tokens_total`, the tokens it
   read; those it took from its cache are `prompt_tokens_cached_total`, printed beside).
2. Failover cost (tests/support/model_server.py stand-ins, a fresh gateway per trial): the extra
   first-token time of a conversation whose member is dead (connection refused) or hangs
   before its headers (`first_byte_timeout = 2`), over the same request to the live member.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from procs import Proc, Processes, clean_env, free_port, wait_http  # noqa: E402
from tests.support.llama_server import llama_command  # noqa: E402

from codexgate.backends.base import conversation_of  # noqa: E402
from codexgate.routing.choice import rendezvous  # noqa: E402

TOKENS_PER_LINE = 28  # SmolLM2's tokens for one line of the generated code (measured)


def prefix(conversation: int, tokens: int) -> str:
    lines = max(1, tokens // TOKENS_PER_LINE)
    line = "def c{c}_f{i}(x): return x * {i} + {c}  # step {i}"
    return "\n".join(line.format(c=conversation, i=i) for i in range(lines))


def start_llama(procs: Processes, name: str, parallel: int, context: int) -> tuple[Proc, str]:
    command, model, env = llama_command()
    port = free_port()
    argv = [*command, "-m", str(model), "--alias", "m", "--port", str(port), "-c", str(context),
            "-np", str(parallel), "-t", "1", "--metrics", "--no-webui", "--no-warmup"]  # fmt: skip
    proc = procs.start(name, argv, env=env)
    wait_http(proc, f"http://127.0.0.1:{port}/health", timeout=120)
    return proc, f"http://127.0.0.1:{port}"


def evaluated(root: str) -> tuple[int, int]:
    """(prompt tokens, of them taken from the cache) from llama.cpp's /metrics."""
    text = urllib.request.urlopen(root + "/metrics", timeout=10).read().decode()
    values = {}
    for line in text.splitlines():
        if line.startswith("llamacpp:prompt_tokens"):
            name, value = line.split()
            values[name] = int(float(value))
    return values.get("llamacpp:prompt_tokens_total", 0), values.get("llamacpp:prompt_tokens_cached_total", 0)


def start_gateway(procs: Processes, members: dict[str, str], route: str, extra: str = "") -> tuple[Proc, str]:
    config = Path(tempfile.mkdtemp(prefix="bench-routing-")) / "c.toml"
    table = '[[upstreams]]\nname = "{}"\nbase_url = "{}"\n{}\n'
    tables = "".join(table.format(name, url, extra) for name, url in members.items())
    config.write_text('discover = false\nstore = "none"\n' + tables + route)
    port = free_port()
    argv = [sys.executable, "-m", "codexgate.cli", "serve", "--config", str(config), "--port", str(port)]
    proc = procs.start("gateway", argv, env=clean_env())
    base = f"http://127.0.0.1:{port}"
    wait_http(proc, base + "/healthz")
    return proc, base


async def first_token(client: httpx.AsyncClient, body: dict[str, Any]) -> tuple[float, str]:
    """Seconds to the first text delta of a streamed response, and the whole answer."""
    started = time.perf_counter()
    first: float | None = None
    text: list[str] = []
    async with client.stream("POST", "/v1/responses", json=body) as response:
        if response.status_code != 200:
            raise RuntimeError(f"{response.status_code}: {(await response.aread()).decode()[:500]}")
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            if event["type"] == "response.output_text.delta":
                first = first if first is not None else time.perf_counter() - started
                text.append(event["delta"])
            elif event["type"] in ("response.failed", "response.incomplete") and not text:
                raise RuntimeError(f"the response ended {event['type']}: {event}")
    return (first if first is not None else time.perf_counter() - started), "".join(text)


async def turns(client: httpx.AsyncClient, args: argparse.Namespace) -> list[list[float]]:
    """Every conversation's turns, round by round (a round starts when every conversation has
    its previous answer, as people read an answer before the next question); within a round the
    requests arrive 0.1 s apart in an order shuffled each round (seeded: the same for every
    policy), as a team's turns do, so that round robin does not line up with the conversations
    by chance. Returns each round's first-token times."""
    count = args.conversations
    histories = [[{"role": "user", "content": prefix(i, args.prefix_tokens)}] for i in range(count)]
    order = random.Random(7)
    rounds = []

    async def one(number: int, turn: int, delay: float) -> float:
        await asyncio.sleep(delay)
        history = histories[number]
        question = f"Question {turn}: what does c{number}_f{turn} return for 2?"
        history.append({"role": "user", "content": question})
        body = {"model": "coder", "input": history, "stream": True, "max_output_tokens": args.answer_tokens,
                "prompt_cache_key": f"bench-conversation-{number}", "temperature": 0}  # fmt: skip
        seconds, text = await first_token(client, body)
        history.append({"role": "assistant", "content": text or "."})
        return seconds

    for turn in range(args.turns):
        arrivals = list(range(count))
        order.shuffle(arrivals)
        rounds.append(await asyncio.gather(*(one(n, turn, 0.1 * k) for k, n in enumerate(arrivals))))
    return rounds


def one_policy(procs: Processes, args: argparse.Namespace, policy: str) -> dict[str, Any]:
    context = args.parallel * (int(args.prefix_tokens * 1.3) + 300 * args.turns + 1024)  # per slot, with room
    servers = dict(start_llama(procs, f"llama-{i}", args.parallel, context) for i in (1, 2))
    roots = {f"s{i}": root for i, root in enumerate(servers.values(), 1)}
    route = '[[models]]\nname = "coder"\nupstreams = ["s1", "s2"]\nmodel = "m"\n'
    route += "sticky = true\n" if policy == "sticky" else 'sticky = false\nbalance = "round_robin"\n'
    capacity = f"max_concurrent = {args.parallel}\n"  # the slots, as docs/configuration.md advises
    gateway, base = start_gateway(procs, {n: r + "/v1" for n, r in roots.items()}, route, capacity)
    before = {n: evaluated(r) for n, r in roots.items()}

    async def run() -> list[list[float]]:
        async with httpx.AsyncClient(base_url=base, timeout=3600) as client:
            return await turns(client, args)

    started = time.monotonic()
    rounds = asyncio.run(run())
    wall = time.monotonic() - started
    after = {n: evaluated(r) for n, r in roots.items()}
    for proc in (gateway, *servers):
        procs.stop(proc)
    prompt = {n: (after[n][0] - before[n][0], after[n][1] - before[n][1]) for n in roots}
    return {"first": rounds[0], "later": [x for later in rounds[1:] for x in later], "prompt": prompt,
            "wall": wall}  # fmt: skip


def pct(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("nan")


def report_policies(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
    print(f"\n1. Sticky against round-robin: 2 llama.cpp servers (SmolLM2-135M, --parallel "
          f"{args.parallel}, 1 thread each), {args.conversations} conversations of {args.turns} turns, "
          f"~{args.prefix_tokens}-token prefixes, {args.answer_tokens}-token answers")  # fmt: skip
    print(f"{'':44}{'sticky':>14}{'round-robin':>14}{'ratio':>8}")
    rows = [("first token, later turns, p50 (s)", "later", 0.5),
            ("first token, later turns, p90 (s)", "later", 0.9),
            ("first token, first turns, p50 (s)", "first", 0.5)]  # fmt: skip
    for label, key, share in rows:
        sticky, rr = pct(results["sticky"][key], share), pct(results["round_robin"][key], share)
        print(f"{label:44}{sticky:14.2f}{rr:14.2f}{sticky / rr:8.2f}")
    for server in ("s1", "s2"):
        s, s_cached = results["sticky"]["prompt"][server]
        r, r_cached = results["round_robin"]["prompt"][server]
        print(f"{'prompt tokens evaluated, ' + server:44}{s:14d}{r:14d}{s / max(r, 1):8.2f}")
        print(f"{'  (and taken from its cache)':44}{s_cached:14d}{r_cached:14d}")
    s, r = results["sticky"]["wall"], results["round_robin"]["wall"]
    print(f"{'whole run (s)':44}{s:14.1f}{r:14.1f}{s / r:8.2f}")


def failover(procs: Processes, trials: int) -> None:
    """The extra first token of a request whose member is dead or hangs, over a live one's."""
    from tests.support.model_server import model_server

    results: dict[str, list[float]] = {"live": [], "dead": [], "hangs": []}
    with model_server("live") as live, model_server("hangs", "--hang") as hung:
        dead_url = f"http://127.0.0.1:{free_port()}/v1"
        for case, other in (("live", None), ("dead", dead_url), ("hangs", hung.url)):
            members = {"live": live.url, **({"other": other} if other else {})}
            names = list(members)
            route = f'[[models]]\nname = "coder"\nupstreams = {json.dumps(names)}\nmodel = "m"\n'
            # A conversation the other member is the first choice of (rendezvous, as the gateway ranks).
            key = next(k for k in (f"k{i}" for i in range(1000)) if _first(k, names) == names[-1])
            for _ in range(trials):
                gateway, base = start_gateway(procs, members, route, "first_byte_timeout = 2\n")
                results[case].append(asyncio.run(_ask_once(base, key)))
                procs.stop(gateway)
    live_p50 = statistics.median(results["live"])
    print(f"\n2. Failover cost: first token of one request, a fresh gateway each of {trials} trials "
          "(member stand-ins; the live one answers at once)")  # fmt: skip
    print(f"{'':52}{'p50 (ms)':>10}{'max (ms)':>10}{'extra p50 (ms)':>16}")
    cases = (("live", "the conversation's member is live"), ("dead", "its member is dead (refused)"),
             ("hangs", "its member hangs before headers (timeout 2 s)"))  # fmt: skip
    for case, label in cases:
        values = results[case]
        extra = (statistics.median(values) - live_p50) * 1000
        print(f"{label:52}{statistics.median(values) * 1000:10.1f}{max(values) * 1000:10.1f}{extra:16.1f}")


async def _ask_once(base: str, key: str) -> float:
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        body = {"model": "coder", "input": "hi", "stream": True, "prompt_cache_key": key}
        return (await first_token(client, body))[0]


def _first(key: str, names: list[str]) -> str:
    class Named:
        def __init__(self, name: str) -> None:
            self.name, self.load = name, 0

    return rendezvous(conversation_of(None, key), [Named(n) for n in names])[0].name  # as the face keys it


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="~1.5k-token prefixes, 4 conversations")
    parser.add_argument("--only", choices=("policies", "failover"))
    parser.add_argument("--conversations", type=int, default=8)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--prefix-tokens", type=int, default=6000)
    parser.add_argument("--answer-tokens", type=int, default=8)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args()
    if args.quick:
        args.prefix_tokens, args.conversations = 1500, 4
    with Processes() as procs:
        if args.only != "failover":
            results = {policy: one_policy(procs, args, policy) for policy in ("sticky", "round_robin")}
            report_policies(results, args)
        if args.only != "policies":
            failover(procs, args.trials)
    return 0


if __name__ == "__main__":
    sys.exit(main())
