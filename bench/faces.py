"""The Messages face beside the Responses face: one gateway, one upstream stream, one run.

    uv run python bench/faces.py [--quick] [--runs NAMES] [--profile RUN] [--json FILE] [--src DIR]

One `codexgate serve` process with its defaults (the SQLite store, metrics, the live view, an
access line per request) in front of the fake upstream, alone on one core (the fake upstream
and this load generator share the other). Each request is sent to both faces in the same
words: a Responses body as Codex sends it (`/v1/responses`, its session in `prompt_cache_key`)
and a Messages body as Claude Code sends it (`/v1/messages`, its session in the
`X-Claude-Code-Session-Id` header and `metadata.user_id`), with the same system text, tools,
history and max tokens (bench/face_workload.py), so the upstream gets the same chat request and
writes the same stream back. The faces take turns round by round, each round starting with the
other one, so that a machine that slows for a while slows both alike. The runs:

0. `cpu`, in process (bench/face_request_cpu.py, in a fresh process on the gateway's core):
   each face's CPU from the body given to the app to the upstream request written and to its
   first text delta handed over, one request at a time, the faces alternated request by
   request, medians: what a face adds to the first token, measured as CPU, which the time at
   c=1 on a shared machine cannot resolve to 0.2 ms. `busy` (each request right after the one
   before) and `idle` (after the core idled 2 ms).
1. `latency`, one request at a time (c=1), the turns of one growing session (44-90 KB), each
   face's request followed by the chat body it sent upstream sent straight to the upstream:
   per request, the face's time to its first text delta minus the upstream's own ("first token
   added"), p50 and p90; the gateway's CPU per request. Two streams: 200 deltas written at once
   (`fast`), and 20 deltas 10 ms apart (`paced`).
2. Closed loops of 64 and 128 clients, each stream's CPU from /proc/<pid>/stat over the run
   divided by the events the clients read (CPU per event), per stream, events/s and streams/s,
   the first token: `fast` (200 deltas written at once) and `paced` (100 deltas, one every
   10 ms), each with `one` session (the growing session's turns) and `distinct` sessions (500
   conversations of ~50 KB, each request its session one turn further, from the first turn on
   both faces in each run).
3. `burst`: 500 new sessions opened at once (every request sent together), each answer a delta
   every 100 ms (30 deltas): the first token p50/p90 of each face's streams, in two rounds.

The Messages face sends fewer events per answer (205 against 208 for 200 deltas: it has no
`in_progress`, part and `.done` events but has its block's start and stop), so the CPU per
stream is printed beside the CPU per event. The table gives each figure for both faces, their
ratio, and for the first token added their difference; the issue's targets (CPU per event of
the Messages face within 1.15x of the Responses face's, first token added within 0.2 ms of it)
are checked on every row that has them.

`--runs` narrows the run (names or their prefixes: `cpu`, `latency`, `fast`, `paced-distinct`,
`fast-one-c128`, `burst`); `--profile RUN` (a closed-loop run's name, e.g. `fast-distinct-c128`)
then runs py-spy on the gateway for each face in turn under one more slice of that run and
prints the top functions (`uv run --dev --with py-spy ...`, as bench/per_core.py does).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from client import DIRECT, GATEWAY, MESSAGES, StreamResult, new_session, pct, stream_once  # noqa: E402
from compare import _gateway_argv  # noqa: E402
from face_workload import FACES, RESPONSES, Sessions, growing_session  # noqa: E402
from procs import (  # noqa: E402
    CPUS,
    ROOT,
    ForeignLoad,
    Proc,
    Processes,
    clean_env,
    cpu_seconds,
    free_port,
    get_bytes,
    set_affinity,
    source_info,
    wait_http,
)
from workload import AT_ONCE, Scenario  # noqa: E402

FAST = Scenario("text", 200, 4, AT_ONCE)
PACED = Scenario("text", 100, 4, 10)
LATENCY_PACED = Scenario("text", 20, 4, 10)
BURST = Scenario("text", 30, 4, 100)
SESSIONS = 500
_GROWING_MODEL = "__bench_growing__"
# Targets of issue 40, point 7.
CPU_RATIO_TARGET = 1.15
FIRST_TOKEN_TARGET_MS = 0.2


@dataclass(frozen=True)
class ClosedRun:
    name: str
    scenario: Scenario
    sessions: str  # "one" or "distinct"
    concurrency: int


CLOSED = [
    ClosedRun(f"{stream}-{sessions}-c{c}", sc, sessions, c)
    for stream, sc in (("fast", FAST), ("paced", PACED))
    for sessions in ("one", "distinct")
    for c in (64, 128)
]


# Profiled only (--profile): one stream at a time, as in `latency` (without its direct requests).
PROFILED = [
    *CLOSED,
    ClosedRun("fast-one-c1", FAST, "one", 1),
    ClosedRun("paced-one-c1", LATENCY_PACED, "one", 1),
]


@dataclass
class Face:
    name: str  # RESPONSES or MESSAGES
    url: str
    kind: str  # the client's way of reading its stream
    out: dict[str, Any] = field(default_factory=dict)


def _rotated(faces: list[Face], number: int) -> list[Face]:
    return faces[number % 2 :] + faces[: number % 2]


class Bodies:
    def __init__(self) -> None:
        self.growing = growing_session(_GROWING_MODEL)
        self.sessions = Sessions(SESSIONS, 50_000)

    def turn(self, face: str, n: int, sc: Scenario) -> tuple[bytes, dict[str, str]]:
        """The growing session's `n`-th turn (modulo its length) for `face`."""
        from face_workload import headers_for

        bodies = self.growing[face]
        body = bodies[n % len(bodies)].replace(_GROWING_MODEL.encode(), sc.model.encode(), 1)
        return body, headers_for(face, "bench-one-session")


