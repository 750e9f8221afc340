"""Section 6 of bench/run.py: codexgate as a ratio to a bare relay, measured in the same run.

The bare relay (bench/bare_relay.py) only decodes and re-encodes: it is the floor a Python
gateway can reach on this machine at this moment. Ratios to it cancel most of what a shared,
noisy VM does to absolute figures. Measured side by side, each against the same fake upstream:

* `bare`: bench/bare_relay.py;
* `head`: `codexgate serve` from this tree (or from `--src`);
* `base`: `codexgate serve` from `--base-src DIR`, when given (e.g. an older commit's src/).

The four figures of the issue "Codex as it ships, on one canonical core", each with its goal:

* CPU per event at 128 concurrent streams, each process in turn pinned to one core (the fake
  upstream and the load generator on the other), with a Codex-sized ~50 KB request: paced (one
  delta every 10 ms, every event its own wake-up) and saturated (back to back). Goal: head at
  most 1.7x bare.
* Peak RSS (VmHWM) of a fresh process holding 500 slow streams with that ~50 KB request. Goal:
  at most 150 MB.
* Added time to first token at one stream (the ~50 KB request; 5 ms prefill, then deltas 1 ms
  apart), p50 minus the direct path's p50. Goal: at most 1.5 ms.
* The same for the 1 MB history request. Goal: at most 5 ms.

In the two latency figures every request to a relay is the conversation one turn further than
the last (workload.growing): Codex re-sends its whole, append-only history every turn, and a
relay that remembers the part it has seen must still read what is new.

Latency requests to the paths (direct, bare, head, base) are interleaved, the order rotating
every round, so drift on the machine hits all of them alike.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from client import DIRECT, GATEWAY, StreamResult, pct, stream_once
from procs import (
    CPUS,
    ROOT,
    Proc,
    Processes,
    clean_env,
    cpu_seconds,
    free_port,
    mem_status,
    reset_hwm,
    set_affinity,
    wait_http,
)
from workload import Scenario, growing


class Bench(Protocol):
    """What a comparison uses of run.py's Bench (named here, not imported: run.py imports this)."""

    procs: Processes
    up_proc: Proc
    up_v1: str
    up_url: str
    r: dict[str, Any]

    def bodies_for(self, sc: Scenario, history_bytes: int = 0, seed: int = 7) -> tuple[bytes, bytes]: ...

    async def capture(self, session: Any, sc: Scenario, hist: int, seed: int = 7) -> dict[str, Any]: ...

    async def load(
        self,
        session: Any,
        key: str,
        kind: str,
        sc: Scenario,
        *,
        streams: int,
        seconds: float,
        concurrency: int = 64,
        gw_proc: Proc | None = None,
        gw_url: str | None = None,
        history: tuple[int, int] = (0, 7),
    ) -> None: ...


MB = 1024 * 1024

CODEX_50KB = (50_000, 6)  # (history bytes, seed): a Codex request of ~51 KB (checked in the report)
ONE_MB = (1_000_000, 7)  # the 1 MB history of section 4
FIRST_TOKEN = Scenario("text", 50, 4, 1, 5)  # 5 ms prefill, then 50 deltas 1 ms apart
BIG = Scenario("tool", 100, 4, 1, 5)  # section 4's answer after the 1 MB history
SATURATED = Scenario("text", 100, 4, 0)
PACED = Scenario("text", 100, 4, 10)

GOAL_CPU_RATIO = 1.7
GOAL_MEM_MB = 150.0
GOAL_FIRST_TOKEN_MS = 1.5
GOAL_BIG_MS = 5.0


