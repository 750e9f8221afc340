"""Relays as users load them: many distinct Codex sessions, 128 streams at once, one core each.

    uv run python bench/under_load.py [--quick] [--base-src DIR] [--peer NAME=COMMAND] [--profile [RUN]]
        [--only NAMES] [--runs saturated,paced,memory]

Each relay runs alone on one core in its own long-lived process (the fake upstream and this
load generator share the other core) and meets, in this order:

1. `saturated`: 128 concurrent streams for a while, answers of 100 deltas back to back. The
   relay is CPU-bound; the figures are streams/s, CPU per event and the time to first text
   delta of every stream (a new stream's first bytes compete with the others' steady deltas).
2. `paced`: 128 concurrent streams, one delta every 10 ms, as a model sends them: CPU per event
   when every event is its own wake-up, and the first token.
3. `memory`: in the same process, after the runs above filled whatever it keeps between
   requests (codexgate's history cache), 500 slow streams at once (2 s prefill, then 100 deltas
   50 ms apart), opened at most 100 at a time: peak RSS (VmHWM, reset first) and RSS before.

Every stream belongs to one of 500 distinct Codex sessions of ~50 KB: each its own
`prompt_cache_key`, its own history (a different seed) and its own MCP tool, and every request
of a session is that conversation one turn further than its last, as Codex sends it.

Relays: `bare` (bench/bare_relay.py, the Python floor), `head` (codexgate from this tree),
`base` (codexgate from `--base-src DIR`, e.g. an older commit's src/ from `git archive`), and
any peer given as `--peer NAME=COMMAND`, where COMMAND may use {port} and {upstream} (the fake
upstream's /v1 base URL) and is run by the shell, e.g.
`--peer rust='PORT={port} BACKEND_URL={upstream}/chat/completions exec /path/to/relay'` (`exec`,
so that the process measured is the relay, not a shell). codexgate runs with `store = "none"`:
Codex sends `store: false`, so the store would only be opened. Each relay's figures are also
printed as a ratio to the bare relay's.

`--profile` also records the head relay with py-spy during a separate saturated run (or paced:
`--profile paced`) and prints the top functions (inclusive and self). `--only` and `--runs`
narrow a run to some relays and some of the three runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from client import RESPONSES, StreamResult, new_session, pct, stream_once  # noqa: E402
from compare import OPENING, _gateway_argv, _Opened  # noqa: E402
from procs import (  # noqa: E402
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
    source_info,
    wait_http,
)
from workload import Scenario, codex_request  # noqa: E402

MB = 1024 * 1024
SESSIONS = 500
CONCURRENCY = 128
SATURATED = Scenario("text", 100, 4, 0)
PACED = Scenario("text", 100, 4, 10)
SLOW = Scenario("text", 100, 4, 50, 2000)
_MODEL = b"__bench_model__"
_TURN_ID = b'"turn_id":"0199a1f2-0000'  # workload.client_metadata(0)'s


# -- the sessions ------------------------------------------------------------------------------


class Sessions:
    """`count` distinct Codex conversations of about `size` bytes. A request is made from a
    session's head bytes, the turns it has had so far, and its tail bytes, so making the
    next turn costs a join, not a re-encode of 50 KB."""

    def __init__(self, count: int, size: int) -> None:
        self.parts: list[tuple[bytes, bytes]] = []
        self.turns = [0] * count
        marker = {"type": "message", "role": "user", "content": "__bench_tail__"}
        for i in range(count):
            body = codex_request(Scenario("text", 1, 1, 0), history_bytes=size, seed=1000 + i)
            body["model"] = _MODEL.decode()
            body["prompt_cache_key"] = f"bench-session-{i:04d}-{random.Random(i).getrandbits(64):016x}"
            body["tools"].append(_session_tool(i))
            body["input"].append(marker)
            head, tail = orjson.dumps(body).split(orjson.dumps(marker))
            self.parts.append((head.rstrip(b","), tail))
        self.size = len(self.parts[0][0]) + len(self.parts[0][1])

    def fresh(self) -> Sessions:
        """The same sessions at their first turn, counting their turns apart from these (for
        relays measured in turns, each meeting the same requests); the bytes are shared."""
        other = object.__new__(Sessions)
        other.parts, other.size, other.turns = self.parts, self.size, [0] * len(self.turns)
        return other

    def restart(self) -> None:
        """Every session back to its first turn, so that each relay measured meets the same
        requests (a session's body grows with its turns: a relay measured after another
        would otherwise get longer histories than it)."""
        self.turns = [0] * len(self.turns)

    def next_body(self, i: int, scenario: Scenario) -> bytes:
        """Session `i`'s next request: its whole history again, one turn further."""
        head, tail = self.parts[i]
        turn = self.turns[i]
        self.turns[i] = turn + 1
        added = b"".join(
            b',{"type":"message","role":"assistant","id":"msg_t%d","content":[{"type":"output_text",'
            b'"text":"Step %d is done; the tests pass."}]},{"type":"message","role":"user","content":'
            b'[{"type":"input_text","text":"Good. Now do step %d of the plan."}]}' % (t, t, t + 1)
            for t in range(1, turn + 1)
        )
        # Codex's client_metadata, last in the body, names the turn (workload.client_metadata).
        tail = tail.replace(_TURN_ID, _TURN_ID.replace(b"0000", b"%04d" % (turn % 10_000)), 1)
        return (head + added + tail).replace(_MODEL, scenario.model.encode(), 1)