# -- latency: one request at a time ------------------------------------------------------------


async def _latency(
    session: Any, faces: list[Face], bodies: Bodies, gateway: Proc, up_base: str, sc: Scenario, count: int
) -> dict[str, dict[str, Any]]:
    added: dict[str, list[float]] = {f.name: [] for f in faces}
    firsts: dict[str, list[float]] = {f.name: [] for f in faces}
    directs: dict[str, list[float]] = {f.name: [] for f in faces}
    cpu = dict.fromkeys(added, 0.0)
    failed = dict.fromkeys(added, 0)
    foreign = ForeignLoad()
    errors = dict.fromkeys(added, "")
    for n in range(count):
        for face in _rotated(faces, n):
            body, headers = bodies.turn(face.name, n, sc)
            c0 = cpu_ns(gateway.pid)
            got = await stream_once(session, face.url, body, face.kind, headers=headers)
            cpu[face.name] += cpu_ns(gateway.pid) - c0
            chat = await asyncio.to_thread(get_bytes, up_base + "/bench/last-body")
            straight = await stream_once(session, up_base + "/v1/chat/completions", chat, DIRECT)
            if not (got.ok and straight.ok):
                failed[face.name] += 1
                errors[face.name] = errors[face.name] or got.error or f"direct: {straight.error}"
                continue
            added[face.name].append((got.first_delta - straight.first_delta) * 1e3)
            firsts[face.name].append(got.first_delta * 1e3)
            directs[face.name].append(straight.first_delta * 1e3)
    foreign_cores = foreign.cores()
    low, high = _interval(added[RESPONSES], added[MESSAGES])
    return {
        name: {
            "added": added[name],
            "added_p50_diff_low": low,
            "added_p50_diff_high": high,
            "added_p50": pct(added[name], 0.5),
            "added_p90": pct(added[name], 0.9),
            "first_p50": pct(firsts[name], 0.5),
            "direct_p50": pct(directs[name], 0.5),
            "cpu_per_request_us": cpu[name] / max(1, count) / 1e3,
            "foreign_cores": foreign_cores,
            "failed": failed[name],
            "error": errors[name],
        }
        for name in added
    }


