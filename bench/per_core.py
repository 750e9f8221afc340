"""Per core: what one Codex turn costs a relay when the upstream is fast, and in a burst.

    uv run python bench/per_core.py [--quick] [--base-src DIR] [--peer NAME=COMMAND]
        [--profile [growing|distinct|short]] [--only NAMES]
        [--runs request,paced,growing,distinct,short,burst]

The shape bench/under_load.py does not show: an upstream that answers at once (a local model
with a short answer, a cached prefix), so that the relay's cost per request and per event is
all there is, and many sessions opening at once (a team starting work, CI fanning out). Each
relay runs alone on one core in its own long-lived process (the fake upstream and this load
generator share the other core), codexgate with its defaults (the SQLite store, metrics, the
live view, an access line per request). Every relay's process is up from the start, and the
relays take turns: each run is measured in rounds (ROUNDS; the burst BURST_ROUNDS), every
relay taking its turn in each round, each round starting with the next relay, so that a
machine that slows for a while slows every relay alike. The relays meet, in this order:

1. `request`, one request at a time: the turns of one growing Codex session (16 bodies of
   47-86 KB, the whole history again each turn) with a one-delta answer. The time from the
   last byte of the body sent (a raw socket) to the upstream having the relay's request, minus
   the same for the relay's request sent straight to the upstream (the bench/README's "added"),
   and the relay's CPU per request. Apart, in a fresh process each (bench/request_cpu.py), the
   CPU from the body given to the upstream request written, measured inside the relay (the
   Python ones: bare, head, base), on a busy core and after it idled (bench/request_cpu.py).
   `paced`: the same, one turn every PACE seconds (a person reading the answer, a quiet
   gateway): what a relay does between two turns of a session (a timer, a trim of its memory)
   shows in the next one, as its page faults.
2. `growing`: 128 closed-loop clients sending the turns of that one growing session, each
   answer 200 chunks written at once by the upstream: CPU per event and per stream, streams/s,
   the first token.
3. `distinct`: the same with 500 distinct ~50 KB Codex sessions (bench/under_load.py's), each
   request its session one turn further.
4. `short`: `distinct` with one-delta answers (a model that answers in a word, a tool call
   decided at once). Beside `distinct`, whose requests are the same but for their answers, it
   splits a stream's CPU into what a stream costs whatever its length (reading the request,
   opening the upstream request, the first and last events, the observers) and what each
   further event adds: `(distinct - short) / (their difference in events)` per event, the
   rest of `short`'s per stream fixed.
5. `burst`: the 500 distinct sessions opened at once (all 500 requests sent together), each
   answer one delta every 100 ms (30 deltas): the first token p50/p90/p99 (of every round's
   streams), when half the streams were answered (the median round) and the peak RSS (VmHWM,
   reset first, the highest round; "RSS before" is what the runs before left).

Relays as in bench/under_load.py: `bare` (bench/bare_relay.py, the floor), `head` (this tree),
`base` (`--base-src DIR`), and any `--peer NAME=COMMAND` with {port} and {upstream}, e.g. the
Rust codex-relay from PyPI (a binary wheel, unpacked under /tmp; nothing of it is in the repo):

    uv run python bench/per_core.py --base-src /tmp/base/src \\
        --peer "rust=RUST_LOG=warn exec /tmp/peer/codex-relay --port {port} --upstream {upstream}"

Every figure is also printed as a ratio to the bare relay's in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from client import RESPONSES, new_session, pct, stream_once  # noqa: E402
from compare import _Opened  # noqa: E402
from procs import (  # noqa: E402
    CPUS,
    ROOT,
    Proc,
    Processes,
    cpu_seconds,
    free_port,
    get_bytes,
    get_json,
    mem_status,
    minor_faults,
    reset_hwm,
    set_affinity,
    source_info,
    wait_http,
)
from under_load import CONCURRENCY, SESSIONS, RatioTable, Relay, Sessions, _pin, closed_loop, relays  # noqa: E402
from workload import AT_ONCE, Scenario, growing_session  # noqa: E402

MB = 1024 * 1024
FAST = Scenario("text", 200, 4, AT_ONCE)  # 200 deltas, written at once
BURST = Scenario("text", 30, 4, 100)  # one delta every 100 ms
ONE = Scenario("text", 1, 4, 0)  # the `request` run's answer
RUNS = ("request", "paced", "growing", "distinct", "short", "burst")
# Every relay takes its turn in each round (bench/README.md): the closed-loop runs and the
# requests one at a time in ROUNDS slices, the burst BURST_ROUNDS times.
ROUNDS = 4
PACE = 1.5  # seconds from one turn to the next in `paced`
PACED_TURNS = 12  # each relay's, in all
BURST_ROUNDS = 2


class Bodies:
    """What the runs send: the growing session's turns (for any scenario) and the distinct
    sessions, whose turns each relay counts apart (`sessions_of`): every relay meets the same
    requests, in whatever order the relays take turns."""

    def __init__(self) -> None:
        self.growing = growing_session(FAST)
        self._sessions = Sessions(SESSIONS, 50_000)
        self._of: dict[str, Sessions] = {}

    def turn(self, n: int, sc: Scenario) -> bytes:
        body = self.growing[n % len(self.growing)]
        return body.replace(FAST.model.encode(), sc.model.encode(), 1)

    def sessions_of(self, relay: Relay) -> Sessions:
        if relay.name not in self._of:
            self._of[relay.name] = self._sessions.fresh()
        return self._of[relay.name]


# -- request: one at a time ---------------------------------------------------------------------


def _post_timed(port: int, path: str, body: bytes, up_base: str) -> float:
    """Milliseconds from the body's last byte sent to the upstream having the request (the
    fake upstream notes when its last byte came in, on the same monotonic clock)."""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: text/event-stream\r\nAuthorization: Bearer bench\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(head + body)
        sent = time.monotonic()
        while sock.recv(65536):
            pass
    return (float(get_json(up_base + "/bench/last")["at"]) - sent) * 1e3


class _Requests:
    """A relay's `request` run, taken in rounds: the times and CPU of its requests so far."""

    def __init__(self) -> None:
        self.via: list[float] = []
        self.direct: list[float] = []
        self.cpu = 0.0
        self.faults = 0

    def result(self) -> dict[str, Any]:
        return {
            "added_p50": statistics.median(self.via) - statistics.median(self.direct),
            "added_p90": pct(self.via, 0.9) - pct(self.direct, 0.9),
            "cpu_per_request_us": self.cpu / len(self.via) * 1e6,
            "faults_per_request": self.faults / len(self.via),
        }


