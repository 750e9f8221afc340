"""What the gateway's state costs and saves, in one run (docs/state.md):

    uv run python bench/state.py            # full: about 1 minute on 2 cores
    uv run python bench/state.py --quick    # about 20 s, fewer requests in section 2

1. WebSocket vs HTTP for a 40-turn Codex tool loop. A Codex request of about 50 KB, then 39
   turns where the model calls `shell` and the client answers with a function_call_output of
   about 3 KB; the 40th answer is text. HTTP re-sends the whole history every turn (store:false,
   streamed SSE, as Codex does over HTTP); the WebSocket sends the full request once, then
   `previous_response_id` and only the new item (store:false: the connection remembers). Both
   against the same gateway, alternated, 3 runs each; the median is reported. The upstream must
   receive the same number of messages on the last turn both ways (the WebSocket history is
   complete).
2. store:true (SQLite) vs store:false: short requests, streamed and not, at concurrency 1, 16
   and 64, alternated in halves (false, true, true, false) so drift cancels; latency p50/p99,
   what the store adds, requests/s, and a sample of the stored responses read back.

The fake upstream (bench/fake_upstream_server.py) and `codexgate serve` (store in a fresh temp
folder) run in their own processes; the clients (aiohttp, websockets) in this one; unpinned.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import aiohttp  # noqa: E402
import orjson  # noqa: E402
import websockets  # noqa: E402
from client import new_session, pct  # noqa: E402
from procs import BENCH, ForeignLoad, Processes, clean_env, cpu_seconds, free_port, source_info, wait_http  # noqa: E402
from run import codexgate_argv  # noqa: E402
from workload import Scenario, _test_log, codex_request, codex_tools  # noqa: E402

TOOL = Scenario("tool", 20, 4, 0)  # 80 characters of text, then a shell call
TEXT = Scenario("text", 50, 4, 0)  # the loop's last answer
SHORT = Scenario("text", 10, 4, 0)  # section 2's answer
TERMINAL = ("response.completed", "response.failed", "response.incomplete", "error")
SSE_HEADERS = {"content-type": "application/json", "accept": "text/event-stream"}
HEAD2 = "mode|c|n each|p50 false|p50 true|+p50|p99 false|p99 true|+p99|req/s false|req/s true|true/false"
HEAD2 += "|CPU false|CPU true"
RESP_ID = re.compile(rb'"id":"(resp_[^"]+)"')


def ms(x: float) -> str:
    return f"{x * 1000:.1f}"


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def table(title: str, head: list[str], rows: list[list[str]], notes: list[str]) -> None:
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    print(f"\n{title}")
    for r in [head, *rows]:
        cells = [c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))]
        print("  " + "  ".join(cells))
    for n in notes:
        print(f"  {n}")


# -- 1. the tool loop ------------------------------------------------------------------------


def tool_output(call_id: str, turn: int) -> dict[str, Any]:
    log = _test_log(random.Random(turn), 3000)
    return {
        "type": "function_call_output",
        "call_id": call_id,
        "output": f"Exit code: 0\nWall time: 0.4 seconds\nOutput:\n{log}",
    }


def next_call(response: dict[str, Any]) -> str:
    calls = [item for item in response["output"] if item.get("type") == "function_call"]
    assert calls, f"turn answered without a function call: {[i.get('type') for i in response['output']]}"
    return str(calls[-1]["call_id"])


def sse_terminal(buf: bytes) -> dict[str, Any]:
    """The terminal event of an SSE body (the last event), decoded."""
    for block in reversed(buf.split(b"\n\n")):
        for line in block.split(b"\n"):
            if line.startswith(b"data: "):
                event = orjson.loads(line[6:])
                if event.get("type") in TERMINAL:
                    return event  # type: ignore[no-any-return]
    raise AssertionError(f"no terminal event in {buf[-300:]!r}")


def turn_body(first: dict[str, Any], turn: int, turns: int) -> dict[str, Any]:
    return {**first, "model": (TEXT if turn == turns else TOOL).model}


async def http_loop(
    session: aiohttp.ClientSession, base: str, first: dict[str, Any], turns: int
) -> dict[str, Any]:
    history = list(first["input"])
    out: dict[str, Any] = {"lat": [], "sent": 0, "completed": 0}
    t0 = time.perf_counter()
    for turn in range(1, turns + 1):
        body = orjson.dumps({**turn_body(first, turn, turns), "input": history})
        out["sent"] += len(body)
        began = time.perf_counter()
        async with session.post(base + "/v1/responses", data=body, headers=SSE_HEADERS) as resp:
            assert resp.status == 200, (resp.status, await resp.text())
            buf = bytearray()
            ended = 0.0
            async for chunk in resp.content.iter_any():
                buf += chunk
                if not ended and b"event: response.completed\n" in buf[-len(chunk) - 32 :]:
                    ended = time.perf_counter()
        event = sse_terminal(bytes(buf))
        out["lat"].append((ended or time.perf_counter()) - began)
        out["completed"] += event["type"] == "response.completed"
        if turn < turns:
            output = event["response"]["output"]
            history = history + output + [tool_output(next_call(event["response"]), turn)]
    out["wall"] = time.perf_counter() - t0
    return out


async def ws_loop(base: str, first: dict[str, Any], turns: int) -> dict[str, Any]:
    out: dict[str, Any] = {"lat": [], "sent": 0, "completed": 0}
    url = base.replace("http://", "ws://") + "/v1/responses"
    t0 = time.perf_counter()
    async with websockets.connect(url, compression=None, max_size=None) as ws:
        frame_body: dict[str, Any] = {"type": "response.create", **first}
        for turn in range(1, turns + 1):
            text = orjson.dumps({**frame_body, "model": turn_body(first, turn, turns)["model"]}).decode()
            out["sent"] += len(text.encode())
            began = time.perf_counter()
            await ws.send(text)
            while True:
                event = orjson.loads(await asyncio.wait_for(ws.recv(), 60))
                if event.get("type") in TERMINAL:
                    break
            out["lat"].append(time.perf_counter() - began)
            assert event["type"] == "response.completed", str(event)[:500]
            out["completed"] += 1
            response = event["response"]
            if turn < turns:
                new = [tool_output(next_call(response), turn)]
                frame_body = {
                    "type": "response.create",
                    **first,
                    "previous_response_id": response["id"],
                    "input": new,
                }
    out["wall"] = time.perf_counter() - t0
    return out


async def loop_case(base: str, up: str, gw_pid: int, args: argparse.Namespace) -> None:
    turns = args.turns
    body = codex_request(TOOL, history_bytes=45_000, seed=9)  # 51 KB
    first_size = len(orjson.dumps(body))
    runs: dict[str, list[dict[str, Any]]] = {"HTTP": [], "WebSocket": []}
    load = ForeignLoad()
    async with new_session(64) as session:

        async def one(kind: str, n: int) -> dict[str, Any]:
            first = {**body, "prompt_cache_key": str(uuid.uuid4())}  # a new conversation each run
            cpu0, own0 = cpu_seconds(gw_pid), time.process_time()
            r = await (http_loop(session, base, first, n) if kind == "HTTP" else ws_loop(base, first, n))
            r["cpu"], r["own"] = cpu_seconds(gw_pid) - cpu0, time.process_time() - own0
            raw = await (await session.get(up + "/bench/last-body")).read()
            last, r["up_bytes"] = orjson.loads(raw), len(raw)
            r["roles"] = [m.get("role") for m in last["messages"]]
            return r

        await one("HTTP", 4)  # warm-up, both ways
        await one("WebSocket", 4)
        for _ in range(args.repeats):
            for kind in ("HTTP", "WebSocket"):
                runs[kind].append(await one(kind, turns))
    foreign = load.cores()

    def med(kind: str, f: Any) -> float:
        return statistics.median(f(r) for r in runs[kind])

    stats = {
        "loop wall time (s)": (lambda r: r["wall"], lambda x: f"{x:.3f}"),
        "per-turn latency p50 (ms)": (lambda r: pct(r["lat"], 0.5), ms),
        "per-turn latency p99 (ms)": (lambda r: pct(r["lat"], 0.99), ms),
        "client bytes sent (KB)": (lambda r: r["sent"], lambda x: f"{x / 1024:.0f}"),
        "gateway CPU over the loop (s)": (lambda r: r["cpu"], lambda x: f"{x:.2f}"),
        "gateway CPU per turn (ms)": (lambda r: r["cpu"] / turns, ms),
        "client CPU over the loop (s)": (lambda r: r["own"], lambda x: f"{x:.2f}"),
    }
    rows = []
    for name, (f, fmt) in stats.items():
        h, w = med("HTTP", f), med("WebSocket", f)
        rows.append([name, fmt(h), fmt(w), ratio(w, h)])
    done = {k: "/".join(str(r["completed"]) for r in v) for k, v in runs.items()}
    rows.append(["completed responses, each run", done["HTTP"], done["WebSocket"], ""])
    counts = {k: "/".join(str(len(r["roles"])) for r in v) for k, v in runs.items()}
    same = all(r["roles"] == runs["HTTP"][0]["roles"] for v in runs.values() for r in v)
    sizes = {k: "/".join(f"{r['up_bytes'] / 1024:.0f}" for r in v) for k, v in runs.items()}
    rows.append(["upstream body on last turn (KB)", sizes["HTTP"], sizes["WebSocket"], ""])
    rows.append(
        ["upstream messages on last turn", counts["HTTP"], counts["WebSocket"], "same" if same else "DIFFER"]
    )
    raw = [
        f"{k}: wall "
        + " ".join(f"{r['wall']:.3f}" for r in v)
        + " s; gateway CPU "
        + " ".join(f"{r['cpu']:.2f}" for r in v)
        + " s"
        for k, v in runs.items()
    ]
    table(
        f"1. WebSocket vs HTTP, a {turns}-turn Codex tool loop (first request {first_size / 1024:.1f} KB, "
        f"~3 KB function_call_output per turn, store:false; median of {args.repeats} runs each, alternated)",
        ["", "HTTP", "WebSocket", "WS/HTTP"],
        rows,
        ["raw runs: " + x for x in raw]
        + [
            "bytes sent = request bodies / frame payloads (no HTTP headers, no WS framing); WS uncompressed",
            f"other processes used {foreign:.2f} cores on average during this section",
        ],
    )
    if not same or any(r["completed"] != turns for v in runs.values() for r in v):
        args.failed = True


# -- 2. the store ----------------------------------------------------------------------------


def short_body(stream: bool, store: bool) -> bytes:
    body = {
        "model": SHORT.model,
        "instructions": "You are Codex, a coding agent. Keep answers short.",
        "input": [{"type": "message", "role": "user", "content": "Which test fails, and why?"}],
        "tools": codex_tools()[:1],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "store": store,
        "stream": stream,
    }
    return orjson.dumps(body)


async def one_request(
    session: aiohttp.ClientSession, url: str, body: bytes, stream: bool
) -> tuple[float, bool, str]:
    began = time.perf_counter()
    try:
        async with session.post(url, data=body, headers=SSE_HEADERS) as resp:
            data = await resp.read()
            took = time.perf_counter() - began
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        return time.perf_counter() - began, False, type(exc).__name__
    marker = b"event: response.completed\n" if stream else b'"status":"completed"'
    found = RESP_ID.search(data)
    return took, resp.status == 200 and marker in data, found.group(1).decode() if found else ""


async def load(
    session: aiohttp.ClientSession, url: str, body: bytes, stream: bool, c: int, n: int
) -> dict[str, Any]:
    results: list[tuple[float, bool, str]] = []
    left = n

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            results.append(await one_request(session, url, body, stream))

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(c)))
    return {"wall": time.perf_counter() - t0, "results": results}


async def store_case(base: str, gw_pid: int, args: argparse.Namespace, store_file: Path) -> None:
    url = base + "/v1/responses"
    counts = {1: 200, 16: 600, 64: 800} if args.quick else {1: 600, 16: 1500, 64: 2000}
    rows = []
    ids: dict[bool, list[str]] = {False: [], True: []}
    failures = 0
    load_meter = ForeignLoad()
    async with new_session(256) as session:
        for stream in (False, True):
            await load(session, url, short_body(stream, False), stream, 8, 100)  # warm-up
            for c, n in counts.items():
                got: dict[bool, dict[str, Any]] = {
                    k: {"wall": 0.0, "cpu": 0.0, "results": []} for k in (False, True)
                }
                for store in (False, True, True, False):
                    cpu0 = cpu_seconds(gw_pid)
                    r = await load(session, url, short_body(stream, store), stream, c, n // 2)
                    got[store]["cpu"] += cpu_seconds(gw_pid) - cpu0
                    got[store]["wall"] += r["wall"]
                    got[store]["results"] += r["results"]
                cells = {}
                for store, g in got.items():
                    lat = [t for t, ok, _ in g["results"] if ok]
                    failures += len(g["results"]) - len(lat)
                    ids[store] += [i for _, ok, i in g["results"] if ok and i]
                    cells[store] = (pct(lat, 0.5), pct(lat, 0.99), len(lat) / g["wall"], g["cpu"] / n)
                (f50, f99, frps, fcpu), (t50, t99, trps, tcpu) = cells[False], cells[True]
                figures = [ms(f50), ms(t50), ms(t50 - f50), ms(f99), ms(t99), ms(t99 - f99)]
                figures += [f"{frps:.0f}", f"{trps:.0f}", ratio(trps, frps), ms(fcpu), ms(tcpu)]
                rows.append(["streamed" if stream else "JSON", str(c), str(n), *figures])
        rng = random.Random(1)
        sample_true = rng.sample(ids[True], min(50, len(ids[True])))
        sample_false = rng.sample(ids[False], min(10, len(ids[False])))
        found_true = [(await session.get(f"{url}/{i}")).status for i in sample_true]
        found_false = [(await session.get(f"{url}/{i}")).status for i in sample_false]
    foreign = load_meter.cores()
    size = sum(p.stat().st_size for p in store_file.parent.glob(store_file.name + "*"))
    table(
        "2. store:true (SQLite) vs store:false, short requests (body "
        f"{len(short_body(False, True)) / 1024:.1f} KB, a {SHORT.chunks * SHORT.chars}-character answer); "
        "latency in ms, to the end of the JSON body / the terminal event; CPU = gateway CPU ms per request",
        HEAD2.split("|"),
        rows,
        [
            f"stored: {found_true.count(200)}/{len(sample_true)} sampled store:true responses read back "
            "(GET 200); "
            f"{found_false.count(200)}/{len(sample_false)} store:false ones found (expect 0)",
            f"store files {size / 1e6:.1f} MB; failed requests: {failures}; "
            f"other processes used {foreign:.2f} cores on average during this section",
        ],
    )
    if failures or found_true.count(200) != len(sample_true) or found_false.count(200):
        args.failed = True


# -- main ------------------------------------------------------------------------------------


async def main_async(args: argparse.Namespace) -> None:
    with Processes() as procs, tempfile.TemporaryDirectory(prefix="bench-state-") as tmp:
        up_port = free_port()
        upstream = procs.start(
            "upstream", [sys.executable, str(BENCH / "fake_upstream_server.py"), "--port", str(up_port)]
        )
        up = f"http://127.0.0.1:{up_port}"
        wait_http(upstream, up + "/bench/stats")
        store_file = Path(tmp, "store.sqlite3")
        env = {**clean_env(), "CODEXGATE_STORE": "sqlite", "CODEXGATE_STORE_PATH": str(store_file)}
        gw_port = free_port()
        gateway = procs.start("gateway", codexgate_argv(gw_port, up + "/v1"), env=env)
        base = f"http://127.0.0.1:{gw_port}"
        wait_http(gateway, base + "/healthz")
        began = time.monotonic()
        print(
            f"codexgate state benchmark ({'quick' if args.quick else 'full'}; {os.cpu_count()} cores; "
            f"python {sys.version.split()[0]}; load average {os.getloadavg()[0]:.2f} at start)"
        )
        print(source_info())
        print(
            "`codexgate serve` (store: SQLite in a temp folder) and the fake upstream in their own "
            "processes; clients in this one; unpinned."
        )
        if not args.no_loop:
            await loop_case(base, up, gateway.pid, args)
        if not args.no_store:
            await store_case(base, gateway.pid, args, store_file)
        if not gateway.alive():
            args.failed = True
            print(f"gateway died:\n{gateway.log_tail()}")
        print(
            f"\n{time.monotonic() - began:.0f} s; load average {os.getloadavg()[0]:.2f} at the end"
            + ("; FAILED: see above" if args.failed else "")
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests in section 2")
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-loop", action="store_true", help="skip section 1")
    parser.add_argument("--no-store", action="store_true", help="skip section 2")
    args = parser.parse_args()
    args.failed = False
    asyncio.run(main_async(args))
    sys.exit(1 if args.failed else 0)


if __name__ == "__main__":
    main()