def cpu_ns(pid: int) -> int:
    """Nanoseconds the process's threads ran (/proc/PID/task/*/schedstat): /proc/PID/stat counts
    in 10 ms ticks, too coarse for one request."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended
    return total


def _interval(responses: list[float], messages: list[float], rounds: int = 400) -> tuple[float, float]:
    """The 5th and 95th percentiles of (p50 of `messages` - p50 of `responses`) over bootstrap
    resamples: how far the difference of the two medians can be trusted on this machine."""
    if not responses or not messages:
        return float("nan"), float("nan")
    rng = random.Random(1)
    diffs = sorted(
        statistics.median(rng.choices(messages, k=len(messages)))
        - statistics.median(rng.choices(responses, k=len(responses)))
        for _ in range(rounds)
    )
    return diffs[int(rounds * 0.05)], diffs[int(rounds * 0.95)]


# -- closed loops ------------------------------------------------------------------------------


async def closed_loop(
    session: Any,
    face: Face,
    next_request: Callable[[int], tuple[bytes, dict[str, str]]],
    concurrency: int,
    seconds: float,
    gateway: Proc,
    upstream: Proc,
) -> dict[str, Any]:
    """`concurrency` clients, each sending its next request when its stream ended, for
    `seconds` (streams in flight then finish): the totals, for runs taken in slices."""
    results: list[StreamResult] = []
    order = iter(range(10**9))
    deadline = time.perf_counter() + seconds

    async def client() -> None:
        while time.perf_counter() < deadline:
            body, headers = next_request(next(order))
            results.append(await stream_once(session, face.url, body, face.kind, headers=headers))

    def load() -> float:
        return cpu_seconds(os.getpid()) + cpu_seconds(upstream.pid)

    cpu0, load0, t0, foreign = cpu_seconds(gateway.pid), load(), time.perf_counter(), ForeignLoad()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    wall = time.perf_counter() - t0
    return {
        "wall": wall,
        "foreign": foreign.cores() * wall,
        "cpu": cpu_seconds(gateway.pid) - cpu0,
        "load": load() - load0,
        "events": sum(r.events for r in results),
        "streams": len(results),
        "failed": sum(not r.ok for r in results),
        "error": next((r.error for r in results if not r.ok), ""),
        "firsts": [r.first_delta * 1e3 for r in results if r.ok],
    }


def _pooled(slices: list[dict[str, Any]]) -> dict[str, Any]:
    wall, cpu = sum(s["wall"] for s in slices), sum(s["cpu"] for s in slices)
    streams, events = sum(s["streams"] for s in slices), sum(s["events"] for s in slices)
    failed = sum(s["failed"] for s in slices)
    firsts = [f for s in slices for f in s["firsts"]]
    return {
        "us_per_event": cpu / events * 1e6 if events else float("nan"),
        "us_per_stream": cpu / streams * 1e6 if streams else float("nan"),
        "events_per_stream": events / max(1, streams),
        "events_per_s": events / wall,
        "streams_per_s": (streams - failed) / wall,
        "cores": cpu / wall,
        "load_cores": sum(s["load"] for s in slices) / wall,
        "foreign_cores": sum(s["foreign"] for s in slices) / wall,
        "first_p50": pct(firsts, 0.5),
        "first_p90": pct(firsts, 0.9),
        "streams": streams,
        "failed": failed,
        "error": next((s["error"] for s in slices if s["error"]), ""),
    }


def _requests_of(run: ClosedRun, bodies: Bodies, face: Face) -> Callable[[int], tuple[bytes, dict[str, str]]]:
    if run.sessions == "one":
        return lambda n: bodies.turn(face.name, n, run.scenario)
    sessions = bodies.sessions
    return lambda n: sessions.next_request(face.name, n % SESSIONS, run.scenario.model)


async def _closed_rounds(
    session: Any,
    faces: list[Face],
    run: ClosedRun,
    bodies: Bodies,
    gateway: Proc,
    upstream: Proc,
    rounds: int,
    seconds: float,
) -> None:
    for face in faces:  # every run starts the distinct sessions at their first turn, on both faces
        bodies.sessions.turns[face.name] = [0] * SESSIONS
    slices: dict[str, list[dict[str, Any]]] = {f.name: [] for f in faces}
    for r in range(rounds):
        for face in _rotated(faces, r):
            print(f"{run.name}: {face.name}, round {r + 1} of {rounds} ...", flush=True)
            got = await closed_loop(
                session, face, _requests_of(run, bodies, face), run.concurrency, seconds, gateway, upstream
            )
            slices[face.name].append(got)
    for face in faces:
        face.out[run.name] = _pooled(slices[face.name])


# -- burst: new sessions all at once -----------------------------------------------------------


async def _burst(session: Any, face: Face, sessions: Sessions) -> dict[str, Any]:
    await asyncio.sleep(1.0)  # the streams before have ended, their connections are idle
    requests = [sessions.next_request(face.name, i, BURST.model) for i in range(SESSIONS)]
    t0 = time.perf_counter()
    results = await asyncio.gather(
        *(stream_once(session, face.url, body, face.kind, headers=headers) for body, headers in requests)
    )
    return {
        "wall": time.perf_counter() - t0,
        "firsts": [r.first_delta * 1e3 for r in results if r.ok],
        "failed": sum(not r.ok for r in results),
        "error": next((r.error for r in results if not r.ok), ""),
    }


# -- cpu: in process ---------------------------------------------------------------------------


def _in_process(up_v1: str, requests: int, processes: int) -> dict[str, Any]:
    """bench/face_request_cpu.py in fresh processes on the gateway's core, one after another:
    each figure the median of the processes' medians."""
    import subprocess

    got: list[dict[str, Any]] = []
    for _ in range(processes):
        argv = [sys.executable, str(BENCH / "face_request_cpu.py"), up_v1, "--requests", str(requests),
                "--cpu", str(CPUS[-1])]  # fmt: skip
        done = subprocess.run(
            argv, cwd=ROOT, env=clean_env(), capture_output=True, timeout=900, stdin=subprocess.DEVNULL
        )
        if done.returncode != 0:
            return {"error": done.stderr.decode(errors="replace")[-300:]}
        got.append(orjson.loads(done.stdout.strip().splitlines()[-1]))
    return {
        key: {mark: statistics.median(one[key][mark] for one in got) for mark in got[0][key]}
        for key in got[0]
    }


