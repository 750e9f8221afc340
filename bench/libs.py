"""Micro-benchmarks behind the stack choice, and the gateway's own pure-Python floor.

* JSON: orjson vs stdlib json vs msgspec, decode + encode of one stream chunk/event and of the
  1 MB request. Run as `python bench/libs.py json BODIES_DIR [--quick]` (one JSON line out) so
  that bench/run.py can run it under `uv run --with msgspec` without touching the project.
  BODIES_DIR holds the request bodies bench/run.py captured (see `load_bodies`).
* HTTP clients: aiohttp vs httpx reading the same paced SSE stream from the fake upstream,
  CPU of this process per upstream event.
* Pipeline (`python bench/libs.py pipeline BODIES_DIR`, a fresh process): codexgate's own request
  preparation and per-chunk translation, no I/O: what the gateway spends before sockets, HTTP
  parsers and the event loop are counted; and the kernel's floor, one loopback `send()`.
"""

from __future__ import annotations

import asyncio
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for p in (str(ROOT), str(ROOT / "bench")):
    if p not in sys.path:
        sys.path.insert(0, p)

import orjson  # noqa: E402
from workload import Scenario  # noqa: E402

# -- timing ----------------------------------------------------------------------------------


def per_op(fn: Callable[[], Any], *, budget: float = 0.15, repeats: int = 5) -> float:
    """Seconds per call: calibrated loop of ~budget/repeats s, best of `repeats`."""
    fn()
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t0
        if dt > budget / repeats / 4 or n >= 1 << 22:
            break
        n *= 4
    n = max(1, int(n * (budget / repeats) / max(dt, 1e-9)))
    best = float("inf")
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            best = min(best, (time.perf_counter() - t0) / n)
    finally:
        if gc_was:
            gc.enable()
    return best


# -- payloads --------------------------------------------------------------------------------


def sample_chunk() -> bytes:
    """One `chat.completion.chunk` text delta exactly as the fake upstream renders it."""
    from tests.support.fake_upstream import _Completion, render_stream, text_reply

    from codexgate.wire.sse import SSEDecoder

    sc = Scenario("text", 4, 4, 0)
    request = {"model": sc.model, "messages": [], "stream": True, "stream_options": {"include_usage": True}}
    completion = _Completion(
        id="chatcmpl-fake000001a1b2c3d4e5f6", created=1700000000, model=sc.model, usage=None
    )
    events = render_stream(text_reply(sc.text()), request, completion)
    return SSEDecoder().feed(events[1])[0]


def sample_event() -> dict[str, Any]:
    return {
        "type": "response.output_text.delta",
        "sequence_number": 17,
        "item_id": "msg_0f8e7d6c5b4a39281706f5e4d3c2b1a0",
        "output_index": 0,
        "content_index": 0,
        "delta": " the",
        "logprobs": [],
    }


def load_bodies(folder: Path) -> dict[str, bytes]:
    """The request bodies bench/run.py saved: `typical.json`/`big.json` (Responses) and
    `typical.chat.json`/`big.chat.json` (what the gateway sent upstream for them)."""
    return {p.name.removesuffix(".json"): p.read_bytes() for p in folder.glob("*.json")}


# -- JSON ------------------------------------------------------------------------------------


def json_bench(bodies: dict[str, bytes], quick: bool) -> dict[str, Any]:
    budget = 0.06 if quick else 0.2
    chunk = sample_chunk()
    event = sample_event()
    big_in, big_chat = bodies["big"], bodies["big.chat"]
    big_chat_obj = orjson.loads(big_chat)

    def std_dumps(obj: Any) -> bytes:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()

    libs: dict[str, tuple[Callable[[bytes], Any], Callable[[Any], bytes]]] = {
        "orjson": (orjson.loads, orjson.dumps),
        "json (stdlib)": (json.loads, std_dumps),
    }
    try:
        import msgspec

        dec, enc = msgspec.json.Decoder(), msgspec.json.Encoder()
        libs["msgspec"] = (dec.decode, enc.encode)
    except ImportError:
        pass
    out: dict[str, Any] = {
        "chunk_bytes": len(chunk),
        "event_bytes": len(orjson.dumps(event)),
        "big_in_bytes": len(big_in),
        "big_chat_bytes": len(big_chat),
        "libs": {},
    }
    for name, (loads, dumps) in libs.items():
        out["libs"][name] = {
            "chunk_decode_us": per_op(partial(loads, chunk), budget=budget) * 1e6,
            "event_encode_us": per_op(partial(dumps, event), budget=budget) * 1e6,
            "big_decode_ms": per_op(partial(loads, big_in), budget=budget * 3, repeats=3) * 1e3,
            "big_encode_ms": per_op(partial(dumps, big_chat_obj), budget=budget * 3, repeats=3) * 1e3,
        }
    return out


