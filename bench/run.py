"""codexgate benchmark: the gateway against the same fake upstream talked to directly.

    uv run python bench/run.py            # full, ~3-4 minutes
    uv run python bench/run.py --quick    # ~1 minute
    uv run python bench/run.py --profile  # also: py-spy profile of the gateway under load

See bench/README.md for what each number means.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for _p in (str(ROOT), str(ROOT / "bench")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import client as client_module  # noqa: E402
import compare  # noqa: E402
import libs  # noqa: E402
import orjson  # noqa: E402
import procs as procs_module  # noqa: E402
import uvloop  # noqa: E402
from client import (  # noqa: E402
    DIRECT,
    GATEWAY,
    LoadResult,
    StreamResult,
    new_session,
    pct,
    run_load,
    stream_once,
)
from plan import BIG, PACED, STREAMED, TYPICAL, Plan  # noqa: E402
from procs import (  # noqa: E402
    ForeignLoad,
    Proc,
    Processes,
    clean_env,
    cpu_seconds,
    free_port,
    get_bytes,
    get_json,
    mem_status,
    reset_hwm,
    set_affinity,
    wait_http,
)
from report import analyse_profile, print_report  # noqa: E402
from workload import Scenario, codex_request, loop_in  # noqa: E402


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- processes -------------------------------------------------------------------------------


def codexgate_argv(port: int, upstream: str) -> list[str]:
    script = Path(sys.executable).parent / "codexgate"
    head = [str(script)] if script.exists() else [sys.executable, "-m", "codexgate.cli"]
    return head + [
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--upstream",
        upstream,
        "--no-discover",
        "--log-level",
        "warning",
    ]


def start_gateway(
    procs: Processes, upstream: str, name: str = "gateway", argv: list[str] | None = None
) -> tuple[Proc, str]:
    port = free_port()
    if argv is None:
        argv = codexgate_argv(port, upstream)
    else:
        argv = argv + ["--port", str(port), "--upstream", upstream]
    proc = procs.start(name, argv)
    base = f"http://127.0.0.1:{port}"
    wait_http(proc, base + "/healthz")
    return proc, base


# -- sections --------------------------------------------------------------------------------


class Bench:
    def __init__(
        self, plan: Plan, procs: Processes, up_proc: Proc, up_base: str, gw_proc: Proc, gw_base: str
    ) -> None:
        self.plan = plan
        self.procs = procs
        self.up_proc, self.up_base = up_proc, up_base
        self.gw_proc, self.gw_base = gw_proc, gw_base
        self.up_v1 = up_base + "/v1"
        self.gw_url = gw_base + "/v1/responses"
        self.up_url = self.up_v1 + "/chat/completions"
        self.typical_req = codex_request(TYPICAL)
        self.bodies: dict[str, tuple[bytes, bytes]] = {}
        self.captured: dict[tuple[int, int], tuple[str, bytes]] = {}
        self.r: dict[str, Any] = {}
        self.cpus = sorted(os.sched_getaffinity(0))
        self.workdir = Path(tempfile.mkdtemp(prefix="bench-"))  # removed at the end, even on a signal
        procs.paths.append(str(self.workdir))
        self.pinned = ""

    def pin(self, on: bool) -> None:
        """For the latency sections: the fake upstream on its own CPU, so that it never holds the
        CPU the gateway needs (on a 2-CPU machine the scheduler otherwise often wakes the gateway
        on the upstream's CPU and lets it wait until the upstream's burst is sent, which says
        nothing about the gateway); the gateway and this client on the other CPU(s)."""
        cpus = self.cpus
        if on and len(cpus) >= 2:
            up, gw, me = {cpus[0]}, {cpus[1]}, {cpus[2] if len(cpus) > 2 else cpus[1]}
            self.pinned = f"fake upstream on CPU {cpus[0]}, gateway on {cpus[1]}, client on {min(me)}"
        else:
            up = gw = me = set(cpus)
            self.pinned = ""
        for pid, mask in ((self.up_proc.pid, up), (self.gw_proc.pid, gw), (0, me)):
            try:
                set_affinity(pid, mask)
            except OSError:
                pass

    def bodies_for(self, sc: Scenario, history_bytes: int = 0, seed: int = 7) -> tuple[bytes, bytes]:
        """(Responses body for the gateway, the chat body the gateway sends upstream for it).
        The chat body is the one captured by `capture` with the model name swapped."""
        key = f"{sc.model}/{history_bytes}/{seed}"
        if key not in self.bodies:
            req = orjson.dumps(codex_request(sc, history_bytes=history_bytes, seed=seed))
            model, chat = self.captured[history_bytes, seed]
            old, new = b'"model":' + orjson.dumps(model), b'"model":' + orjson.dumps(sc.model)
            if chat.count(old) != 1:
                raise RuntimeError(f"cannot find the model name once in the captured chat body ({model})")
            self.bodies[key] = (req, chat.replace(old, new))
        return self.bodies[key]

    def up_stats(self) -> dict[str, Any]:
        return get_json(self.up_base + "/bench/stats")

    async def prepare(self, session: Any) -> None:
        """Capture the chat body the gateway sends upstream for the typical and the 1 MB
        request (the direct client sends exactly that), then check one stream each way."""
        out = {}
        for label, sc, hist in (("typical", TYPICAL, 0), ("1MB", BIG, 1_000_000)):
            out[label] = await self.capture(session, sc, hist)
        self.r["equivalence"] = out

    async def capture(self, session: Any, sc: Scenario, hist: int, seed: int = 7) -> dict[str, Any]:
        """Capture the chat body the gateway sends upstream for this request, then check one
        stream each way."""
        gw_body = orjson.dumps(codex_request(sc, history_bytes=hist, seed=seed))
        r1 = await stream_once(session, self.gw_url, gw_body, GATEWAY)
        seen_gw = get_json(self.up_base + "/bench/last")
        self.captured[hist, seed] = (sc.model, get_bytes(self.up_base + "/bench/last-body"))
        gw_body, chat = self.bodies_for(sc, hist, seed)
        r2 = await stream_once(session, self.up_url, chat, DIRECT)
        seen_direct = get_json(self.up_base + "/bench/last")
        if not (r1.ok and r2.ok):
            raise RuntimeError(f"warm-up request failed: gateway {r1.error!r}, direct {r2.error!r}")
        return {
            "same": seen_gw["sha256"] == seen_direct["sha256"],
            "responses_bytes": len(gw_body),
            "chat_bytes": len(chat),
            "gw_events": r1.events,
            "expected_gw_events": sc.gateway_events(),
            "direct_events": r2.events,
            "expected_direct_events": sc.upstream_events(),
        }

    async def latency(self, session: Any, key: str, sc: Scenario, history: int, n: int, warmup: int) -> None:
        gw_body, chat = self.bodies_for(sc, history)
        gw: list[StreamResult] = []
        direct: list[StreamResult] = []
        for i in range(warmup + n):
            # alternate which path goes first so neither always follows the other
            order = ((GATEWAY, self.gw_url, gw_body, gw), (DIRECT, self.up_url, chat, direct))
            for kind, url, body, sink in order if i % 2 else order[::-1]:
                res = await stream_once(session, url, body, kind)
                if i >= warmup:
                    sink.append(res)
        out: dict[str, Any] = {
            "n": n,
            "failed_gw": sum(not r.ok for r in gw),
            "failed_direct": sum(not r.ok for r in direct),
            "error": next((r.error for r in gw + direct if not r.ok), ""),
            "responses_bytes": len(gw_body),
            "chat_bytes": len(chat),
        }
        for metric in ("ttfb", "first_delta", "total"):
            g = [getattr(r, metric) * 1e3 for r in gw if r.ok]
            d = [getattr(r, metric) * 1e3 for r in direct if r.ok]
            for q, qn in ((0.5, "p50"), (0.9, "p90")):
                out[f"{metric}_{qn}_gw"] = pct(g, q)
                out[f"{metric}_{qn}_direct"] = pct(d, q)
                out[f"{metric}_{qn}_added"] = pct(g, q) - pct(d, q)
        self.r[key] = out

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
    ) -> None:
        gw_body, chat = self.bodies_for(sc, *history)
        url, body = (gw_url or self.gw_url, gw_body) if kind == GATEWAY else (self.up_url, chat)
        gw_proc = gw_proc or self.gw_proc
        # warm the pools (connections on both hops) outside the measurement
        await run_load(
            session, url, body, kind, concurrency=concurrency, max_streams=concurrency, max_seconds=30
        )
        await asyncio.sleep(0.3)
        gc.collect()
        s0 = self.up_stats()
        up0, gw0, me0 = cpu_seconds(self.up_proc.pid), cpu_seconds(gw_proc.pid), time.process_time()
        res: LoadResult = await run_load(
            session, url, body, kind, concurrency=concurrency, max_streams=streams, max_seconds=seconds
        )
        await asyncio.sleep(0.2)  # the gateway drains [DONE] after the terminal event
        up1, gw1, me1 = cpu_seconds(self.up_proc.pid), cpu_seconds(gw_proc.pid), time.process_time()
        s1 = self.up_stats()
        up_events = s1["events"] - s0["events"]
        expected = sc.gateway_events() if kind == GATEWAY else sc.upstream_events()
        out = {
            "streams": len(res.results),
            "ok": res.ok,
            "failed": res.failed,
            "error": res.first_error(),
            "wall_s": res.wall,
            "streams_per_s": res.ok / res.wall if res.wall else 0.0,
            "events": res.events,
            "expected_events": expected * len(res.results),
            "events_per_s": res.events / res.wall if res.wall else 0.0,
            "up_events": up_events,
            "up_cpu_s": up1 - up0,
            "up_us_per_event": (up1 - up0) / up_events * 1e6 if up_events else float("nan"),
            "client_us_per_event": (me1 - me0) / res.events * 1e6 if res.events else float("nan"),
            "reads_per_stream": sum(r.reads for r in res.results) / max(1, len(res.results)),
        }
        if kind == GATEWAY:
            out["gw_cpu_s"] = gw1 - gw0
            out["gw_us_per_event"] = (gw1 - gw0) / res.events * 1e6 if res.events else float("nan")
            out["gw_us_per_up_event"] = (gw1 - gw0) / up_events * 1e6 if up_events else float("nan")
            out["gw_ms_per_stream"] = (gw1 - gw0) / max(1, res.ok) * 1e3
            out["gw_cores"] = (gw1 - gw0) / res.wall if res.wall else 0.0
        self.r[key] = out

    async def memory(self, session: Any) -> None:
        """A fresh gateway holding `mem_streams` slow streams at once."""
        plan = self.plan
        sc = Scenario("text", plan.mem_chunks, 4, 50)
        proc, base = start_gateway(self.procs, self.up_v1, name="gateway-mem")
        try:
            url = base + "/v1/responses"
            gw_body, _ = self.bodies_for(sc)
            warm_body, _ = self.bodies_for(TYPICAL)
            for _ in range(5):
                await stream_once(session, url, warm_body, GATEWAY)
            gc.collect()
            await asyncio.sleep(1.0)
            idle = mem_status(proc.pid)
            reset_ok = reset_hwm(proc.pid)
            after_reset = mem_status(proc.pid)
            open_now = 0
            max_open = 0
            samples: list[int] = []

            def on_open() -> None:
                nonlocal open_now, max_open
                open_now += 1
                max_open = max(max_open, open_now)

            def on_close() -> None:
                nonlocal open_now
                open_now -= 1

            async def sampler() -> None:
                while True:
                    samples.append(mem_status(proc.pid).get("VmRSS", 0))
                    await asyncio.sleep(0.1)

            sampling = asyncio.create_task(sampler())
            c0 = cpu_seconds(proc.pid)
            t0 = time.perf_counter()
            results = await asyncio.gather(
                *(
                    stream_once(session, url, gw_body, GATEWAY, on_open=on_open, on_close=on_close)
                    for _ in range(plan.mem_streams)
                )
            )
            wall = time.perf_counter() - t0
            cpu = cpu_seconds(proc.pid) - c0
            sampling.cancel()
            peak = mem_status(proc.pid)
            await asyncio.sleep(1.0)
            gc.collect()
            after = mem_status(proc.pid)
            events = sum(r.events for r in results)
            ok = sum(r.ok for r in results)
            self.r["memory"] = {
                "streams": plan.mem_streams,
                "ok": ok,
                "failed": plan.mem_streams - ok,
                "error": next((r.error for r in results if not r.ok), ""),
                "chunks": sc.chunks,
                "delay_ms": sc.delay_ms,
                "max_open": max_open,
                "wall_s": wall,
                "min_stream_s": min(r.total for r in results),
                "idle_rss": idle.get("VmRSS", 0),
                "hwm_reset": reset_ok,
                "hwm_base": after_reset.get("VmHWM", 0),
                "peak_hwm": peak.get("VmHWM", 0),
                "peak_sampled": max(samples, default=0),
                "after_rss": after.get("VmRSS", 0),
                "gw_us_per_event": cpu / events * 1e6 if events else float("nan"),
                "events": events,
                "request_bytes": len(gw_body),
            }
        finally:
            self.procs.stop(proc)

    async def servers(self, session: Any) -> None:
        """The same app under other uvicorn parsers / loops (bench/gateway_server.py)."""
        out = {}
        variants = (("httptools", "uvloop"), ("h11", "uvloop"), ("httptools", "asyncio"))
        for http, loop in variants:
            argv = [sys.executable, str(ROOT / "bench" / "gateway_server.py"), "--http", http, "--loop", loop]
            proc, base = start_gateway(self.procs, self.up_v1, name=f"gw-{http}-{loop}", argv=argv)
            try:
                url = base + "/v1/responses"
                await self.load(
                    session,
                    "_srv_sat",
                    GATEWAY,
                    TYPICAL,
                    streams=self.plan.server_streams,
                    seconds=self.plan.c64_seconds,
                    gw_proc=proc,
                    gw_url=url,
                )
                await self.load(
                    session,
                    "_srv_paced",
                    GATEWAY,
                    PACED,
                    streams=10**9,
                    seconds=self.plan.paced_seconds,
                    gw_proc=proc,
                    gw_url=url,
                )
                out[f"{http}+{loop}"] = {
                    "saturated": self.r.pop("_srv_sat"),
                    "paced": self.r.pop("_srv_paced"),
                }
            finally:
                self.procs.stop(proc)
        self.r["servers"] = out

    async def profile(self, session: Any, seconds: float) -> None:
        """py-spy on the main gateway under c=64 load, saturated then paced (separate runs, not
        part of the measurements above: sampling pauses the process)."""
        uv = shutil.which("uv")
        if uv is None:
            self.r["profile"] = {"error": "uv not found"}
            return
        out: dict[str, Any] = {}
        for label, sc in (("saturated", TYPICAL), ("paced", PACED)):
            out_file = self.workdir / f"pyspy-{label}.txt"
            gw_body, _ = self.bodies_for(sc)
            argv = [
                uv,
                "run",
                "--no-sync",
                "--with",
                "py-spy",
                "py-spy",
                "record",
                "--pid",
                str(self.gw_proc.pid),
                "--rate",
                "250",
                "--duration",
                str(int(seconds)),
                "--format",
                "raw",
                "--nolineno",
                "-o",
                str(out_file),
            ]
            spy = self.procs.start("py-spy", argv, env=dict(os.environ))
            try:
                load = asyncio.create_task(
                    run_load(
                        session,
                        self.gw_url,
                        gw_body,
                        GATEWAY,
                        concurrency=64,
                        max_streams=10**9,
                        max_seconds=seconds + 6,
                    )
                )
                deadline = time.monotonic() + seconds + 60
                while spy.alive() and time.monotonic() < deadline:
                    await asyncio.sleep(0.2)
                log_tail = spy.log_tail()
                res = await load
            finally:
                self.procs.stop(spy)
            text = out_file.read_text() if out_file.exists() else ""
            out[label] = analyse_profile(text) | {
                "streams": res.ok,
                "failed": res.failed,
                "log": log_tail if not text else "",
            }
        self.r["profile"] = out


def libs_subprocess(what: str, bodies: Path, quick: bool, with_msgspec: bool = False) -> dict[str, Any]:
    """`bench/libs.py <what>` in a fresh process (one JSON line out); for JSON, with msgspec
    added by `uv run --with msgspec` (nothing in the project changes), else without it."""
    argv_base = [str(ROOT / "bench" / "libs.py"), what, str(bodies)] + (["--quick"] if quick else [])
    uv = shutil.which("uv")
    attempts = []
    if uv and with_msgspec:
        attempts.append([uv, "run", "--no-sync", "--with", "msgspec", "python"] + argv_base)
    attempts.append([sys.executable] + argv_base)
    last = ""
    for argv in attempts:
        try:
            done = subprocess.run(
                argv, cwd=ROOT, capture_output=True, timeout=240, stdin=subprocess.DEVNULL, env=clean_env()
            )
        except subprocess.TimeoutExpired:
            last = "timed out"
            continue
        if done.returncode == 0:
            return orjson.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]
        last = done.stderr.decode(errors="replace")[-500:]
    return {"error": last}


async def run_all(b: Bench, args: argparse.Namespace) -> None:
    plan = b.plan
    errors: dict[str, str] = {}
    b.r["_errors"] = errors
    session = new_session()

    foreign: dict[str, float] = {}
    b.r["_foreign"] = foreign

    async def section(key: str, coro: Any, limit: float) -> None:
        log(f"{key} ...")
        t0 = time.monotonic()
        load = ForeignLoad()
        try:
            async with asyncio.timeout(limit):
                await coro
        except Exception as exc:  # report and go on: one broken section must not hide the rest
            errors[key] = f"{type(exc).__name__}: {exc}"
            traceback.print_exc()
        foreign[key] = load.cores()
        log(f"{key} done in {time.monotonic() - t0:.1f}s (other processes: {foreign[key]:.2f} cores)")

    async def http_clients() -> None:
        sc = Scenario("text", 100 if plan.quick else 150, 4, 2)
        b.r["http_clients"] = await libs.http_clients_bench(b.up_v1, b.bodies_for(sc)[1], sc, plan.quick)

    bodies_dir = b.workdir / "bodies"
    bodies_dir.mkdir()

    async def in_thread(key: str, what: str, with_msgspec: bool) -> None:
        for name, (gw_body, chat) in (
            ("typical", b.bodies_for(TYPICAL)),
            ("big", b.bodies_for(BIG, 1_000_000)),
        ):
            (bodies_dir / f"{name}.json").write_bytes(gw_body)
            (bodies_dir / f"{name}.chat.json").write_bytes(chat)
        b.r[key] = await asyncio.to_thread(libs_subprocess, what, bodies_dir, plan.quick, with_msgspec)

    async def relay_sections() -> None:
        """Section 6: the bare relay, this tree and --base-src side by side."""
        try:
            cmp = compare.Compare(b, args.base_src)
        except Exception as exc:
            errors["relay"] = f"{type(exc).__name__}: {exc}"
            return
        try:
            await section("relay_prepare", cmp.prepare(session), 120)
            if "relay_prepare" in errors:
                return
            n1, nbig = (40, 12) if plan.quick else (150, 40)
            await section(
                "relay_first_token",
                cmp.latency(session, "first_token", compare.FIRST_TOKEN, compare.CODEX_50KB, n1),
                240,
            )
            await section("relay_big", cmp.latency(session, "big", compare.BIG, compare.ONE_MB, nbig), 240)
            rounds, secs, paced = (1, 4.0, 3.0) if plan.quick else (2, 10.0, 6.0)
            await section("relay_cpu", cmp.cpu(session, rounds, secs, paced), 400)
            await section("relay_memory", cmp.memory(session, 500, 60 if plan.quick else 100), 400)
        finally:
            cmp.unpin()
            cmp.stop()

    try:
        await section("equivalence", b.prepare(session), 60)
        if "equivalence" in errors:
            return  # nothing else can run without the captured bodies
        if args.relay_only:
            await relay_sections()
            return
        b.pin(not args.no_pin)
        b.r["pinned"] = b.pinned
        await section("c1s", b.latency(session, "c1s", STREAMED, 0, plan.c1_streamed, 5), 180)
        await section("c1", b.latency(session, "c1", TYPICAL, 0, plan.c1_requests, 20), 120)
        await section("big", b.latency(session, "big", BIG, 1_000_000, plan.big_requests, 3), 120)
        b.pin(False)
        await section(
            "c64_direct",
            b.load(
                session, "c64_direct", DIRECT, TYPICAL, streams=plan.c64_streams, seconds=plan.c64_seconds
            ),
            120,
        )
        await section(
            "c64_gw",
            b.load(session, "c64_gw", GATEWAY, TYPICAL, streams=plan.c64_streams, seconds=plan.c64_seconds),
            120,
        )
        await section(
            "c64_paced",
            b.load(session, "c64_paced", GATEWAY, PACED, streams=10**9, seconds=plan.paced_seconds),
            120,
        )
        await section("memory", b.memory(session), 180)
        if not args.no_relay:
            await relay_sections()
        await section("http_clients", http_clients(), 120)
        if not args.no_servers:
            await section("servers", b.servers(session), 300)
        await section("pipeline", in_thread("pipeline", "pipeline", False), 300)
        await section("json_libs", in_thread("json_libs", "json", True), 300)
        if args.profile:
            await section("profile", b.profile(session, 5.0 if plan.quick else 10.0), 240)
    finally:
        await session.close()
        shutil.rmtree(b.workdir, ignore_errors=True)


# -- main ------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="~1 minute version")
    parser.add_argument(
        "--profile", action="store_true", help="also profile the gateway with py-spy (via uv)"
    )
    parser.add_argument("--no-servers", action="store_true", help="skip the uvicorn server comparison")
    parser.add_argument(
        "--no-pin", action="store_true", help="do not pin processes to CPUs in sections 1 and 4"
    )
    parser.add_argument("--json", type=Path, help="also write the raw results to this file")
    parser.add_argument(
        "--src",
        type=Path,
        metavar="DIR",
        help="benchmark the codexgate package in DIR (a src/ folder) instead of the repo's",
    )
    parser.add_argument(
        "--base-src",
        type=Path,
        metavar="DIR",
        help="in section 6, also measure the codexgate package in DIR (e.g. an older commit's src/)",
    )
    parser.add_argument(
        "--relay-only", action="store_true", help="run only section 6 (against the bare relay)"
    )
    parser.add_argument("--no-relay", action="store_true", help="skip section 6 (against the bare relay)")
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="first wait up to this long for other processes to leave the CPUs alone",
    )
    args = parser.parse_args()
    plan = Plan.make(args.quick)
    if args.base_src:
        args.base_src = args.base_src.resolve()
        if not (args.base_src / "codexgate" / "__init__.py").exists():
            parser.error(f"{args.base_src} has no codexgate package")
    if args.src:
        src = args.src.resolve()
        if not (src / "codexgate" / "__init__.py").exists():
            parser.error(f"{src} has no codexgate package")
        procs_module.SRC_OVERRIDE = str(src)
        sys.path.insert(0, str(src))
    for sc in (TYPICAL, STREAMED, PACED, BIG, compare.FIRST_TOKEN, Scenario("text", plan.mem_chunks, 4, 50)):
        unit = loop_in(sc.text(), sc.chars)
        if unit is not None:
            parser.error(f"the answer of {sc.model} is a loop the gateway would stop: {unit[:60]!r}")
    t0 = time.monotonic()
    deadline = time.monotonic() + args.wait_quiet
    while True:
        probe = ForeignLoad()
        time.sleep(1.0 if not args.wait_quiet else 3.0)
        cores = probe.cores()
        if cores < 0.05:
            break
        if time.monotonic() >= deadline:
            log(f"WARNING: other processes are using {cores:.2f} cores; the figures will be skewed")
            break
        log(f"other processes are using {cores:.2f} cores; waiting for a quiet machine")
    with Processes() as procs:
        up_port = free_port()
        up_proc = procs.start(
            "fake-upstream",
            [sys.executable, str(ROOT / "bench" / "fake_upstream_server.py"), "--port", str(up_port)],
        )
        up_base = f"http://127.0.0.1:{up_port}"
        wait_http(up_proc, up_base + "/bench/stats")
        gw_proc, gw_base = start_gateway(procs, up_base + "/v1")
        log(f"fake upstream pid {up_proc.pid} at {up_base}; gateway pid {gw_proc.pid} at {gw_base}")
        bench = Bench(plan, procs, up_proc, up_base, gw_proc, gw_base)
        bench.r["source"] = procs_module.source_info()
        uvloop.run(run_all(bench, args))
        for proc in (up_proc, gw_proc):
            if not proc.alive():
                bench.r["_errors"][proc.name] = f"{proc.name} died: {proc.log_tail(5)}"
    elapsed = time.monotonic() - t0
    print_report(bench.r, plan, elapsed)
    if args.json:
        args.json.write_text(orjson.dumps(bench.r, option=orjson.OPT_INDENT_2).decode())
    errors = bench.r.get("_errors", {})
    failures = sum(
        bench.r.get(k, {}).get("failed", 0) for k in ("c64_gw", "c64_direct", "c64_paced", "memory")
    )
    failures += sum(bench.r.get(k, {}).get("failed_gw", 0) for k in ("c1s", "c1", "big"))
    failures += compare.failures(bench.r)
    if client_module.LOOP_STOPS:
        # The bench's answers are aperiodic (workload.answer_text): a loop stop here means the
        # workload or the guard broke, and every figure above measured a failure.
        print(
            f"\n*** FAILED: {client_module.LOOP_STOPS} stream(s) ended in response.failed "
            "(model_output_loop): the loop guard stopped a bench answer. The figures are not valid. ***",
            file=sys.stderr,
        )
        return 1
    return 1 if errors or failures else 0


if __name__ == "__main__":
    sys.exit(main())