class Target:
    """One relay under test: its name, how to start it, and the running process."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], where: str) -> None:
        self.name, self.argv, self.env, self.where = name, argv, env, where
        self.proc: Proc | None = None
        self.url = ""

    def start(self, b: Bench, upstream_v1: str) -> Proc:
        port = free_port()
        argv = self.argv + ["--port", str(port), "--upstream", upstream_v1]
        proc = b.procs.start(f"relay-{self.name}", argv, env=self.env)
        wait_http(proc, f"http://127.0.0.1:{port}/healthz")
        self.proc, self.url = proc, f"http://127.0.0.1:{port}/v1/responses"
        return proc

    def stop(self, b: Bench) -> None:
        if self.proc is not None:
            b.procs.stop(self.proc)
            self.proc = None


def _gateway_argv() -> list[str]:
    script = Path(sys.executable).parent / "codexgate"
    head = [str(script)] if script.exists() else [sys.executable, "-m", "codexgate.cli"]
    return head + ["serve", "--host", "127.0.0.1", "--no-discover", "--log-level", "warning"]


def _imported_from(env: dict[str, str]) -> str:
    """Where `codexgate` is imported from under this environment (so a wrong --base-src shows)."""
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", "import codexgate; print(codexgate.__file__)"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.stdout.strip() or done.stderr.strip()[-200:]


def make_targets(base_src: Path | None) -> list[Target]:
    env = clean_env()
    bare_argv = [sys.executable, str(ROOT / "bench" / "bare_relay.py"), "--host", "127.0.0.1"]
    targets = [
        Target("bare", bare_argv, env, "bench/bare_relay.py"),
        Target("head", _gateway_argv(), env, _imported_from(env)),
    ]
    if base_src is not None:
        base_env = dict(env)
        base_env["PYTHONPATH"] = os.pathsep.join(
            [str(base_src)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        )
        targets.append(Target("base", _gateway_argv(), base_env, _imported_from(base_env)))
    return targets


class Compare:
    def __init__(self, b: Bench, base_src: Path | None) -> None:
        self.b = b
        self.targets = make_targets(base_src)
        self.out: dict[str, Any] = {"targets": {t.name: t.where for t in self.targets}}
        b.r["relay"] = self.out
        if base_src is not None and not self.out["targets"]["base"].startswith(str(base_src)):
            raise RuntimeError(f"--base-src: codexgate is imported from {self.out['targets']['base']}")

    # -- set-up ---------------------------------------------------------------------------

    async def prepare(self, session: Any) -> None:
        """Capture the chat body for the ~50 KB request, start every relay, warm each one up."""
        b = self.b
        eq = await b.capture(session, FIRST_TOKEN, *CODEX_50KB)
        self.out["request_bytes"] = eq["responses_bytes"]
        self.out["chat_bytes"] = eq["chat_bytes"]
        self.out["big_bytes"] = len(b.bodies_for(BIG, *ONE_MB)[0])
        for t in self.targets:
            t.start(b, b.up_v1)
            for sc, hist in ((FIRST_TOKEN, CODEX_50KB), (BIG, ONE_MB)):
                res = await stream_once(session, t.url, b.bodies_for(sc, *hist)[0], GATEWAY)
                if not res.ok:
                    raise RuntimeError(f"{t.name}: warm-up request failed: {res.error}")

    def stop(self) -> None:
        for t in self.targets:
            t.stop(self.b)

    def _pin(self, busy: Target | None) -> None:
        """`busy` (or, for latency, every relay and this client) on the last CPU; the fake
        upstream, and under load this client, on the first."""
        cpus = CPUS
        if len(cpus) < 2:
            return
        first, last = {cpus[0]}, {cpus[-1]}
        plan: list[tuple[int, set[int]]] = [(self.b.up_proc.pid, first)]
        for t in self.targets:
            if t.proc is not None:
                plan.append((t.proc.pid, last if busy is None or t is busy else first))
        plan.append((0, last if busy is None else first))
        for pid, mask in plan:
            try:
                set_affinity(pid, mask)
            except OSError:
                pass

    def unpin(self) -> None:
        cpus = set(CPUS)
        for pid in [self.b.up_proc.pid, 0] + [t.proc.pid for t in self.targets if t.proc]:
            try:
                set_affinity(pid, cpus)
            except OSError:
                pass

    # -- figures --------------------------------------------------------------------------

    async def latency(self, session: Any, key: str, sc: Scenario, hist: tuple[int, int], n: int) -> None:
        """Time to first text delta at one stream, interleaved over all paths."""
        b = self.b
        self._pin(None)
        gw_body, chat = b.bodies_for(sc, *hist)
        warmup = 3
        # Each round, the relays get the conversation one turn further (workload.growing), as
        # Codex sends it; the direct path sends the first turn's chat body every time (the
        # turns add ~150 bytes each, next to the request's 50 KB or 1 MB).
        turns = growing(gw_body, warmup + n)
        paths: list[tuple[str, str, bytes | None, str]] = [("direct", b.up_url, chat, DIRECT)]
        paths += [(t.name, t.url, None, GATEWAY) for t in self.targets]
        got: dict[str, list[StreamResult]] = {name: [] for name, *_ in paths}
        for i in range(warmup + n):
            k = i % len(paths)
            for name, url, body, kind in paths[k:] + paths[:k]:
                res = await stream_once(session, url, body if body is not None else turns[i], kind)
                if i >= warmup:
                    got[name].append(res)
        out: dict[str, Any] = {"n": n}
        for name, results in got.items():
            ok = [r for r in results if r.ok]
            first = sorted(r.first_delta * 1e3 for r in ok)
            total = sorted(r.total * 1e3 for r in ok)
            out[name] = {
                "failed": len(results) - len(ok),
                "error": next((r.error for r in results if not r.ok), ""),
                "first_p50": pct(first, 0.5),
                "first_p90": pct(first, 0.9),
                "total_p50": pct(total, 0.5),
            }
        for t in self.targets:
            for q in ("p50", "p90"):
                out[t.name][f"added_{q}"] = out[t.name][f"first_{q}"] - out["direct"][f"first_{q}"]
        self.out[key] = out

    async def cpu(self, session: Any, rounds: int, seconds: float, paced_seconds: float) -> None:
        """CPU per event at 128 streams, each relay alone on one core; rounds alternate the
        order (bare, head, base, base, head, bare, ...) and the figures are their means."""
        b = self.b
        runs: dict[str, list[dict[str, Any]]] = {}
        for r in range(rounds):
            order = self.targets if r % 2 == 0 else self.targets[::-1]
            for t in order:
                assert t.proc is not None
                self._pin(t)
                for label, sc, secs, streams in (
                    ("saturated", SATURATED, seconds, 10**9),
                    ("paced", PACED, paced_seconds, 10**9),
                ):
                    await b.load(
                        session,
                        "_relay_load",
                        GATEWAY,
                        sc,
                        streams=streams,
                        seconds=secs,
                        concurrency=128,
                        gw_proc=t.proc,
                        gw_url=t.url,
                        history=CODEX_50KB,
                    )
                    runs.setdefault(f"{t.name}/{label}", []).append(b.r.pop("_relay_load"))
        out: dict[str, Any] = {"rounds": rounds}
        for key, rs in runs.items():
            events = sum(x["events"] for x in rs)
            cpu = sum(x["gw_cpu_s"] for x in rs)
            wall = sum(x["wall_s"] for x in rs)
            ok = sum(x["ok"] for x in rs)
            out[key] = {
                "us_per_event": cpu / events * 1e6 if events else float("nan"),
                "ms_per_stream": cpu / ok * 1e3 if ok else float("nan"),
                "streams_per_s": ok / wall if wall else 0.0,
                "cores": cpu / wall if wall else 0.0,
                "events_per_stream": events / max(1, sum(x["streams"] for x in rs)),
                "ok": ok,
                "failed": sum(x["failed"] for x in rs),
                "error": next((x["error"] for x in rs if x["error"]), ""),
            }
        self.out["cpu"] = out

    async def memory(self, session: Any, streams: int, chunks: int) -> None:
        """A fresh process of each relay holding `streams` slow streams at once. Each stream
        first waits 2 s after the role chunk, so that all are open together even when opening
        500 ~50 KB requests takes seconds on a busy machine ("most open at once" checks it)."""
        b = self.b
        self.unpin()
        sc = Scenario("text", chunks, 4, 50, 2000)
        body = b.bodies_for(sc, *CODEX_50KB)[0]
        warm = b.bodies_for(SATURATED, *CODEX_50KB)[0]
        out: dict[str, Any] = {"streams": streams, "chunks": chunks, "delay_ms": sc.delay_ms}
        for t in self.targets:
            fresh = Target(f"{t.name}-mem", t.argv, t.env, t.where)
            proc = fresh.start(b, b.up_v1)
            try:
                for _ in range(5):
                    await stream_once(session, fresh.url, warm, GATEWAY)
                gc.collect()
                await asyncio.sleep(1.0)
                idle = mem_status(proc.pid).get("VmRSS", 0)
                reset = reset_hwm(proc.pid)
                c0 = cpu_seconds(proc.pid)
                t0 = time.perf_counter()
                opened = _Opened(OPENING)
                results = await asyncio.gather(
                    *(opened.stream(session, fresh.url, body) for _ in range(streams))
                )
                wall = time.perf_counter() - t0
                peak = mem_status(proc.pid)
                ok = sum(r.ok for r in results)
                out[t.name] = {
                    "idle_rss": idle,
                    "peak_hwm": peak.get("VmHWM", 0),
                    "hwm_reset": reset,
                    "ok": ok,
                    "max_open": opened.max_open,
                    "failed": streams - ok,
                    "error": next((r.error for r in results if not r.ok), ""),
                    "wall_s": wall,
                    "min_stream_s": min(r.total for r in results),
                    "cpu_s": cpu_seconds(proc.pid) - c0,
                }
            finally:
                fresh.stop(b)
        self.out["memory"] = out


# At most this many streams waiting for their response to start. Opening 500 connections in
# one burst makes codexgate close those past its idle cap (max_idle_connections, 256), which
# counts connections that have not sent their request head yet (see section 3); the figure
# here is the memory of 500 streams open at once, so they are opened in waves.
OPENING = 100


class _Opened:
    """Streams opened at most `limit` at a time, counting how many were open at once."""

    def __init__(self, limit: int, on_answer: Callable[[int], None] | None = None) -> None:
        """`on_answer`: called with how many streams had their answer's head so far, as each
        gets it."""
        self.opening = asyncio.Semaphore(limit)
        self.open_now = 0
        self.max_open = 0
        self.answered = 0
        self._on_answer = on_answer

    async def stream(self, session: Any, url: str, body: bytes, kind: str = GATEWAY) -> StreamResult:
        await self.opening.acquire()
        waiting = True

        def on_open() -> None:
            nonlocal waiting
            self.open_now += 1
            self.max_open = max(self.max_open, self.open_now)
            waiting = False
            self.opening.release()
            self.answered += 1
            if self._on_answer is not None:
                self._on_answer(self.answered)

        def on_close() -> None:
            self.open_now -= 1

        try:
            return await stream_once(session, url, body, kind, on_open=on_open, on_close=on_close)
        finally:
            if waiting:
                self.opening.release()


def failures(r: dict[str, Any]) -> int:
    """Streams that did not end in response.completed (or [DONE] for direct), over section 6."""
    rel = r.get("relay", {})
    n = 0
    for key in ("first_token", "big", "cpu", "memory"):
        n += sum(int(v.get("failed", 0)) for v in rel.get(key, {}).values() if isinstance(v, dict))
    return n


# -- report ----------------------------------------------------------------------------------


def _f(x: Any, digits: int = 1, unit: str = "") -> str:
    if x is None or (isinstance(x, float) and x != x):
        return "n/a"
    return f"{x:.{digits}f}{unit}" if isinstance(x, float) else f"{x}{unit}"


def report(r: dict[str, Any]) -> list[str]:
    """The section-6 table: absolute figures, ratios to bare, goal and verdict for head (and base)."""
    rel = r.get("relay")
    if not rel:
        return []
    errors = {k: v for k, v in r.get("_errors", {}).items() if k.startswith("relay")}
    names = [n for n in ("bare", "head", "base") if n in rel["targets"]]
    others = [n for n in names if n != "bare"]
    cols = names + [f"{n}/bare" for n in others] + ["goal"] + [f"ok:{n}" for n in others]
    w0, w = 44, 10
    lines: list[str] = []

    def row(metric: str, values: dict[str, float], goal: str, ok: Any, digits: int = 1) -> None:
        cells = [_f(values.get(n), digits) for n in names]
        bare = values.get("bare")
        for n in others:
            v = values.get(n)
            cells.append(_f(v / bare, 2, "x") if v is not None and bare else "n/a")
        cells.append(goal)
        for n in others:
            v = values.get(n)
            cells.append("" if ok is None or v is None or v != v else ("PASS" if ok(v, values) else "FAIL"))
        lines.append(metric.ljust(w0) + "".join(c.rjust(w) for c in cells))

    title = (
        f"6. Against a bare relay, in the same run (Codex request {_f(rel.get('request_bytes'))} B; "
        f"1 MB history {_f(rel.get('big_bytes'))} B)"
    )
    lines.append(title)
    for name in names:
        lines.append(f"   {name}: {rel['targets'][name]}")
    lines.append("metric".ljust(w0) + "".join(c.rjust(w) for c in cols))
    for key, msg in errors.items():
        lines.append(f"ERROR in {key}: {msg}"[:200])

    cpu = rel.get("cpu")
    if cpu:
        lines.append(
            f"CPU at 128 concurrent streams, each relay pinned alone to one core ({cpu['rounds']} round(s)):"
        )
        for label in ("paced", "saturated"):
            get = {n: cpu[f"{n}/{label}"] for n in names if f"{n}/{label}" in cpu}

            def ratio_ok(v: float, vals: dict[str, float]) -> bool:
                return bool(vals.get("bare")) and v / vals["bare"] <= GOAL_CPU_RATIO

            row(
                f"  {label}: CPU per event (us)",
                {n: g["us_per_event"] for n, g in get.items()},
                f"<={GOAL_CPU_RATIO}x",
                ratio_ok,
                2,
            )
            row(
                f"  {label}: CPU per stream (ms)",
                {n: g["ms_per_stream"] for n, g in get.items()},
                "",
                None,
                2,
            )
            row(f"  {label}: streams/s", {n: g["streams_per_s"] for n, g in get.items()}, "", None)
            row(
                f"  {label}: events per stream", {n: g["events_per_stream"] for n, g in get.items()}, "", None
            )
            row(f"  {label}: failed streams", {n: float(g["failed"]) for n, g in get.items()}, "0", None, 0)
    mem = rel.get("memory")
    if mem:
        lines.append(
            f"Memory: a fresh process, {mem['streams']} streams open at once, "
            f"2 s prefill, {mem['chunks']} deltas {mem['delay_ms']:g} ms apart, opened at most {OPENING} "
            "at a time:"
        )
        got = {n: mem[n] for n in names if n in mem}
        row("  idle RSS after warm-up (MB)", {n: g["idle_rss"] / MB for n, g in got.items()}, "", None)
        row(
            "  peak RSS, VmHWM (MB)",
            {n: g["peak_hwm"] / MB for n, g in got.items()},
            f"<={GOAL_MEM_MB:g} MB",
            lambda v, _: v <= GOAL_MEM_MB and all(g["max_open"] == mem["streams"] for g in got.values()),
        )
        row("  streams completed", {n: float(g["ok"]) for n, g in got.items()}, f"{mem['streams']}", None, 0)
        row("  most streams open at once", {n: float(g["max_open"]) for n, g in got.items()}, "", None, 0)
    for key, label, goal in (
        ("first_token", "Time to first token, one stream (~50 KB request)", GOAL_FIRST_TOKEN_MS),
        ("big", "1 MB history, one stream, time to first token", GOAL_BIG_MS),
    ):
        lat = rel.get(key)
        if not lat:
            continue
        lines.append(
            f"{label}; {lat['n']} requests per path; direct p50 {_f(lat['direct']['first_p50'], 2)} ms:"
        )
        got = {n: lat[n] for n in names if n in lat}
        row(
            "  added p50 (ms, relay - direct)",
            {n: g["added_p50"] for n, g in got.items()},
            f"<={goal:g} ms",
            lambda v, _, goal=goal: v <= goal,
            2,
        )
        row("  added p90 (ms)", {n: g["added_p90"] for n, g in got.items()}, "", None, 2)
        row("  failed requests", {n: float(g["failed"]) for n, g in got.items()}, "0", None, 0)
    for key in ("cpu", "memory", "first_token", "big"):
        for name, v in (rel.get(key) or {}).items():
            if isinstance(v, dict) and v.get("error"):
                lines.append(f"  first error, {key} {name}: {v['error']}"[:200])
    return lines
