"""The Codex backend against the bare app-server, side by side in one run: what codexgate adds
to a Codex turn, and how many turns run at once.

    uv run python bench/codex_backend.py               # ~2 minutes
    uv run python bench/codex_backend.py --turns 10 --concurrency 1,4

The same `codex app-server` build (the tests' CODEX_VERSION) answers both ways, its model
provider a `codexgate serve` over the fake chat upstream (bench/fake_upstream_server.py; a
50-delta text answer):
- bare: this process drives its own app-server over stdio (backends/codex/app_server.py): a thread, a
  turn, until `turn/completed`;
- through codexgate: `codexgate serve` with an upstream of kind `codex`, asked over HTTP
  (`POST /v1/chat/completions`, not streamed), which does the same with its own app-server.

First turns (a new thread each) and follow-up turns (the same conversation, re-sent whole by the
client, continued in its thread) are timed alternately, bare then gateway. Then C
conversations at once, for each C: every turn must complete; the wall time and turns/s are
reported. Needs the Codex CLI (`scripts/install-codex.sh` puts it in .cache/codex/<version>).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "src"), str(ROOT / "bench")]

import httpx  # noqa: E402
from procs import BENCH, Processes, clean_env, free_port, wait_http  # noqa: E402
from run import codexgate_argv  # noqa: E402
from tests.e2e.codex_cli import CODEX_VERSION  # noqa: E402

from codexgate.backends.codex.app_server import AppServer, ServerRequestRefused  # noqa: E402
from codexgate.commands.codex_setup.catalog import ModelSpec, write_codex_setup  # noqa: E402
from codexgate.wire import app_server as wire  # noqa: E402

MODEL = "agent"
SCENARIO = "bench:text:50:4:0:0"  # the fake upstream's answer: 50 deltas of 4 characters


def codex_bin() -> str:
    cached = ROOT / ".cache" / "codex" / CODEX_VERSION / "node_modules" / ".bin" / "codex"
    if not cached.exists():
        sys.exit("bench: the Codex CLI is not installed; run scripts/install-codex.sh")
    return str(cached)


async def refuse(request: wire.ServerRequest) -> Any:
    raise ServerRequestRefused("the bench answers nothing")


class Bare:
    """Turns driven directly over stdio, as a client of the app-server would."""

    def __init__(self, home: Path, work: Path) -> None:
        env = {**clean_env(), "CODEX_HOME": str(home)}
        self.server = AppServer([codex_bin(), "app-server"], env=env, cwd=work, client_name="bench",
                                on_server_request=refuse)  # fmt: skip
        self.work = work

    async def new_thread(self) -> str:
        params = {"model": MODEL, "cwd": str(self.work), "approvalPolicy": "never", "sandbox": "read-only",
                  "ephemeral": True}  # fmt: skip
        result = await self.server.request(wire.THREAD_START, params)
        return str(result["thread"]["id"])

    async def turn(self, thread_id: str, text: str) -> None:
        async with self.server.subscribe(thread_id) as events:
            params = {"threadId": thread_id, "input": [{"type": "text", "text": text, "text_elements": []}]}
            await self.server.request(wire.TURN_START, params)
            async for note in events:
                if note.method == wire.TURN_COMPLETED:
                    status = note.params["turn"]["status"]
                    assert status == "completed", note.params
                    return


class Gateway:
    """Turns asked of `codexgate serve` (kind codex) over HTTP, as a chat client would."""

    def __init__(self, base: str) -> None:
        self.http = httpx.AsyncClient(base_url=base + "/v1", timeout=120)

    async def turn(self, messages: list[dict[str, Any]]) -> str:
        response = await self.http.post("/chat/completions", json={"model": MODEL, "messages": messages})
        assert response.status_code == 200, response.text
        content: str = response.json()["choices"][0]["message"]["content"]
        return content


def ms(values: list[float]) -> str:
    values = sorted(values)
    p90 = values[min(len(values) - 1, int(len(values) * 0.9))]
    return f"p50 {statistics.median(values) * 1000:7.1f} ms   p90 {p90 * 1000:7.1f} ms"


async def timed(work: Any) -> float:
    began = time.perf_counter()
    await work
    return time.perf_counter() - began


async def run(args: argparse.Namespace) -> None:
    with Processes() as procs, tempfile.TemporaryDirectory(prefix="bench-codex-") as tmp:
        home, work = Path(tmp, "home"), Path(tmp, "work")
        work.mkdir()
        up_port = free_port()
        upstream = procs.start("upstream", [sys.executable, str(BENCH / "fake_upstream_server.py"),
                                            "--port", str(up_port)])  # fmt: skip
        wait_http(upstream, f"http://127.0.0.1:{up_port}/bench/stats")
        inner_config = Path(tmp, "inner.toml")
        inner_config.write_text(f'[[models]]\nname = "{MODEL}"\nmodel = "{SCENARIO}"\n')
        inner_port = free_port()
        inner = procs.start("provider", codexgate_argv(inner_port, f"http://127.0.0.1:{up_port}/v1")
                            + ["--config", str(inner_config)])  # fmt: skip
        inner_url = f"http://127.0.0.1:{inner_port}"
        wait_http(inner, inner_url + "/healthz")
        setup = write_codex_setup(home, inner_url, [ModelSpec(slug=MODEL, context_window=32768)],
                                  codex_home=home, base_instructions="Be brief.")  # fmt: skip
        (home / "config.toml").write_text(setup.config_path.read_text())
        outer_config = Path(tmp, "outer.toml")
        outer_config.write_text(
            f'[[upstreams]]\nname = "codex"\nkind = "codex"\ncodex_bin = {json.dumps(codex_bin())}\n'
            f"codex_home = {json.dumps(str(home))}\nworkdir = {json.dumps(str(work))}\n"
        )
        outer_port = free_port()
        head = codexgate_argv(outer_port, "http://unused.invalid/v1")
        head = head[: head.index("--upstream")] + head[head.index("--upstream") + 2 :]
        outer = procs.start("gateway", head + ["--config", str(outer_config)])
        gateway_url = f"http://127.0.0.1:{outer_port}"
        wait_http(outer, gateway_url + "/healthz", timeout=60)
        bare, gateway = Bare(home, work), Gateway(gateway_url)
        try:
            await bare.server.start()
            await gateway.turn([{"role": "user", "content": "warm up"}])
            await bare.turn(await bare.new_thread(), "warm up")

            first_bare, first_gw, next_bare, next_gw = [], [], [], []
            for n in range(args.turns):
                began = time.perf_counter()  # a first turn is a new thread, as in the gateway
                thread = await bare.new_thread()
                await bare.turn(thread, f"first {n}")
                first_bare.append(time.perf_counter() - began)
                messages: list[dict[str, Any]] = [{"role": "user", "content": f"first {n}"}]
                began = time.perf_counter()
                answer = await gateway.turn(messages)
                first_gw.append(time.perf_counter() - began)
                next_bare.append(await timed(bare.turn(thread, f"next {n}")))
                messages.append({"role": "assistant", "content": answer})
                messages.append({"role": "user", "content": f"next {n}"})
                next_gw.append(await timed(gateway.turn(messages)))
            print(f"\nOne turn at a time, {args.turns} of each (wall time, request to completed turn)")
            print(f"  first turn  bare     {ms(first_bare)}")
            print(f"  first turn  codexgate {ms(first_gw)}")
            print(f"  next turn   bare     {ms(next_bare)}")
            print(f"  next turn   codexgate {ms(next_gw)}")
            added_first = statistics.median(first_gw) - statistics.median(first_bare)
            added_next = statistics.median(next_gw) - statistics.median(next_bare)
            print(f"  added by codexgate (p50): first {added_first * 1000:.1f} ms, "
                  f"next {added_next * 1000:.1f} ms")  # fmt: skip

            print("\nConversations at once (one first turn each; every one must complete)")
            for c in args.concurrency:

                async def bare_first(i: int) -> None:
                    await bare.turn(await bare.new_thread(), f"c{i}")

                bare_wall = await timed(asyncio.gather(*(bare_first(i) for i in range(c))))
                asks = [[{"role": "user", "content": f"c{c}-{i}"}] for i in range(c)]
                gw_wall = await timed(asyncio.gather(*(gateway.turn(ask) for ask in asks)))
                print(f"  c={c:3d}  bare {bare_wall:6.2f} s ({c / bare_wall:6.1f} turns/s)   "
                      f"codexgate {gw_wall:6.2f} s ({c / gw_wall:6.1f} turns/s)")  # fmt: skip
        finally:
            await gateway.http.aclose()
            await bare.server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=30)
    levels = [1, 4, 8, 16, 32]
    parser.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=levels)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