# -- the profile -------------------------------------------------------------------------------


async def _profile(
    session: Any, faces: list[Face], bodies: Bodies, procs: Processes, gateway: Proc, upstream: Proc,
    run: ClosedRun, seconds: float,
) -> str:  # fmt: skip
    from report import analyse_profile

    lines: list[str] = []
    for face in faces:
        out_file = Path(tempfile.gettempdir()) / f"faces-pyspy-{os.getpid()}-{face.name}.txt"
        argv = ["uv", "run", "--no-sync", "--with", "py-spy", "py-spy", "record", "--pid", str(gateway.pid),
                "--rate", "250", "--duration", str(int(seconds)), "--format", "raw", "--nolineno", "--gil",
                "-o", str(out_file)]  # fmt: skip
        print(f"profile: {run.name}, {face.name} ...", flush=True)
        spy = procs.start("py-spy", argv, env=dict(os.environ))
        try:
            ran = await closed_loop(
                session,
                face,
                _requests_of(run, bodies, face),
                run.concurrency,
                seconds + 4,
                gateway,
                upstream,
            )
        finally:
            deadline = time.monotonic() + 30
            while spy.alive() and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
            procs.stop(spy)
        got = analyse_profile(out_file.read_text() if out_file.exists() else "")
        if not os.environ.get("FACES_KEEP_PROFILE"):
            out_file.unlink(missing_ok=True)
        if "top_self" not in got:
            lines.append(f"profile of {face.name}: no samples ({got.get('error', '')})")
            continue
        per_stream = ran["cpu"] / max(1, ran["streams"]) * 1e6
        lines.append(
            f"py-spy, the {face.name} face, {run.name} ({got['samples']} samples; the gateway's CPU "
            f"{per_stream:.0f} us a stream: a share below times that is roughly its us a stream)"
        )
        if os.environ.get("FACES_KEEP_PROFILE"):
            lines.append(f"  raw stacks: {out_file}")
        for title, key in (("time by area", "areas"), ("self", "top_self"), ("codexgate inclusive",
                           "codexgate_inclusive"), ("codexgate self", "codexgate_self")):  # fmt: skip
            lines.append(f"  {title}:")
            lines += [f"    {share:5.1f}%  {name}" for name, share in got[key][:16]]
    return "\n".join(lines)