async def _request_run(
    relay: Relay, bodies: Bodies, up_base: str, turns: range, into: _Requests, pace: float = 0.0
) -> None:
    """The growing session's `turns` one at a time, each followed by the same upstream request
    sent directly, and `pace` seconds from one turn's start to the next; the relay's CPU is
    taken over its requests only."""
    assert relay.proc is not None
    port = int(relay.url.split(":")[2].split("/")[0])
    up_port = int(up_base.rsplit(":", 1)[1])
    started = 0.0
    for n in turns:
        if pace and started:
            await asyncio.sleep(max(0.0, started + pace - time.monotonic()))
        started = time.monotonic()
        c0, f0 = cpu_seconds(relay.proc.pid), minor_faults(relay.proc.pid)
        took = await asyncio.to_thread(_post_timed, port, "/v1/responses", bodies.turn(n, ONE), up_base)
        used = cpu_seconds(relay.proc.pid) - c0
        into.faults += minor_faults(relay.proc.pid) - f0
        chat = await asyncio.to_thread(get_bytes, up_base + "/bench/last-body")
        straight = await asyncio.to_thread(_post_timed, up_port, "/v1/chat/completions", chat, up_base)
        into.via.append(took)
        into.direct.append(straight)
        into.cpu += used


def _rotated(relays: list[Relay], number: int) -> list[Relay]:
    """The relays in the order they take round `number`: each round starts one further on, so
    that no relay always follows the same one."""
    shift = number % max(1, len(relays))
    return relays[shift:] + relays[:shift]


