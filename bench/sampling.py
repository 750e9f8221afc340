"""What a small model does with the server's default sampling versus the model card's, when
the client (Codex) sends no temperature and no output limit.

Runs SmolLM2-135M-Instruct on llama.cpp's server (the prebuilt runtime, scripts/fetch-llama.sh) with a
4096-token context, asks coding-assistant questions, and prints per setting: output tokens,
how many answers ran to the context limit, how repetitive the answers were, and time.

    uv run python bench/sampling.py [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support.llama_server import post_json, run_llama_server  # noqa: E402

from codexgate.translate.open_models.sampling import recommended_sampling  # noqa: E402

N_CTX = 4096
PROMPTS = (
    "Write a Python function that reverses a linked list, with a short explanation.",
    "Explain what `git rebase -i` does and when to use it.",
    "List the files you would look at first in an unfamiliar Python project, and why.",
    "Fix this code: def add(a, b): return a - b",
    "What does the shell command `find . -name '*.py' | xargs wc -l` print?",
    "Write a unit test for a function that checks whether a string is a palindrome.",
)


def repeated_line_share(text: str) -> float:
    """Share of non-empty lines that already appeared earlier: loops show up here."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return 0.0
    seen: set[str] = set()
    repeats = 0
    for line in lines:
        repeats += line in seen
        seen.add(line)
    return repeats / len(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2, help="answers per prompt and setting (seeds)")
    args = parser.parse_args()
    # What codexgate recommends on llama.cpp, and the same without the repetition penalty
    # (only the card's temperature and top_p, which the gateway itself fills in).
    recommended = recommended_sampling("SmolLM2-135M-Instruct", "llama.cpp").values
    card = {k: v for k, v in recommended.items() if k in ("temperature", "top_p")}
    settings: dict[str, dict[str, Any]] = {
        "server default (llama.cpp: temperature 0.8, top_p 0.95, top_k 40)": {},
        f"model card ({', '.join(f'{k} {v}' for k, v in card.items())})": card,
        f"recommended ({', '.join(f'{k} {v}' for k, v in recommended.items())})": dict(recommended),
    }
    with run_llama_server(N_CTX, "--alias", "smollm2") as llama:
        print(f"SmolLM2-135M-Instruct, llama.cpp, {N_CTX}-token context, no max_tokens (as Codex sends)")
        print(f"{len(PROMPTS)} prompts x {args.runs} seeds per setting\n")
        print(f"{'setting':<66} {'tokens p50':>10} {'max':>6} {'hit limit':>9} {'repeats':>8} {'seconds':>8}")
        for name, sampling in settings.items():
            lengths, limits, repeats = [], 0, []
            started = time.perf_counter()
            for seed in range(args.runs):
                for prompt in PROMPTS:
                    answer = post_json(
                        llama.base_url + "/chat/completions",
                        {
                            "model": "smollm2",
                            "messages": [{"role": "user", "content": prompt}],
                            "seed": seed,
                            **sampling,
                        },
                    )
                    choice = answer["choices"][0]
                    lengths.append(answer["usage"]["completion_tokens"])
                    limits += choice["finish_reason"] == "length"
                    repeats.append(repeated_line_share(choice["message"]["content"] or ""))
            elapsed = time.perf_counter() - started
            print(
                f"{name:<66} {statistics.median(lengths):>10.0f} {max(lengths):>6} "
                f"{limits:>5}/{len(lengths):<3} {statistics.mean(repeats):>8.2f} {elapsed:>8.1f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