# -- the whole run -----------------------------------------------------------------------------


def _selected(name: str, runs: list[str]) -> bool:
    return any(name.startswith(want) for want in runs)


async def measure(args: argparse.Namespace, home: str) -> tuple[list[Face], str, dict[str, int]]:
    t0 = time.perf_counter()
    bodies = Bodies()
    sizes = {face: bodies.sessions.size(face) for face in FACES}
    print(f"bodies made in {time.perf_counter() - t0:.1f} s", flush=True)
    profile = ""
    with Processes() as procs:
        up_port, port = free_port(), free_port()
        upstream = procs.start(
            "upstream", [sys.executable, str(BENCH / "fake_upstream_server.py"), "--port", str(up_port)]
        )
        up_base = f"http://127.0.0.1:{up_port}"
        wait_http(upstream, up_base + "/bench/stats")
        # Its defaults: the SQLite store (in a folder of its own), the access lines (into its log).
        argv = [a for a in _gateway_argv() if a not in ("--log-level", "warning")]
        argv += ["--port", str(port), "--upstream", up_base + "/v1"]
        env = {**clean_env(), "XDG_DATA_HOME": tempfile.mkdtemp(prefix="faces-data-", dir=home)}
        gateway = procs.start("gateway", argv, env=env)
        base = f"http://127.0.0.1:{port}"
        wait_http(gateway, base + "/healthz")
        if len(CPUS) > 1:
            set_affinity(gateway.pid, {CPUS[-1]})
            set_affinity(upstream.pid, {CPUS[0]})
            set_affinity(0, {CPUS[0]})
        faces = [
            Face(RESPONSES, base + "/v1/responses", GATEWAY),
            Face(MESSAGES, base + "/v1/messages", MESSAGES),
        ]
        if _selected("cpu", args.runs):
            print("cpu: each face's request in process ...", flush=True)
            got = await asyncio.to_thread(_in_process, up_base + "/v1", args.cpu_requests, args.cpu_processes)
            for face in faces:
                face.out["cpu"] = {
                    regime: got.get(f"{face.name}_{regime}", {"error": got.get("error", "")})
                    for regime in ("busy", "idle")
                }
        async with new_session() as session:
            for face in faces:  # connections and code paths warm, on both faces
                for i in range(32):
                    sc = FAST if i % 2 else LATENCY_PACED
                    body, headers = bodies.turn(face.name, i, sc) if i < 16 else (
                        bodies.sessions.request(face.name, i, 0, sc.model))  # fmt: skip
                    got = await stream_once(session, face.url, body, face.kind, headers=headers)
                    if not got.ok:
                        raise RuntimeError(f"warm-up stream on {face.name} failed: {got.error}")
            for label, sc, count in (
                ("fast", FAST, args.requests),
                ("paced", LATENCY_PACED, args.paced_requests),
            ):
                if _selected(f"latency-{label}", args.runs):
                    print(f"latency, {label}: {count} requests per face ...", flush=True)
                    got = await _latency(session, faces, bodies, gateway, up_base, sc, count)
                    for face in faces:
                        face.out[f"latency-{label}"] = got[face.name]
            for run in CLOSED:
                if _selected(run.name, args.runs):
                    await _closed_rounds(
                        session, faces, run, bodies, gateway, upstream, args.rounds, args.seconds
                    )
            if _selected("burst", args.runs):
                bursts: dict[str, list[dict[str, Any]]] = {f.name: [] for f in faces}
                for r in range(2):
                    for face in _rotated(faces, r):
                        print(f"burst: {face.name}, round {r + 1} of 2 ...", flush=True)
                        fresh = bodies.sessions.renamed(f"burst{r}")
                        bursts[face.name].append(await _burst(session, face, fresh))
                for face in faces:
                    got = bursts[face.name]
                    firsts = [f for b in got for f in b["firsts"]]
                    face.out["burst"] = {
                        "first_p50": pct(firsts, 0.5),
                        "first_p90": pct(firsts, 0.9),
                        "wall": statistics.median(b["wall"] for b in got),
                        "failed": sum(b["failed"] for b in got),
                        "error": next((b["error"] for b in got if b["error"]), ""),
                    }
            if args.profile:
                run = next(r for r in PROFILED if r.name == args.profile)
                profile = await _profile(
                    session, faces, bodies, procs, gateway, upstream, run, args.seconds * 2
                )
        procs.stop(gateway)
    return faces, profile, sizes