async def _in_process_rounds(relays: list[Relay], up_base: str, args: argparse.Namespace) -> None:
    """`in_process` for each Python relay, in ROUNDS rounds taken in turn (each round a fresh
    process of request_cpu.py with its share of the requests): each figure is the median of
    the rounds' medians."""
    rounds: dict[str, list[dict[str, Any]]] = {relay.name: [] for relay in relays}
    for r in range(ROUNDS):
        for relay in _rotated(relays, r):
            print(f"{relay.name}: request CPU in process, round {r + 1} of {ROUNDS} ...", flush=True)
            got = await asyncio.to_thread(
                in_process, relay.name, relay.env, up_base + "/v1", args.requests // ROUNDS
            )
            rounds[relay.name].append(got)
    for relay in relays:
        taken = [got for got in rounds[relay.name] if "error" not in got]
        if not taken:
            relay.out["in_process"] = rounds[relay.name][0]
            continue
        relay.out["in_process"] = {
            kind: {
                mark: statistics.median(got[kind][mark] for got in taken)
                if all(got[kind][mark] is not None for got in taken)
                else None
                for mark in ("written_us_p50", "opened_us_p50")
            }
            for kind in taken[0]
        }


def in_process(name: str, env: dict[str, str], up_v1: str, count: int) -> dict[str, Any]:
    """bench/request_cpu.py for one Python relay, in a fresh process on the relay's core."""
    argv = [sys.executable, str(BENCH / "request_cpu.py"), "bare" if name == "bare" else "codexgate", up_v1,
            "--requests", str(count), "--cpu", str(CPUS[-1])]  # fmt: skip
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, timeout=600, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        return {"error": done.stderr.decode(errors="replace")[-300:]}
    return orjson.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


# -- burst: all at once ------------------------------------------------------------------------


async def _burst(session: Any, relay: Relay, sessions: Sessions, upstream: Proc) -> dict[str, Any]:
    assert relay.proc is not None
    pid = relay.proc.pid
    await asyncio.sleep(1.0)
    before = mem_status(pid).get("VmRSS", 0)
    reset_hwm(pid)

    # The CPU the relay and the load generator (this process and the fake upstream, one core)
    # used until half the streams had their answer's head: when the generator's is about the
    # time that took, the first token p50 waited on it, whatever the relay.
    def used() -> tuple[float, float]:
        return cpu_seconds(pid), cpu_seconds(os.getpid()) + cpu_seconds(upstream.pid)

    at_half: list[float] = []

    def on_answer(answered: int) -> None:
        if answered == SESSIONS // 2:
            now = used()
            at_half.extend((now[0] - start[0], now[1] - start[1], time.perf_counter() - t0))

    opened = _Opened(SESSIONS, on_answer)  # no limit: every request is sent at once
    start, t0 = used(), time.perf_counter()
    results = await asyncio.gather(
        *(opened.stream(session, relay.url, sessions.next_body(i, BURST), RESPONSES) for i in range(SESSIONS))
    )
    status = mem_status(pid)
    first = [r.first_delta * 1e3 for r in results if r.ok]
    relay_cpu, load_cpu, half_wall = at_half or (float("nan"),) * 3
    return {
        "firsts": first,
        "half_ms": half_wall * 1e3,
        "half_relay_cpu_ms": relay_cpu * 1e3,
        "half_load_cpu_ms": load_cpu * 1e3,
        "rss_before": before,
        "peak": status.get("VmHWM", 0),
        "max_open": opened.max_open,
        "failed": sum(not r.ok for r in results),
        "error": next((r.error for r in results if not r.ok), ""),
    }


# -- the runs ----------------------------------------------------------------------------------


def _next_body(run: str, bodies: Bodies, relay: Relay) -> Any:
    if run == "growing":
        return lambda n: bodies.turn(n, FAST)
    sessions = bodies.sessions_of(relay)
    answer = ONE if run == "short" else FAST
    return lambda n: sessions.next_body(n % SESSIONS, answer)


