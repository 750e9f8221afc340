"""bench/run.py's printed report, and the reading of a py-spy profile (bench/under_load.py and
bench/per_core.py read theirs with `analyse_profile` too)."""

from __future__ import annotations

import os
import re
import sys
from collections import Counter
from typing import Any

import compare
from plan import BIG, MB, PACED, STREAMED, TYPICAL, Plan

# -- profile analysis ------------------------------------------------------------------------

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*)\)$")
_LOOP = "Runner.run (asyncio/runners.py)"  # with uvloop: time in the loop's C code and syscalls


def _area(path: str) -> str:
    if path.startswith("codexgate") or "/codexgate/" in path:
        return "codexgate"
    head = path.split("/", 1)[0]
    return head if head in ("aiohttp", "uvicorn", "asyncio", "yarl", "multidict", "uuid.py") else "other"


def analyse_profile(text: str) -> dict[str, Any]:
    total = 0
    self_ct: Counter[str] = Counter()
    incl_ct: Counter[str] = Counter()
    area_ct: Counter[str] = Counter()
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = []
        for raw in stack.split(";"):
            m = _FRAME.match(raw)
            frames.append((m["func"], m["file"]) if m else (raw, ""))
        func, path = frames[-1]
        leaf = f"{func} ({path})"
        self_ct[leaf] += n
        area = "event loop C code + syscalls (uvloop)" if leaf == _LOOP else _area(path)
        if area == "uvicorn" and func == "RequestResponseCycle.send":
            area = "uvicorn send (incl. socket write)"
        area_ct[area] += n
        for f, p in {(f, p) for f, p in frames}:
            if _area(p) == "codexgate" and f not in ("<module>", "main", "_serve"):
                incl_ct[f"{f} ({p})"] += n
    if not total:
        return {"samples": 0}

    def pc(c: Counter[str], k: int = 14) -> list[tuple[str, float]]:
        return [(name, v / total * 100) for name, v in c.most_common(k)]

    codexgate_self = Counter({k: v for k, v in self_ct.items() if k.split("(")[-1].startswith("codexgate")})
    return {
        "samples": total,
        "top_self": pc(self_ct, 12),
        "codexgate_self": pc(codexgate_self, 10),
        "codexgate_inclusive": pc(incl_ct, 16),
        "areas": pc(area_ct, 10),
    }


# -- report ----------------------------------------------------------------------------------


def f(x: Any, unit: str = "", digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and x != x):
        return "n/a"
    if isinstance(x, float):
        return f"{x:.{digits}f}{unit}"
    return f"{x}{unit}"


def verdict(ok: bool | None) -> str:
    return "" if ok is None else ("PASS" if ok else "MISS")


