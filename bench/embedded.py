"""The embedded model's speed: time to first token and tokens per second of SmolLM2-135M on
llama.cpp's server (the prebuilt runtime), asked through the gateway (`/v1/responses`, streamed,
as Codex asks) and asked directly (`/v1/chat/completions` on the child the gateway supervises), alternately,
the same prompts at temperature 0 (each numbered, so neither reuses the other's prompt cache);
p50 and p90 of each, side by side.

    uv run python bench/embedded.py [--prompts N] [--max-tokens N] [--threads N] [--no-holding-stages]

Runs `codexgate serve` as a process with one `kind = "embedded"` upstream (the runtime comes from
the per-user cache, fetched first if missing: scripts/fetch-llama.sh). `default_sampling = "off"`,
so both sides send the model the same sampling. Tokens per second are the output tokens after
the first, over the time from the first token to the last.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from codexgate.backends.embedded.runtime import find_runtime, llama_root  # noqa: E402

PROMPTS = (
    "What is the capital of France?",
    "Name three primary colours.",
    "Write a haiku about the sea.",
    "What does a compiler do?",
    "Give one tip for writing clear code.",
    "What is 12 times 12?",
    "Explain what a linked list is in one sentence.",
    "Why is the sky blue?",
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def gateway(config: Path) -> Iterator[str]:
    """`codexgate serve --config config` on a free port, until it has been stopped."""
    port = free_port()
    argv = [sys.executable, "-m", "codexgate.cli", "serve", "--config", str(config), "--port", str(port)]
    env = {**os.environ, "CODEXGATE_LLAMA_DIR": str(llama_root())}
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                log.seek(0)
                print(log.read()[-3000:], file=sys.stderr)


def wait_serving(client: httpx.Client, url: str) -> str:
    """The child's base URL, once /healthz says the embedded model serves."""
    deadline = time.monotonic() + 1800  # a first build included
    shown = ""
    while time.monotonic() < deadline:
        try:
            health = client.get(url + "/healthz").json()
        except httpx.HTTPError:
            time.sleep(0.2)
            continue
        embedded = health.get("embedded", {})
        if embedded.get("state") == "serving":
            base: str = health["upstreams"]["tiny"]["base_url"]
            return base
        if embedded.get("message") != shown:
            shown = embedded.get("message", "")
            print(f"  {shown}", file=sys.stderr)
        time.sleep(0.5)
    raise SystemExit("the embedded model did not start in 30 minutes")


def through_gateway(client: httpx.Client, url: str, prompt: str, max_tokens: int) -> tuple[float, float, int]:
    """(seconds to the first text, seconds to the end, output tokens) via /v1/responses."""
    body = {"model": "smollm2-135m", "input": prompt, "stream": True, "temperature": 0,
            "max_output_tokens": max_tokens}  # fmt: skip
    started = time.perf_counter()
    first = 0.0
    tokens = 0
    with client.stream("POST", url + "/v1/responses", json=body) as response:
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            if event["type"] == "response.output_text.delta" and not first:
                first = time.perf_counter() - started
            elif event["type"] in ("response.completed", "response.incomplete"):
                tokens = event["response"]["usage"]["output_tokens"]
    return first, time.perf_counter() - started, tokens


def direct(client: httpx.Client, base: str, prompt: str, max_tokens: int) -> tuple[float, float, int]:
    """The same, straight to llama-server's /v1/chat/completions."""
    body = {"model": "smollm2-135m", "messages": [{"role": "user", "content": prompt}], "stream": True,
            "temperature": 0, "max_tokens": max_tokens,
            "stream_options": {"include_usage": True}}  # fmt: skip
    started = time.perf_counter()
    first = 0.0
    tokens = 0
    with client.stream("POST", base + "/chat/completions", json=body) as response:
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            choices = chunk.get("choices") or [{}]
            if choices[0].get("delta", {}).get("content") and not first:
                first = time.perf_counter() - started
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    return first, time.perf_counter() - started, tokens


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=24, help="requests each way (cycling the prompts)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, help="llama-server's threads (default: every core)")
    parser.add_argument(
        "--no-holding-stages",
        action="store_true",
        help="think_tags and text_tool_calls off: nothing holds the first text back to see what it is",
    )
    args = parser.parse_args()
    if find_runtime(llama_root()) is None:
        print("fetching the llama.cpp runtime first (once per user; scripts/fetch-llama.sh)", file=sys.stderr)
        script = ROOT / "scripts" / "fetch-llama.sh"
        subprocess.run(["bash", str(script)], check=True, stdout=subprocess.DEVNULL)
    results: dict[str, dict[str, list[float]]] = {
        way: {"ttft": [], "tps": [], "tokens": []} for way in ("gateway", "direct")
    }
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "codexgate.toml"
        config.write_text(
            'discover = false\nstore = "none"\n'
            '[[upstreams]]\nname = "tiny"\nkind = "embedded"\ndefault_sampling = "off"\n'
            + ('think_tags = "off"\ntext_tool_calls = "off"\n' if args.no_holding_stages else "")
            + (f"threads = {args.threads}\n" if args.threads else "")
        )
        # llama-server closes idle keep-alive connections (httpx would reuse one it closed):
        # the direct requests each open their own, as cheap as anything on loopback.
        fresh = httpx.Limits(max_keepalive_connections=0)
        with gateway(config) as url, httpx.Client(timeout=120) as client, \
                httpx.Client(timeout=120, limits=fresh) as raw:  # fmt: skip
            base = wait_serving(client, url)
            for prompt in PROMPTS[:2]:  # warm-up: the first requests load caches
                through_gateway(client, url, prompt, args.max_tokens)
                direct(raw, base, prompt, args.max_tokens)
            for i in range(args.prompts):
                for way in ("gateway", "direct") if i % 2 == 0 else ("direct", "gateway"):
                    # A prompt of its own each time, of the same length both ways: llama-server
                    # keeps the last prompt's cache, and neither side may ride on the other's.
                    prompt = f"Q{i:03d}{way[0]}: {PROMPTS[i % len(PROMPTS)]}"
                    if way == "gateway":
                        first, total, tokens = through_gateway(client, url, prompt, args.max_tokens)
                    else:
                        first, total, tokens = direct(raw, base, prompt, args.max_tokens)
                    results[way]["ttft"].append(first * 1000)
                    results[way]["tps"].append((tokens - 1) / (total - first) if tokens > 1 else 0.0)
                    results[way]["tokens"].append(tokens)
            restarts = client.get(url + "/healthz").json()["embedded"]["restarts"]
    threads = f"{args.threads} threads" if args.threads else "every core"
    print(f"SmolLM2-135M-Instruct Q4_1 on llama-server ({threads}), {os.cpu_count()} cores, "
          f"{args.prompts} prompts each way, temperature 0, at most {args.max_tokens} tokens")  # fmt: skip
    print(f"{'':28}{'through the gateway':>22}{'llama-server directly':>24}")
    rows = (("first token, ms, p50", "ttft", 0.5), ("first token, ms, p90", "ttft", 0.9),
            ("tokens/s, p50", "tps", 0.5), ("tokens/s, p10", "tps", 0.1))  # fmt: skip
    for label, key, share in rows:
        values = [percentile(results[way][key], share) for way in ("gateway", "direct")]
        print(f"{label:28}{values[0]:>22.1f}{values[1]:>24.1f}")
    means = [statistics.mean(results[way]["tokens"]) for way in ("gateway", "direct")]
    print(f"{'output tokens, mean':28}{means[0]:>22.1f}{means[1]:>24.1f}")
    print(f"llama-server restarts during the run: {restarts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