def _pooled(slices: list[dict[str, Any]]) -> dict[str, Any]:
    """closed_loop's figures for its runs (a relay's slices) taken as one."""
    wall, cpu = sum(r["wall"] for r in slices), sum(r["cpu"] for r in slices)
    streams, events = sum(r["streams"] for r in slices), sum(r["events"] for r in slices)
    failed = sum(r["failed"] for r in slices)
    first = [f for r in slices for f in r["firsts"]]
    return {
        "streams": streams,
        "failed": failed,
        "error": next((r["error"] for r in slices if r["error"]), ""),
        "streams_per_s": (streams - failed) / wall,
        "us_per_event": cpu / events * 1e6 if events else float("nan"),
        "us_per_stream": cpu / streams * 1e6 if streams else float("nan"),
        "events_per_stream": events / max(1, streams),
        "cores": cpu / wall,
        "load_cores": sum(r["load"] for r in slices) / wall,
        "first_p50": pct(first, 0.5),
        "first_p90": pct(first, 0.9),
        "first_p99": pct(first, 0.99),
    }


def _pooled_bursts(bursts: list[dict[str, Any]]) -> dict[str, Any]:
    """A relay's bursts (one per round): the first tokens of all, the median of the rest,
    the highest peak."""
    first = [f for b in bursts for f in b["firsts"]]
    halves = ("half_ms", "half_relay_cpu_ms", "half_load_cpu_ms")
    return {
        **{key: statistics.median(b[key] for b in bursts) for key in halves},
        "first_p50": pct(first, 0.5),
        "first_p90": pct(first, 0.9),
        "first_p99": pct(first, 0.99),
        "rss_before": bursts[0]["rss_before"],
        "peak": max(b["peak"] for b in bursts),
        "max_open": max(b["max_open"] for b in bursts),
        "failed": sum(b["failed"] for b in bursts),
        "error": next((b["error"] for b in bursts if b["error"]), ""),
    }


async def _profile(
    session: Any, relay: Relay, bodies: Bodies, procs: Processes, upstream: Proc, args: argparse.Namespace
) -> str:
    """py-spy's top functions for `relay` under a separate run of the kind asked for."""
    assert relay.proc is not None
    out_file = Path(tempfile.gettempdir()) / f"per-core-pyspy-{os.getpid()}.txt"
    # --gil: only the thread running Python, not the store's writer and the resolver's pool,
    # which wait (and py-spy counts them as busy here).
    argv = ["uv", "run", "--no-sync", "--with", "py-spy", "py-spy", "record", "--pid", str(relay.proc.pid),
            "--rate", "250", "--duration", str(int(args.seconds)), "--format", "raw", "--nolineno", "--gil",
            "-o", str(out_file)]  # fmt: skip
    spy = procs.start("py-spy", argv, env=dict(os.environ))
    try:
        await closed_loop(session, relay, _next_body(args.profile, bodies, relay), args.seconds + 4, upstream)
    finally:
        deadline = time.monotonic() + 30
        while spy.alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        procs.stop(spy)
    from report import analyse_profile

    got = analyse_profile(out_file.read_text() if out_file.exists() else "")
    if not os.environ.get("PER_CORE_KEEP_PROFILE"):
        out_file.unlink(missing_ok=True)
    if "top_self" not in got:
        return f"profile: no samples ({got.get('error', '')})"
    lines = [f"py-spy, {relay.name}, {args.profile} at c={CONCURRENCY} ({got['samples']} samples):"]
    for title, key in (("time by area", "areas"), ("self", "top_self"), ("codexgate inclusive",
                       "codexgate_inclusive"), ("codexgate self", "codexgate_self")):  # fmt: skip
        lines.append(f"  {title}:")
        lines += [f"    {share:5.1f}%  {name}" for name, share in got[key][:14]]
    return "\n".join(lines)


async def _start(
    session: Any, relay: Relay, bodies: Bodies, procs: Processes, upstream: Proc, up_base: str
) -> None:
    """The relay's process, alone on its core, with its connections and code paths warm."""
    relay.start(procs, up_base + "/v1")
    _pin(relay, upstream)
    for i in range(32):
        got = await stream_once(session, relay.url, bodies.turn(i, FAST), RESPONSES)
        if not got.ok:
            raise RuntimeError(f"warm-up stream failed: {got.error}")