def print_report(r: dict[str, Any], plan: Plan, elapsed: float) -> None:
    rows: list[tuple[str, ...]] = []
    W = (50, 12, 12, 13, 11, 4)

    def head(title: str) -> None:
        rows.append(("##", title))

    def row(
        metric: str, gw: str = "", direct: str = "", result: str = "", target: str = "", v: str = ""
    ) -> None:
        rows.append((metric, gw, direct, result, target, v))

    def note(text: str) -> None:
        rows.append(("#", text))

    def cpu_rows(run: dict[str, Any]) -> None:
        per_event = run["gw_us_per_event"]
        row(
            "gateway CPU per event (us)", f(per_event, digits=1), "", "", "~10 us", verdict(per_event <= 10.0)
        )
        row("gateway CPU per upstream chunk (us)", f(run["gw_us_per_up_event"], digits=1))

    def err(key: str) -> bool:
        if key in r.get("_errors", {}):
            note(f"ERROR in {key}: {r['_errors'][key]}"[:200])
            return True
        return key not in r

    def latency_rows(lat: dict[str, Any], target_ms: float, target_label: str) -> None:
        for metric, label in (
            ("ttfb", "time to first byte"),
            ("first_delta", "time to first text delta"),
            ("total", "total time"),
        ):
            for q in ("p50", "p90"):
                target, v = "", ""
                if metric == "first_delta":
                    target = target_label
                    v = verdict(lat[f"{metric}_{q}_added"] <= target_ms)
                row(
                    f"{label} {q} (ms)",
                    f(lat[f"{metric}_{q}_gw"], digits=3),
                    f(lat[f"{metric}_{q}_direct"], digits=3),
                    "+" + f(lat[f"{metric}_{q}_added"], digits=3),
                    target,
                    v,
                )
        row("failed requests (of each path)", f(lat["failed_gw"]), f(lat["failed_direct"]), lat["error"][:13])

    eq = r.get("equivalence", {})
    typ_bytes = eq.get("typical", {}).get("responses_bytes")
    head(f"1. Concurrency 1 (typical Codex turn: {f(typ_bytes)} B request). added = gateway - direct")
    note("pinned: " + r["pinned"] if r.get("pinned") else "processes not pinned to CPUs")
    if not err("c1s"):
        note(
            f"1a. streamed answer: 5 ms prefill, then {STREAMED.chunks} deltas 1 ms apart; "
            f"{r['c1s']['n']} requests per path"
        )
        latency_rows(r["c1s"], 1.5, "<= 1.5 ms")
    if not err("c1"):
        note(
            f"1b. burst answer: {TYPICAL.chunks} deltas back to back (the gateway translates all it read "
            f"before its first write); {r['c1']['n']} requests per path"
        )
        latency_rows(r["c1"], 1.5, "<= 1.5 ms")

    head("2. Concurrency 64. CPU per event = process CPU (utime+stime) / events delivered to clients")
    sat, dsat, paced = r.get("c64_gw"), r.get("c64_direct"), r.get("c64_paced")

    def both(key: str, digits: int) -> tuple[str, str]:
        """The saturated figure through the gateway and, when measured, direct."""
        return f(sat[key], digits=digits), f(dsat[key], digits=digits) if dsat else ""

    if not err("c64_gw"):
        note(
            f"2a. saturated: {TYPICAL.chunks}-delta answers back to back, {sat['streams']} streams; "
            f"direct = client to fake upstream"
        )
        row("streams/s", *both("streams_per_s", 1))
        row("events/s delivered (Responses / chat)", *both("events_per_s", 0))
        cpu_rows(sat)
        row(
            "gateway CPU per stream (ms) / cores busy",
            f(sat["gw_ms_per_stream"], digits=2),
            f(sat["gw_cores"], digits=2),
        )
        row("fake upstream CPU per chunk (us)", *both("up_us_per_event", 1))
        row("bench client CPU per event (us)", *both("client_us_per_event", 1))
        row("client reads per stream (coalescing)", *both("reads_per_stream", 1))
        row(
            "streams ok/failed",
            f"{sat['ok']}/{sat['failed']}",
            f"{dsat['ok']}/{dsat['failed']}" if dsat else "",
        )
        row(
            "SSE events per stream (Responses / chat)",
            f(sat["events"] / max(1, sat["streams"]), digits=1),
            f(dsat["events"] / max(1, dsat["streams"]), digits=1) if dsat else "",
        )
    if not err("c64_paced"):
        note(
            f"2b. paced: {PACED.chunks} deltas {PACED.delay_ms:g} ms apart (tokens as a model streams them), "
            f"{paced['streams']} streams in {plan.paced_seconds:g} s"
        )
        cpu_rows(paced)
        row("fake upstream CPU per chunk (us)", f(paced["up_us_per_event"], digits=1))
        row(
            "client reads per stream; ok/failed",
            f(paced["reads_per_stream"], digits=1),
            "",
            f"{paced['ok']}/{paced['failed']}",
        )

    head("3. Memory: a fresh gateway holding slow streams, all open at once")
    m = r.get("memory")
    if not err("memory"):
        note(
            f"{m['streams']} streams x {m['chunks']} deltas x {m['delay_ms']:g} ms, "
            f"each a {m['request_bytes']} B "
            f"Codex request; VmHWM reset after warm-up: {m['hwm_reset']}"
        )
        row(
            "streams completed (response.completed)",
            f(m["ok"]),
            "",
            f"of {m['streams']}",
            "all 500",
            verdict(m["ok"] == m["streams"] == 500),
        )
        row(
            "max streams open at once (client side)",
            f(m["max_open"]),
            "",
            "",
            "500",
            verdict(m["max_open"] == 500),
        )
        row("idle RSS after warm-up (MB)", f(m["idle_rss"] / MB, digits=1))
        row(
            "peak RSS, VmHWM (MB)",
            f(m["peak_hwm"] / MB, digits=1),
            "",
            "",
            "< 150 MB",
            verdict(m["peak_hwm"] < 150 * MB),
        )
        row(
            "peak minus idle (MB) / per stream",
            f((m["peak_hwm"] - m["idle_rss"]) / MB, digits=1),
            "",
            f((m["peak_hwm"] - m["idle_rss"]) / m["streams"] / 1024, " KB", 1),
        )
        row("RSS once all closed (MB)", f(m["after_rss"] / MB, digits=1))
        row("gateway CPU per event here (us)", f(m["gw_us_per_event"], digits=1))

    big = r.get("big")
    e1 = eq.get("1MB", {})
    head(
        f"4. 1 MB Codex history ({f(e1.get('responses_bytes'))} B Responses body; direct sends the "
        f"{f(e1.get('chat_bytes'))} B chat body)"
    )
    if not err("big"):
        note(
            f"answer: 5 ms prefill, {BIG.chunks} deltas 1 ms apart, a shell call; "
            f"{big['n']} requests per path"
        )
        latency_rows(big, 5.0, "< 5 ms")
    for label, e in eq.items():
        row(f"direct body == what the gateway sent upstream ({label})", "", "", "yes" if e["same"] else "NO")

    head("5. Libraries, measured in this run")
    js = r.get("json_libs")
    if not err("json_libs"):
        if "error" in js:
            note("JSON: " + js["error"][:150])
        else:
            row(
                f"JSON (chunk {js['chunk_bytes']} B, event {js['event_bytes']} B, 1 MB)",
                "dec chunk us",
                "enc event us",
                "dec 1MB ms",
                "enc 1MB ms",
            )
            for name, v in js["libs"].items():
                row(
                    f"  {name}",
                    f(v["chunk_decode_us"]),
                    f(v["event_encode_us"]),
                    f(v["big_decode_ms"]),
                    f(v["big_encode_ms"]),
                )
            if "msgspec" not in js["libs"]:
                note("  msgspec: not measured (uv run --with msgspec failed)")
    hc = r.get("http_clients")
    if not err("http_clients"):
        row(
            f"HTTP client reading SSE ({hc['concurrency']} streams, {hc['delay_ms']:g} ms/chunk)",
            "aiohttp",
            "httpx",
            "fail a/h",
        )
        row(
            "  client CPU per chunk (us)",
            f(hc["us_per_event"]["aiohttp"], digits=1),
            f(hc["us_per_event"]["httpx"], digits=1),
            f"{hc['failures']['aiohttp']}/{hc['failures']['httpx']}",
        )
    srv = r.get("servers")
    if not err("servers"):
        row("uvicorn server under the gateway (c=64)", "sat us/ev", "sat strm/s", "paced us/ev")
        for name, sv in srv.items():
            row(
                f"  {name}",
                f(sv["saturated"]["gw_us_per_event"], digits=1),
                f(sv["saturated"]["streams_per_s"], digits=1),
                f(sv["paced"]["gw_us_per_event"], digits=1),
                "",
                "" if sv["saturated"]["failed"] + sv["paced"]["failed"] == 0 else "FAIL",
            )
    pipe = r.get("pipeline")
    if not err("pipeline"):
        if "error" in pipe:
            note("pipeline: " + pipe["error"][:150])
        else:
            note("codexgate's own Python, in a fresh process, no I/O (the floor under section 2):")
            st = pipe["stream"]
            if "error" in st:
                note("  per-chunk floor: " + st["error"][:150])
            else:
                row("  per upstream chunk, decode..encode (us)", f(st["per_upstream_event_us"], digits=2))
                row("  per Responses event (us)", f(st["per_gateway_event_us"], digits=2))
                row(
                    "  per stream: call setup / 104 chunks (us)",
                    f(st["call_setup_us"], digits=0),
                    f(st["per_stream_us"], digits=0),
                )
            for label, key in (("typical", "prep_typical"), ("1 MB", "prep_big")):
                p = pipe[key]
                if "error" in p:
                    note(f"  request {label}: " + p["error"][:150])
                    continue
                row(
                    f"  request {label} (ms): total/decode/valid.",
                    f(p["total_ms"], digits=3),
                    f(p["decode_ms"], digits=3),
                    f(p["validate_ms"], digits=3),
                )
                row(
                    "    chat call (translate+encode+setup) / encode",
                    f(p["call_ms"], digits=3),
                    f(p["encode_ms"], digits=3),
                )
            lb = pipe["loopback"]
            row(
                "  kernel: 250 B loopback send() burst/paced us",
                f(lb["burst_us"], digits=1),
                f(lb["paced_us"], digits=1),
            )

    prof = r.get("profile")
    if prof:
        for label, pr in prof.items():
            if "top_self" not in pr:
                head(f"Profile ({label}): " + str(pr.get("error") or pr.get("log") or "no samples")[:200])
                continue
            head(
                f"Profile, py-spy, gateway at c=64 {label} ({pr['samples']} samples, {pr['streams']} streams)"
            )
            for title, key in (
                ("time by where the leaf frame is", "areas"),
                ("hottest functions (self)", "top_self"),
                ("codexgate functions (inclusive)", "codexgate_inclusive"),
                ("codexgate functions (self)", "codexgate_self"),
            ):
                row(title, "% samples")
                for k, v in pr[key]:
                    row(f"  {k}", f(v, "%", 1))

    busy = {k: v for k, v in r.get("_foreign", {}).items() if v >= 0.05}
    line = "-" * (sum(W) + 2 * (len(W) - 1))
    print()
    print(
        f"codexgate benchmark ({'quick' if plan.quick else 'full'}; {elapsed:.0f} s; {os.cpu_count()} cores; "
        f"python {sys.version.split()[0]}). Gateway = `codexgate serve` in its own process, "
        "fake upstream in another,"
    )
    print("load generator (aiohttp, uvloop) in this one; all on loopback.")
    print(r.get("source", ""))
    if busy:
        print(
            "WARNING: other processes used CPU during the run (average cores, by section): "
            + ", ".join(f"{k} {v:.2f}" for k, v in busy.items())
            + ". Those figures are skewed; run again on a quiet machine."
        )
    else:
        print("Other processes on the machine stayed below 0.05 cores in every section.")
    print(line)
    print(
        "  ".join(
            h.ljust(w) if i == 0 else h.rjust(w)
            for i, (h, w) in enumerate(
                zip(("metric", "gateway", "direct", "added/result", "target", "ok"), W, strict=True)
            )
        )
    )
    for rw in rows:
        if rw[0] == "##":
            print(line)
            print(rw[1])
            continue
        if rw[0] == "#":
            print(rw[1])
            continue
        cells = list(rw) + [""] * (len(W) - len(rw))
        metric = cells[0]
        if len(metric) > W[0]:
            print(metric)
            metric = ""
        print(
            "  ".join(
                [metric.ljust(W[0])] + [c.rjust(w) for c, w in zip(cells[1:], W[1:], strict=True)]
            ).rstrip()
        )
    print(line)
    relay = compare.report(r)
    if relay:
        print("\n".join(relay))
        print(line)