# -- codexgate's pure-Python floor -----------------------------------------------------------


def _backend() -> Any:
    """The gateway's chat backend as `codexgate serve` builds it (public entry points only)."""
    from codexgate.app import build_app
    from codexgate.config import load_settings

    settings = load_settings({"upstream": "http://127.0.0.1:1/v1", "discover": False}, environ={})
    return next(iter(build_app(settings, environ={}).router.backends.values()))


def request_prep_ms(body: bytes, chat: bytes, *, budget: float) -> dict[str, float]:
    """Per request, what happens before the upstream request is sent: decode, validate, then
    the chat call (translate + encode the upstream body + set up the stream translator)."""
    from codexgate.wire.checks import decode_json_object
    from codexgate.wire.responses import parse_request

    decode_json_body = partial(decode_json_object, what="The request body")

    backend = _backend()
    data = decode_json_body(body)
    req = parse_request(orjson.loads(body))
    chat_obj = orjson.loads(chat)

    def whole() -> None:
        r = parse_request(decode_json_body(body))
        backend.call(r, r.model)

    return {
        "decode_ms": per_op(partial(decode_json_body, body), budget=budget) * 1e3,
        "validate_ms": per_op(partial(parse_request, data), budget=budget) * 1e3,
        "call_ms": per_op(partial(backend.call, req, req.model), budget=budget) * 1e3,
        "encode_ms": per_op(partial(orjson.dumps, chat_obj), budget=budget) * 1e3,
        "total_ms": per_op(whole, budget=budget) * 1e3,
    }


def stream_translate_us(body: bytes, chat: bytes, *, budget: float) -> dict[str, float]:
    """Per upstream SSE event: SSE decode + JSON decode + translate + SSE encode, with the
    gateway's own per-read step (`ChatCall._feed`), one event per read (as paced tokens
    arrive)."""
    from tests.support.fake_upstream import _Completion, _usage_for, render_stream
    from workload import reply_for

    from codexgate.wire.responses import parse_request
    from codexgate.wire.sse import SSEDecoder, encode_events

    chat_obj = orjson.loads(chat)
    reply = reply_for(chat_obj)
    completion = _Completion(
        id="chatcmpl-fake000001a1b2c3d4e5f6", created=1700000000, model=chat_obj["model"], usage=None
    )
    completion.usage = _usage_for(reply, chat_obj)
    raw_events = render_stream(reply, chat_obj, completion)
    backend = _backend()
    req = parse_request(orjson.loads(body))
    out_events = 0

    def one_stream() -> None:
        nonlocal out_events
        call = backend.call(req, req.model)
        call._reader = call._make_reader()  # what open() does once the request is out
        turn = call.translator.turn
        decoder = SSEDecoder()
        encode_events(turn.start())
        n = 2
        for raw in raw_events:
            call._feed(decoder.feed(raw))  # the backend's own per-read step
            events = turn.take()
            if events:
                encode_events(events)
                n += len(events)
        out_events = n

    per_stream = per_op(one_stream, budget=budget, repeats=5)
    call_setup = per_op(partial(backend.call, req, req.model), budget=budget / 2)
    return {
        "upstream_events": len(raw_events),
        "gateway_events": out_events,
        "per_stream_us": per_stream * 1e6,
        "call_setup_us": call_setup * 1e6,
        "per_upstream_event_us": (per_stream - call_setup) / len(raw_events) * 1e6,
        "per_gateway_event_us": (per_stream - call_setup) / out_events * 1e6,
    }


# -- HTTP clients ----------------------------------------------------------------------------