class _Turns:
    """The relays still measured, taking turns: in each round every one runs in turn
    (`_rotated`). Every relay's process is up throughout (the idle ones cost nothing): a
    machine that slows for a while slows every relay alike, where one relay measured after
    another could meet the slow spell alone."""

    def __init__(self, relays: list[Relay]) -> None:
        self.live = list(relays)

    async def round(self, number: int, rounds: int, what: str, run: Any) -> None:
        for relay in _rotated(self.live, number):
            print(f"{relay.name}: {what}, round {number + 1} of {rounds} ...", flush=True)
            try:
                await run(relay)
            except Exception as exc:  # reported; the other relays are still measured
                relay.out["error"] = f"{type(exc).__name__}: {exc}"
                self.live.remove(relay)


async def _runs(
    session: Any, relays: list[Relay], bodies: Bodies, upstream: Proc, up_base: str, args: argparse.Namespace
) -> None:
    turns = _Turns(relays)
    for run, count, pace in (("request", args.requests, 0.0), ("paced", PACED_TURNS, PACE)):
        if run not in args.runs:
            continue
        records = {relay.name: _Requests() for relay in relays}
        per_round = count // ROUNDS
        for r in range(ROUNDS):
            asked = range(8 + r * per_round, 8 + (r + 1) * per_round)  # the first 8 warmed up

            async def requests(
                relay: Relay, asked: range = asked, into: dict[str, _Requests] = records, pace: float = pace
            ) -> None:
                await _request_run(relay, bodies, up_base, asked, into[relay.name], pace)

            await turns.round(r, ROUNDS, run, requests)
        for relay in turns.live:
            relay.out[run] = records[relay.name].result()
    for run in ("growing", "distinct", "short"):
        if run in args.runs:
            await _closed_loop_rounds(run, session, turns, bodies, upstream, args.seconds / ROUNDS)
    if "burst" in args.runs:
        bursts: dict[str, list[dict[str, Any]]] = {relay.name: [] for relay in relays}

        async def burst(relay: Relay) -> None:
            bursts[relay.name].append(await _burst(session, relay, bodies.sessions_of(relay), upstream))

        for r in range(BURST_ROUNDS):
            await turns.round(r, BURST_ROUNDS, "burst", burst)
        for relay in turns.live:
            relay.out["burst"] = _pooled_bursts(bursts[relay.name])


async def _closed_loop_rounds(
    run: str, session: Any, turns: _Turns, bodies: Bodies, upstream: Proc, seconds: float
) -> None:
    slices: dict[str, list[dict[str, Any]]] = {relay.name: [] for relay in turns.live}

    async def one_slice(relay: Relay) -> None:
        got = await closed_loop(session, relay, _next_body(run, bodies, relay), seconds, upstream)
        slices[relay.name].append(got)

    for r in range(ROUNDS):
        await turns.round(r, ROUNDS, run, one_slice)
    for relay in turns.live:
        relay.out[run] = _pooled(slices[relay.name])


def _with_defaults(targets: list[Relay], home: str) -> None:
    """codexgate as it ships: the default store (SQLite, in a folder of its own per relay) and
    the default log level (an access line per request, into the relay's log file)."""
    for relay in targets:
        if relay.name in ("head", "base"):
            relay.env = {k: v for k, v in relay.env.items() if k != "CODEXGATE_STORE"}
            relay.env["XDG_DATA_HOME"] = tempfile.mkdtemp(prefix=f"{relay.name}-", dir=home)
            at = relay.argv.index("--log-level") if "--log-level" in relay.argv else -1
            if at >= 0:
                del relay.argv[at : at + 2]