# -- the report --------------------------------------------------------------------------------


class Table:
    """One row per figure: each face's, the Messages face's over the Responses face's, their
    difference, and the target's verdict where a target applies."""

    def __init__(self, faces: list[Face]) -> None:
        self.by = {f.name: f.out for f in faces}
        self._title: str | None = None
        self.lines = [
            "metric".ljust(46)
            + "".join(c.rjust(11) for c in ("responses", "messages", "msg/resp", "msg-resp", "target"))
        ]

    def section(self, title: str) -> None:
        """The title of the rows that follow, printed with the first of them that has figures."""
        self._title = title

    def row(
        self, label: str, get: Callable[[dict[str, Any]], float], digits: int = 1, target: str = ""
    ) -> None:
        try:
            r, m = float(get(self.by[RESPONSES])), float(get(self.by[MESSAGES]))
        except (KeyError, TypeError):
            return
        if self._title is not None:
            self.lines.append(self._title)
            self._title = None
        verdict = ""
        if target == "ratio":
            verdict = ("PASS" if m / r <= CPU_RATIO_TARGET else "FAIL") + f" {CPU_RATIO_TARGET:g}x"
        elif target == "diff":
            verdict = ("PASS" if m - r <= FIRST_TOKEN_TARGET_MS else "FAIL") + f" {FIRST_TOKEN_TARGET_MS:g}ms"
        cells = [
            f"{r:.{digits}f}",
            f"{m:.{digits}f}",
            f"{m / r:.2f}x" if r else "n/a",
            f"{m - r:+.{digits}f}",
            verdict,
        ]
        self.lines.append(f"  {label}".ljust(46) + "".join(c.rjust(11) for c in cells))


