"""The embedded model's prefill on this machine (docs/backends.md, "The embedded model"): one
prompt of about Codex's first request's size (~5k tokens), asked through the gateway of an
embedded upstream (SmolLM2-135M on llama.cpp's server, the runtime from the per-user cache),
the gateway's progress lines shown as they come; then the time to the first token and the
prompt's tokens a second.

    uv run --dev python bench/prefill.py [--tokens 5000] [--batch 512] [--threads N]

`--batch`: the tokens llama.cpp reads per batch (the gateway runs it with 512: its progress
comes after each; llama.cpp's own default is 2048). The prompt is this repository's docs, each
run starting with a different number so that no prompt cache is reused.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the tests' support modules

from tests.support.embedded_gateway import gateway, health_when, serving  # noqa: E402

from codexgate.backends.embedded import supervisor  # noqa: E402

CHARS_PER_TOKEN = 4.2  # SmolLM2's tokenizer on these docs, about


def prompt(tokens: int) -> str:
    text = "\n\n".join(path.read_text() for path in sorted((ROOT / "docs").glob("*.md")))
    return f"Run {time.time_ns()}. Summarise:\n\n" + text[: int(tokens * CHARS_PER_TOKEN)]


async def main(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("codexgate.backend").setLevel(logging.INFO)
    supervisor.PROMPT_BATCH = args.batch
    upstream: dict[str, object] = {"name": "embedded", "kind": "embedded", "context_window": 8192}
    if args.threads:
        upstream["threads"] = args.threads
    body = {"model": "smollm2-135m", "input": prompt(args.tokens), "max_output_tokens": 8, "stream": True}
    async with gateway({"discover": False, "upstreams": [upstream]}, timeout=1800) as client:
        await health_when(client, serving, seconds=300)
        start = time.monotonic()
        first: float | None = None
        usage: dict[str, int] = {}
        async with client.stream("POST", "/v1/responses", json=body) as answer:
            assert answer.status_code == 200, await answer.aread()
            async for line in answer.aiter_lines():
                if not line.startswith("data: "):
                    continue
                event = orjson.loads(line[6:])
                if event["type"] == "response.output_text.delta" and first is None:
                    first = time.monotonic() - start
                if event["type"] in ("response.completed", "response.incomplete"):
                    usage = event["response"]["usage"]
    tokens = usage.get("input_tokens", 0)
    assert first is not None, "no token came"
    print(
        f"prompt {tokens:,} tokens (batch {args.batch}): first token after {first:.1f} s, "
        f"{tokens / first:.0f} prompt tokens/s"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=5000, help="the prompt's size, about")
    parser.add_argument("--batch", type=int, default=supervisor.PROMPT_BATCH)
    parser.add_argument("--threads", type=int, help="llama-server's threads (default: every core)")
    asyncio.run(main(parser.parse_args()))