async def measure(args: argparse.Namespace, home: str) -> tuple[list[Relay], str]:
    t0 = time.perf_counter()
    bodies = Bodies()
    print(f"bodies made in {time.perf_counter() - t0:.1f} s", flush=True)
    targets = relays(args)
    if args.only:
        targets = [t for t in targets if t.name in args.only.split(",")]
    _with_defaults(targets, home)
    profile = ""
    with Processes() as procs:
        up_port = free_port()
        upstream = procs.start(
            "upstream", [sys.executable, str(BENCH / "fake_upstream_server.py"), "--port", str(up_port)]
        )
        up_base = f"http://127.0.0.1:{up_port}"
        wait_http(upstream, up_base + "/bench/stats")
        if len(CPUS) > 1:  # the relays' core is theirs from the start (request_cpu.py's too)
            set_affinity(upstream.pid, {CPUS[0]})
            set_affinity(0, {CPUS[0]})
        if "request" in args.runs:
            await _in_process_rounds(
                [t for t in targets if t.name in ("bare", "head", "base")], up_base, args
            )
        async with new_session() as session:
            started: list[Relay] = []
            try:
                for relay in targets:
                    try:
                        await _start(session, relay, bodies, procs, upstream, up_base)
                        started.append(relay)
                    except Exception as exc:  # reported; the other relays are still measured
                        relay.out["error"] = f"{type(exc).__name__}: {exc}"
                await _runs(session, started, bodies, upstream, up_base, args)
                head = next((r for r in started if r.name == "head" and "error" not in r.out), None)
                if args.profile and head is not None:
                    profile = await _profile(session, head, bodies, procs, upstream, args)
            finally:
                for relay in targets:
                    if relay.proc is not None:
                        procs.stop(relay.proc)
    return targets, profile


# -- the report --------------------------------------------------------------------------------


def _split(out: dict[str, Any]) -> tuple[float, float]:
    """A stream's CPU as (per further event, fixed per stream), from the distinct and short runs
    (the same requests, answers of different lengths). Raises KeyError without both."""
    long, short = out["distinct"], out["short"]
    per_event = (long["us_per_stream"] - short["us_per_stream"]) / (
        long["events_per_stream"] - short["events_per_stream"]
    )
    return per_event, short["us_per_stream"] - per_event * short["events_per_stream"]