def report(faces: list[Face], args: argparse.Namespace, sizes: dict[str, int]) -> list[str]:
    table = Table(faces)
    row = table.row
    table.lines.insert(
        0,
        f"the Responses face and the Messages face, one gateway alone on one core; first request of a "
        f"distinct session {sizes[RESPONSES] // 1000} KB / {sizes[MESSAGES] // 1000} KB",
    )
    for regime, what in (
        ("busy", "each request right after the one before"),
        ("idle", "after the core idled 2 ms"),
    ):
        table.section(
            f"cpu, in process, one request at a time, the growing session, 200 deltas at once, {what}:"
        )
        row(
            "CPU from the body to the upstream request (us)",
            lambda o, r=regime: o["cpu"][r]["to_upstream_us_p50"],
            0,
        )
        row(
            "CPU from the body to the first token (ms)",
            lambda o, r=regime: o["cpu"][r]["to_first_token_us_p50"] / 1e3,
            3,
            "diff",
        )
    for label, what in (
        ("fast", "200 deltas at once"),
        ("paced", f"{LATENCY_PACED.chunks} deltas 10 ms apart"),
    ):
        key = f"latency-{label}"
        count = args.requests if label == "fast" else args.paced_requests
        table.section(f"latency, c=1, one growing session (44-90 KB), {what}, {count} requests per face:")
        row("first token added p50 (ms)", lambda o, k=key: o[k]["added_p50"], 2, "diff")
        row("first token added p90 (ms)", lambda o, k=key: o[k]["added_p90"], 2, "diff")
        got = table.by[MESSAGES].get(key)
        if got is not None:
            table.lines.append(
                f"    msg-resp of the p50s, 90% of bootstrap resamples: {got['added_p50_diff_low']:+.2f} to "
                f"{got['added_p50_diff_high']:+.2f} ms"
            )
        row("first token p50 (ms)", lambda o, k=key: o[k]["first_p50"], 2)
        row("upstream's own first token p50 (ms)", lambda o, k=key: o[k]["direct_p50"], 2)
        row("gateway CPU per request (us, schedstat)", lambda o, k=key: o[k]["cpu_per_request_us"], 0)
        row("other processes' cores (the machine's)", lambda o, k=key: o[k]["foreign_cores"], 2)
        row("failed", lambda o, k=key: o[k]["failed"], 0)
    for run in CLOSED:
        what = "200 deltas at once" if run.scenario is FAST else "100 deltas, one every 10 ms"
        sessions = "one session" if run.sessions == "one" else f"{SESSIONS} distinct sessions"
        table.section(f"{run.name}: {what}, {sessions}, c={run.concurrency}:")
        row("CPU per event (us)", lambda o, k=run.name: o[k]["us_per_event"], 2, "ratio")
        row("CPU per stream (us)", lambda o, k=run.name: o[k]["us_per_stream"], 0)
        row("events per stream", lambda o, k=run.name: o[k]["events_per_stream"], 1)
        row("events/s", lambda o, k=run.name: o[k]["events_per_s"], 0)
        row("streams/s", lambda o, k=run.name: o[k]["streams_per_s"], 1)
        row("first token p50 (ms)", lambda o, k=run.name: o[k]["first_p50"], 1)
        row("first token p90 (ms)", lambda o, k=run.name: o[k]["first_p90"], 1)
        row("gateway cores used", lambda o, k=run.name: o[k]["cores"], 2)
        row("load generator's core used", lambda o, k=run.name: o[k]["load_cores"], 2)
        row("other processes' cores (the machine's)", lambda o, k=run.name: o[k]["foreign_cores"], 2)
        row("failed streams", lambda o, k=run.name: o[k]["failed"], 0)
    table.section(
        f"burst: {SESSIONS} new sessions opened at once, one delta every {BURST.delay_ms:g} ms, 2 rounds:"
    )
    row("first token p50 (ms)", lambda o: o["burst"]["first_p50"], 1)
    row("first token p90 (ms)", lambda o: o["burst"]["first_p90"], 1)
    row("failed streams", lambda o: o["burst"]["failed"], 0)
    lines = [line for line in table.lines]
    for face in faces:
        for name, got in face.out.items():
            if isinstance(got, dict) and got.get("error"):
                lines.append(f"  first error, {face.name} {name}: {got['error']}"[:200])
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="shorter slices, 2 rounds, fewer requests")
    parser.add_argument(
        "--runs", default="cpu,latency,fast,paced,burst", help="names or prefixes (see the docs)"
    )
    parser.add_argument(
        "--profile", choices=[r.name for r in PROFILED], help="py-spy each face under this run"
    )
    parser.add_argument("--json", help="write every figure to this file")
    parser.add_argument("--src", metavar="DIR", help="measure the codexgate package in DIR (a src/ folder)")
    args = parser.parse_args()
    if args.src:
        src = Path(args.src).resolve()
        if not (src / "codexgate" / "__init__.py").exists():
            parser.error(f"{src} has no codexgate package")
        import procs

        procs.SRC_OVERRIDE = str(src)
    args.runs = args.runs.split(",")
    args.rounds = 2 if args.quick else 4
    args.seconds = 2.5 if args.quick else 4.0  # per face and round
    args.requests = 60 if args.quick else 200
    args.paced_requests = 30 if args.quick else 100
    args.cpu_requests = 100 if args.quick else 200
    args.cpu_processes = 1 if args.quick else 2
    t0 = time.perf_counter()
    import uvloop

    uvloop.install()
    with tempfile.TemporaryDirectory(prefix="faces-") as home:
        faces, profile, sizes = asyncio.run(measure(args, home))
    print()
    print(
        f"codexgate faces ({time.perf_counter() - t0:.0f} s; {os.cpu_count()} cores; python "
        f"{sys.version.split()[0]}; load average {os.getloadavg()[0]:.2f} at the end)"
    )
    print(source_info())
    print("\n".join(report(faces, args, sizes)))
    if profile:
        print(profile)
    if args.json:
        Path(args.json).write_bytes(orjson.dumps({f.name: f.out for f in faces}, option=orjson.OPT_INDENT_2))
    failed = sum(got.get("failed", 0) for f in faces for got in f.out.values() if isinstance(got, dict))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    os.chdir(ROOT)
    main()