async def http_clients_bench(base_url: str, body: bytes, sc: Scenario, quick: bool) -> dict[str, Any]:
    """aiohttp vs httpx reading the same paced stream (one event per read, as tokens arrive):
    CPU seconds of this process per upstream SSE event, median of alternating rounds."""
    import aiohttp
    import httpx

    url = base_url + "/chat/completions"
    headers = {"content-type": "application/json", "accept": "text/event-stream"}
    concurrency = 32
    rounds = 2 if quick else 4

    async def aiohttp_one(session: aiohttp.ClientSession) -> tuple[int, bool]:
        n = 0
        tail = b""
        async with session.post(url, data=body, headers=headers) as resp:
            async for chunk in resp.content.iter_any():
                n += chunk.count(b"\n\n")
                tail = chunk
        return n, tail.endswith(b"[DONE]\n\n")

    async def httpx_one(client: httpx.AsyncClient) -> tuple[int, bool]:
        n = 0
        tail = b""
        async with client.stream("POST", url, content=body, headers=headers) as resp:
            async for chunk in resp.aiter_raw():
                n += chunk.count(b"\n\n")
                tail = chunk
        return n, tail.endswith(b"[DONE]\n\n")

    results: dict[str, list[float]] = {"aiohttp": [], "httpx": []}
    failures = {"aiohttp": 0, "httpx": 0}
    connector = aiohttp.TCPConnector(limit=0)
    async with (
        aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as session,
        httpx.AsyncClient(
            timeout=None, limits=httpx.Limits(max_connections=None, max_keepalive_connections=64)
        ) as client,
    ):
        # warm both pools
        await asyncio.gather(*(aiohttp_one(session) for _ in range(concurrency)))
        await asyncio.gather(*(httpx_one(client) for _ in range(concurrency)))
        for _ in range(rounds):
            for name, one, arg in (("aiohttp", aiohttp_one, session), ("httpx", httpx_one, client)):
                gc.collect()
                c0 = time.process_time()
                done = await asyncio.gather(*(one(arg) for _ in range(concurrency)))  # type: ignore[operator]
                cpu = time.process_time() - c0
                events = sum(n for n, _ in done)
                failures[name] += sum(not ok for _, ok in done)
                results[name].append(cpu / max(1, events))
    return {
        "chunks_per_stream": sc.upstream_events(),
        "concurrency": concurrency,
        "delay_ms": sc.delay_ms,
        "us_per_event": {k: statistics.median(v) * 1e6 for k, v in results.items()},
        "failures": failures,
        "versions": {"aiohttp": aiohttp.__version__, "httpx": httpx.__version__},
    }


# -- the kernel's share ----------------------------------------------------------------------

_RECEIVER = """
import socket, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=30)
while c.recv(65536):
    pass
"""


def loopback_send_floor(quick: bool) -> dict[str, float]:
    """Wall time of one `send()` of a 250-byte SSE event on loopback TCP (TCP_NODELAY) to a
    reader in another process: back to back, and paced 1 ms apart as streamed tokens are
    (then each send also wakes the reader). A paced event costs the gateway at least one such
    send plus a wake-up and a read on the upstream side, whatever the Python code does."""
    import socket
    import subprocess

    n = 500 if quick else 1500
    msg = b"x" * 250
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.settimeout(10)
    reader = subprocess.Popen([sys.executable, "-c", _RECEIVER, str(srv.getsockname()[1])])
    out: dict[str, float] = {}
    try:
        conn, _ = srv.accept()
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for label, pace in (("burst_us", 0.0), ("paced_us", 0.001)):
                durations = []
                for _ in range(n if pace else n * 4):
                    t0 = time.perf_counter()
                    conn.sendall(msg)
                    durations.append(time.perf_counter() - t0)
                    if pace:
                        time.sleep(pace)
                out[label] = statistics.median(durations) * 1e6
    finally:
        srv.close()
        try:
            reader.wait(10)
        except subprocess.TimeoutExpired:
            reader.kill()
            reader.wait()
    return out


def pipeline_bench(bodies: dict[str, bytes], quick: bool) -> dict[str, Any]:
    budget = 0.3 if quick else 1.0
    out: dict[str, Any] = {"loopback": loopback_send_floor(quick)}
    steps = (
        ("stream", lambda: stream_translate_us(bodies["typical"], bodies["typical.chat"], budget=budget)),
        (
            "prep_typical",
            lambda: request_prep_ms(bodies["typical"], bodies["typical.chat"], budget=budget / 2),
        ),
        ("prep_big", lambda: request_prep_ms(bodies["big"], bodies["big.chat"], budget=budget * 2)),
    )
    for key, step in steps:
        try:
            out[key] = step()
        except Exception as exc:  # the gateway's internals moved: say so, keep the rest
            out[key] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("json", "pipeline"):
        print("usage: python bench/libs.py json|pipeline BODIES_DIR [--quick]", file=sys.stderr)
        sys.exit(2)
    bodies, quick = load_bodies(Path(sys.argv[2])), "--quick" in sys.argv
    result = json_bench(bodies, quick) if sys.argv[1] == "json" else pipeline_bench(bodies, quick)
    print(orjson.dumps(result).decode())