def report(targets: list[Relay], args: argparse.Namespace) -> list[str]:
    table = RatioTable(
        targets,
        f"per core: each relay alone on one core; {CONCURRENCY} closed-loop clients, {args.seconds:g} s "
        f"per run; answers of {FAST.chunks} deltas written at once",
        52,
    )
    lines, row = table.lines, table.row
    lines.append(f"request, one at a time ({args.requests} turns of the growing session, 47-86 KB):")
    row("  added to the upstream p50 (ms)", lambda o: o["request"]["added_p50"], 2)
    row("  added to the upstream p90 (ms)", lambda o: o["request"]["added_p90"], 2)
    row("  CPU per request, 1-delta answer (us)", lambda o: o["request"]["cpu_per_request_us"], 0)
    row("  page faults per request", lambda o: o["request"]["faults_per_request"], 1)
    lines.append(f"paced: the same, one turn every {PACE:g} s ({PACED_TURNS} turns):")
    row("  added to the upstream p50 (ms)", lambda o: o["paced"]["added_p50"], 2)
    row("  page faults per request", lambda o: o["paced"]["faults_per_request"], 1)
    for kind in ("growing", "distinct", "1MB"):
        for regime in ("busy", "idle"):
            for mark, what in (("written", "to written"), ("opened", "to transport")):
                key, at = f"{mark}_us_p50", f"{kind}_{regime}"
                label = f"  in process, {kind}, {regime}: {what} p50 (us)"
                row(label, lambda o, k=at, m=key: o["in_process"][k][m], 0)
    for run, what in (("growing", "one growing session"), ("distinct", f"{SESSIONS} distinct sessions")):
        lines.append(f"{run}: {what}, c={CONCURRENCY}:")
        row("  CPU per event (us)", lambda o, r=run: o[r]["us_per_event"], 2)
        row("  CPU per stream (us)", lambda o, r=run: o[r]["us_per_stream"], 0)
        row("  streams/s", lambda o, r=run: o[r]["streams_per_s"])
        row("  events per stream", lambda o, r=run: o[r]["events_per_stream"])
        row("  first token p50 (ms)", lambda o, r=run: o[r]["first_p50"])
        row("  first token p90 (ms)", lambda o, r=run: o[r]["first_p90"])
        row("  relay cores used", lambda o, r=run: o[r]["cores"], 2)
        row("  load generator's core used", lambda o, r=run: o[r]["load_cores"], 2)
        row("  failed streams", lambda o, r=run: o[r]["failed"], 0)
    lines.append(f"short: {SESSIONS} distinct sessions, one-delta answers, c={CONCURRENCY}:")
    row("  CPU per stream (us)", lambda o: o["short"]["us_per_stream"], 0)
    row("  streams/s", lambda o: o["short"]["streams_per_s"])
    row("  events per stream", lambda o: o["short"]["events_per_stream"])
    row("  first token p50 (ms)", lambda o: o["short"]["first_p50"])
    row("  relay cores used", lambda o: o["short"]["cores"], 2)
    row("  failed streams", lambda o: o["short"]["failed"], 0)
    lines.append("a stream's CPU split (distinct beside short):")
    row("  CPU per further event (us)", lambda o: _split(o)[0], 2)
    row("  CPU per stream whatever its length (us)", lambda o: _split(o)[1], 0)
    lines.append(f"burst: {SESSIONS} sessions opened at once, one delta every {BURST.delay_ms:g} ms:")
    row("  first token p50 (ms)", lambda o: o["burst"]["first_p50"])
    row("  first token p90 (ms)", lambda o: o["burst"]["first_p90"])
    row("  first token p99 (ms)", lambda o: o["burst"]["first_p99"])
    row("  half the streams answered after (ms)", lambda o: o["burst"]["half_ms"])
    row("    relay CPU until then (ms)", lambda o: o["burst"]["half_relay_cpu_ms"])
    row("    load generator's CPU until then (ms)", lambda o: o["burst"]["half_load_cpu_ms"])
    row("  RSS before (MB)", lambda o: o["burst"]["rss_before"] / MB)
    row("  peak RSS, VmHWM (MB)", lambda o: o["burst"]["peak"] / MB)
    row("  most streams open at once", lambda o: o["burst"]["max_open"], 0)
    row("  failed streams", lambda o: o["burst"]["failed"], 0)
    return table.errors(targets)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="8 s per run instead of 20, fewer requests")
    parser.add_argument("--base-src", help="also measure codexgate imported from this src/ folder")
    parser.add_argument("--peer", action="append", default=[], help="NAME=COMMAND, see the module docs")
    parser.add_argument(
        "--profile", nargs="?", const="growing", choices=("growing", "distinct", "short"),
        help="py-spy the head relay (via uv) in a separate run of this kind (default: growing)",
    )  # fmt: skip
    parser.add_argument("--only", help="comma-separated relay names to run (default: all)")
    parser.add_argument("--runs", default=",".join(RUNS), help=f"comma-separated, of {', '.join(RUNS)}")
    args = parser.parse_args()
    args.runs = set(args.runs.split(","))
    args.seconds = 8.0 if args.quick else 20.0
    args.requests = 100 if args.quick else 300
    if args.base_src:
        args.base_src = str(Path(args.base_src).resolve())
    t0 = time.perf_counter()
    import uvloop

    uvloop.install()
    with tempfile.TemporaryDirectory(prefix="per-core-") as home:
        targets, profile = asyncio.run(measure(args, home))
    print()
    print(
        f"codexgate per core ({time.perf_counter() - t0:.0f} s; {os.cpu_count()} cores; python "
        f"{sys.version.split()[0]}; load average {os.getloadavg()[0]:.2f} at the end)"
    )
    print(source_info())
    print("\n".join(report(targets, args)))
    if profile:
        print(profile)
    failed = sum(t.out.get(run, {}).get("failed", 0) for t in targets for run in RUNS)
    sys.exit(1 if failed or any("error" in t.out for t in targets) else 0)


if __name__ == "__main__":
    os.chdir(ROOT)
    main()