def _session_tool(i: int) -> dict[str, Any]:
    """An MCP tool of this session's own, as Codex lists a user's MCP servers."""
    return {
        "type": "function",
        "name": f"mcp__repo{i}__search_code",
        "description": f"Search the code of repository {i} (index built {i % 28 + 1} days ago).",
        "strict": False,
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["query"],
        },
    }


# -- the relays --------------------------------------------------------------------------------


@dataclass
class Relay:
    name: str
    argv: list[str]
    env: dict[str, str]
    health: str | None  # an HTTP path answering 200 when up, or None: wait for the port
    proc: Proc | None = None
    url: str = ""
    out: dict[str, Any] = field(default_factory=dict)

    def start(self, procs: Processes, upstream_v1: str) -> None:
        port = free_port()
        argv = [a.replace("{port}", str(port)).replace("{upstream}", upstream_v1) for a in self.argv]
        self.proc = procs.start(f"relay-{self.name}", argv, env=self.env)
        base = f"http://127.0.0.1:{port}"
        if self.health:
            wait_http(self.proc, base + self.health)
        else:
            _wait_port(self.proc, port)
        self.url = base + "/v1/responses"


def _wait_port(proc: Proc, port: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"{proc.name} exited during startup:\n{proc.log_tail()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{proc.name} did not listen on {port} within {timeout}s")


def _codexgate() -> list[str]:
    return [*_gateway_argv(), "--port", "{port}", "--upstream", "{upstream}"]


def relays(args: argparse.Namespace) -> list[Relay]:
    env = {**clean_env(), "CODEXGATE_STORE": "none"}
    bare = [sys.executable, str(BENCH / "bare_relay.py"), "--host", "127.0.0.1", "--port", "{port}",
            "--upstream", "{upstream}"]  # fmt: skip
    out = [Relay("bare", bare, env, "/healthz"), Relay("head", _codexgate(), env, "/healthz")]
    if args.base_src:
        base_env = {
            **env,
            "PYTHONPATH": os.pathsep.join(p for p in (args.base_src, env.get("PYTHONPATH")) if p),
        }
        out.append(Relay("base", _codexgate(), base_env, "/healthz"))
    for spec in args.peer:
        name, _, command = spec.partition("=")
        out.append(Relay(name, ["/bin/sh", "-c", command], dict(os.environ), None))
    return out


# -- the runs ----------------------------------------------------------------------------------


def _pin(relay: Relay, upstream: Proc) -> None:
    """The relay alone on the last CPU; the fake upstream and this process on the first."""
    cpus = CPUS
    if len(cpus) < 2 or relay.proc is None:
        return
    set_affinity(relay.proc.pid, {cpus[-1]})
    set_affinity(upstream.pid, {cpus[0]})
    set_affinity(0, {cpus[0]})


async def _throughput(
    session: Any, relay: Relay, sessions: Sessions, sc: Scenario, seconds: float, upstream: Proc
) -> dict[str, Any]:
    """CONCURRENCY workers running streams back to back, each request the next turn of the
    next session in turn, until `seconds` passed."""
    next_body = lambda n: sessions.next_body(n % SESSIONS, sc)  # noqa: E731
    return await closed_loop(session, relay, next_body, seconds, upstream)


async def closed_loop(
    session: Any, relay: Relay, next_body: Callable[[int], bytes], seconds: float, upstream: Proc
) -> dict[str, Any]:
    """CONCURRENCY workers running streams back to back, the n-th request's body
    `next_body(n)`, until `seconds` passed. The load generator's core (this process and the
    fake upstream) is measured too: when it is busy, every relay's first token waits on it."""
    assert relay.proc is not None
    results: list[StreamResult] = []
    order = iter(range(10**9))
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        while time.perf_counter() < deadline:
            body = next_body(next(order))
            results.append(await stream_once(session, relay.url, body, RESPONSES))

    def loader() -> float:
        return cpu_seconds(os.getpid()) + cpu_seconds(upstream.pid)

    cpu0, load0, t0 = cpu_seconds(relay.proc.pid), loader(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    wall, cpu = time.perf_counter() - t0, cpu_seconds(relay.proc.pid) - cpu0
    load = loader() - load0
    ok = [r for r in results if r.ok]
    events = sum(r.events for r in results)
    first = [r.first_delta * 1e3 for r in ok]
    return {
        # The totals, for a caller that pools several runs (bench/per_core.py's rounds).
        "wall": wall,
        "cpu": cpu,
        "load": load,
        "events": events,
        "firsts": first,
        "streams": len(results),
        "failed": len(results) - len(ok),
        "error": next((r.error for r in results if not r.ok), ""),
        "streams_per_s": len(ok) / wall,
        "us_per_event": cpu / events * 1e6 if events else float("nan"),
        "us_per_stream": cpu / len(results) * 1e6 if results else float("nan"),
        "events_per_stream": events / max(1, len(results)),
        "cores": cpu / wall,
        "load_cores": load / wall,
        "first_p50": pct(first, 0.5),
        "first_p90": pct(first, 0.9),
        "first_p99": pct(first, 0.99),
    }


async def _memory(session: Any, relay: Relay, sessions: Sessions) -> dict[str, Any]:
    assert relay.proc is not None
    pid = relay.proc.pid
    await asyncio.sleep(1.0)
    before = mem_status(pid).get("VmRSS", 0)
    reset_hwm(pid)
    opened = _Opened(OPENING)
    results = await asyncio.gather(
        *(opened.stream(session, relay.url, sessions.next_body(i, SLOW), RESPONSES) for i in range(SESSIONS))
    )
    status = mem_status(pid)
    return {
        "rss_before": before,
        "peak": status.get("VmHWM", 0),
        "ok": sum(r.ok for r in results),
        "failed": sum(not r.ok for r in results),
        "max_open": opened.max_open,
        "error": next((r.error for r in results if not r.ok), ""),
    }


async def _profile(
    session: Any, relay: Relay, sessions: Sessions, procs: Processes, upstream: Proc, args: argparse.Namespace
) -> str:
    """py-spy's top functions for `relay` under a saturated or paced run (not one of the
    measured runs)."""
    run, seconds = args.profile, args.seconds
    scenario = SATURATED if run == "saturated" else PACED
    assert relay.proc is not None
    out_file = Path(f"/tmp/under-load-pyspy-{os.getpid()}.txt")
    argv = ["uv", "run", "--no-sync", "--with", "py-spy", "py-spy", "record", "--pid", str(relay.proc.pid),
            "--rate", "250", "--duration", str(int(seconds)), "--format", "raw", "--nolineno",
            "-o", str(out_file)]  # fmt: skip
    spy = procs.start("py-spy", argv, env=dict(os.environ))
    try:
        await _throughput(session, relay, sessions, scenario, seconds + 4, upstream)
    finally:
        deadline = time.monotonic() + 30
        while spy.alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        procs.stop(spy)
    from report import analyse_profile

    got = analyse_profile(out_file.read_text() if out_file.exists() else "")
    out_file.unlink(missing_ok=True)
    if "top_self" not in got:
        return f"profile: no samples ({got.get('error', '')})"
    lines = [f"py-spy, {relay.name}, {run} at c={CONCURRENCY} ({got['samples']} samples):"]
    for title, key in (("time by area", "areas"), ("self", "top_self"), ("codexgate inclusive",
                       "codexgate_inclusive"), ("codexgate self", "codexgate_self")):  # fmt: skip
        lines.append(f"  {title}:")
        lines += [f"    {pct_:5.1f}%  {name}" for name, pct_ in got[key][:12]]
    return "\n".join(lines)


async def measure(args: argparse.Namespace) -> tuple[list[Relay], int, str]:
    t0 = time.perf_counter()
    sessions = Sessions(SESSIONS, 50_000)
    print(f"{SESSIONS} sessions of {sessions.size} B made in {time.perf_counter() - t0:.1f} s", flush=True)
    targets = relays(args)
    if args.only:
        targets = [t for t in targets if t.name in args.only.split(",")]
    profile = ""
    with Processes() as procs:
        up_port = free_port()
        upstream = procs.start(
            "upstream", [sys.executable, str(BENCH / "fake_upstream_server.py"), "--port", str(up_port)]
        )
        wait_http(upstream, f"http://127.0.0.1:{up_port}/bench/stats")
        up_v1 = f"http://127.0.0.1:{up_port}/v1"
        async with new_session() as session:
            for relay in targets:
                try:
                    profile += await _one_relay(session, relay, sessions, procs, upstream, up_v1, args)
                except Exception as exc:  # reported; the other relays are still measured
                    relay.out["error"] = f"{type(exc).__name__}: {exc}"
                finally:
                    if relay.proc is not None:
                        procs.stop(relay.proc)
    return targets, sessions.size, profile


async def _one_relay(
    session: Any,
    relay: Relay,
    sessions: Sessions,
    procs: Processes,
    upstream: Proc,
    up_v1: str,
    args: argparse.Namespace,
) -> str:
    """The runs in order, in one process of `relay`; the profile's text when asked for."""
    sessions.restart()
    relay.start(procs, up_v1)
    _pin(relay, upstream)
    for i in range(32):  # connections and code paths warm
        got = await stream_once(session, relay.url, sessions.next_body(i, SATURATED), RESPONSES)
        if not got.ok:
            raise RuntimeError(f"warm-up stream failed: {got.error}")
    for run, scenario in (("saturated", SATURATED), ("paced", PACED)):
        if run in args.runs:
            print(f"{relay.name}: {run} ...", flush=True)
            relay.out[run] = await _throughput(session, relay, sessions, scenario, args.seconds, upstream)
    if "memory" in args.runs:
        print(f"{relay.name}: memory ...", flush=True)
        relay.out["memory"] = await _memory(session, relay, sessions)
    if args.profile and relay.name == "head":
        return await _profile(session, relay, sessions, procs, upstream, args)
    return ""


# -- the report --------------------------------------------------------------------------------


class RatioTable:
    """A table of one metric per row and one column per relay, then each relay's ratio to bare's
    (under_load's and per_core's reports)."""

    def __init__(self, targets: list[Relay], title: str, label_width: int) -> None:
        self.names = [t.name for t in targets]
        self._by = {t.name: t.out for t in targets}
        self._others = [n for n in self.names if n != "bare"]
        self._w0, self._w = label_width, 10
        self.lines = [
            title,
            "metric".ljust(self._w0)
            + "".join(n.rjust(self._w) for n in self.names)
            + "".join(f"{n}/bare".rjust(self._w) for n in self._others),
        ]

    def row(self, label: str, get: Any, digits: int = 1) -> None:
        vals = {}
        for n in self.names:
            try:
                vals[n] = float(get(self._by[n]))
            except (KeyError, TypeError):
                vals[n] = float("nan")
        cells = [f"{vals[n]:.{digits}f}" for n in self.names]
        bare = vals.get("bare")
        cells += [f"{vals[n] / bare:.2f}x" if bare else "n/a" for n in self._others]
        self.lines.append(label.ljust(self._w0) + "".join(c.rjust(self._w) for c in cells))

    def errors(self, targets: list[Relay]) -> list[str]:
        """The table's lines, then what stopped a relay or a run."""
        for t in targets:
            if t.out.get("error"):
                self.lines.append(f"  {t.name} stopped: {t.out['error']}"[:300])
            for run, got in t.out.items():
                if isinstance(got, dict) and got.get("error"):
                    self.lines.append(f"  first error, {t.name} {run}: {got['error']}"[:200])
        return self.lines


def report(targets: list[Relay], size: int, args: argparse.Namespace) -> list[str]:
    table = RatioTable(
        targets,
        f"{SESSIONS} distinct Codex sessions (~{size // 1000} KB each), {CONCURRENCY} concurrent streams, "
        f"each relay alone on one core, {args.seconds:g} s per run",
        40,
    )
    lines, row = table.lines, table.row
    for run in ("saturated", "paced"):
        lines.append(f"{run}:")
        row("  first token p50 (ms)", lambda o, r=run: o[r]["first_p50"])
        row("  first token p90 (ms)", lambda o, r=run: o[r]["first_p90"])
        row("  first token p99 (ms)", lambda o, r=run: o[r]["first_p99"])
        row("  streams/s", lambda o, r=run: o[r]["streams_per_s"])
        row("  CPU per event (us)", lambda o, r=run: o[r]["us_per_event"], 2)
        row("  events per stream", lambda o, r=run: o[r]["events_per_stream"])
        row("  relay cores used", lambda o, r=run: o[r]["cores"], 2)
        row("  load generator's core used", lambda o, r=run: o[r]["load_cores"], 2)
        row("  failed streams", lambda o, r=run: o[r]["failed"], 0)
    lines.append(f"memory, {SESSIONS} slow streams of distinct sessions in the same process:")
    row("  RSS before (MB)", lambda o: o["memory"]["rss_before"] / MB)
    row("  peak RSS, VmHWM (MB)", lambda o: o["memory"]["peak"] / MB)
    row("  most streams open at once", lambda o: o["memory"]["max_open"], 0)
    row("  failed streams", lambda o: o["memory"]["failed"], 0)
    return table.errors(targets)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="8 s per run instead of 20")
    parser.add_argument("--base-src", help="also measure codexgate imported from this src/ folder")
    parser.add_argument("--peer", action="append", default=[], help="NAME=COMMAND, see the module docs")
    parser.add_argument(
        "--profile", nargs="?", const="saturated", choices=("saturated", "paced"),
        help="py-spy the head relay (via uv) in a separate run of this kind (default: saturated)",
    )  # fmt: skip
    parser.add_argument("--only", help="comma-separated relay names to run (default: all)")
    parser.add_argument(
        "--runs", default="saturated,paced,memory", help="comma-separated runs to make (default: all three)"
    )
    args = parser.parse_args()
    args.runs = set(args.runs.split(","))
    args.seconds = 8.0 if args.quick else 20.0
    if args.base_src:
        args.base_src = str(Path(args.base_src).resolve())
    t0 = time.perf_counter()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    targets, size, profile = asyncio.run(measure(args))
    print()
    print(
        f"codexgate under load ({time.perf_counter() - t0:.0f} s; {os.cpu_count()} cores; python "
        f"{sys.version.split()[0]}; load average {os.getloadavg()[0]:.2f} at the end)"
    )
    print(source_info())
    print("\n".join(report(targets, size, args)))
    if profile:
        print(profile)
    failed = sum(
        t.out.get(run, {}).get("failed", 0) for t in targets for run in ("saturated", "paced", "memory")
    )
    sys.exit(1 if failed or any("error" in t.out for t in targets) else 0)


if __name__ == "__main__":
    os.chdir(ROOT)
    main()
