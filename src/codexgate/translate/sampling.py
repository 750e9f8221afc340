"""Sampling to apply when the client sends none, per model family. Pure data.

Codex sends no `temperature` or `top_p`, so the upstream uses its own default: 0.8 in
llama.cpp, the Modelfile's value in Ollama, the model's generation_config in vLLM. Small models
at a high temperature wander and repeat (bench/sampling.py measures it). These are the values
the model publishers recommend (model cards and generation_config.json).

- The gateway applies a known family's temperature and top_p to requests that carry none
  (`default_sampling = "auto"`, the default); `top_k` only where `doctor` recommends it, since
  OpenAI-strict servers reject unknown fields.
- `doctor` recommends them too, with a low-temperature fallback for unknown models, and a
  `max_tokens` cap per turn: Codex sends no limit, and a model stuck in a loop otherwise runs
  to the end of the context window. A capped turn ends as `response.incomplete`, which Codex
  reports.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Sampling:
    family: str
    values: dict[str, Any]
    source: str


# First match wins; patterns are matched against the lower-cased model id (Ollama tags,
# Hugging Face repo names and GGUF file names all carry the family name).
_FAMILIES: tuple[tuple[str, Sampling], ...] = (
    (
        r"qwen3.*coder|qwen-?3-?coder",
        Sampling("Qwen3-Coder", {"temperature": 0.7, "top_p": 0.8, "top_k": 20}, "Qwen3-Coder model card"),
    ),
    (
        r"qwen2\.5.*coder",
        Sampling(
            "Qwen2.5-Coder",
            {"temperature": 0.7, "top_p": 0.8, "top_k": 20},
            "Qwen2.5-Coder generation_config",
        ),
    ),
    (
        r"qwq|qwen3",
        Sampling(
            "Qwen3 (thinking)",
            {"temperature": 0.6, "top_p": 0.95, "top_k": 20},
            "Qwen3 model card, thinking mode",
        ),
    ),
    (
        r"deepseek.*r1|deepseek-reasoner",
        Sampling("DeepSeek-R1", {"temperature": 0.6, "top_p": 0.95}, "DeepSeek-R1 model card"),
    ),
    (r"gpt-oss", Sampling("gpt-oss", {"temperature": 1.0, "top_p": 1.0}, "OpenAI gpt-oss model card")),
    (
        r"devstral|mistral-small|magistral",
        Sampling("Mistral (Devstral, Small)", {"temperature": 0.15}, "Mistral model cards"),
    ),
    (
        r"gemma-?3",
        Sampling("Gemma 3", {"temperature": 1.0, "top_p": 0.95, "top_k": 64}, "Gemma 3 generation_config"),
    ),
    (
        r"llama-?3|llama3",
        Sampling("Llama 3", {"temperature": 0.6, "top_p": 0.9}, "Llama 3 generation_config"),
    ),
    (r"smollm", Sampling("SmolLM2", {"temperature": 0.2, "top_p": 0.9}, "SmolLM2 model card example")),
)
_FALLBACK = Sampling("unknown", {"temperature": 0.2, "top_p": 0.9}, "codexgate default for unknown models")

# Keys only some servers accept; OpenAI-strict servers reject unknown fields.
_NON_STANDARD = ("top_k",)
_ACCEPTS_TOP_K = {"llama.cpp", "vLLM", "SGLang", "LM Studio"}


def family_sampling(model: str) -> Sampling | None:
    """The publisher's sampling for the model's family, None for a model not in the table."""
    name = model.lower()
    return next((s for pattern, s in _FAMILIES if re.search(pattern, name)), None)


def standard_only(sampling: Sampling) -> Sampling:
    """Without the keys only some servers accept."""
    values = {k: v for k, v in sampling.values.items() if k not in _NON_STANDARD}
    return Sampling(sampling.family, values, sampling.source)


def recommended_sampling(model: str, server: str | None) -> Sampling:
    """What doctor recommends: the family's sampling (or a low-temperature fallback), without
    keys the server is not known to accept."""
    sampling = family_sampling(model) or _FALLBACK
    return sampling if server in _ACCEPTS_TOP_K else standard_only(sampling)


def turn_token_cap(context_window: int | None) -> int:
    """A cap on one turn's output: a quarter of the window, between 1k and 16k tokens."""
    if not context_window:
        return 8192
    return max(1024, min(16384, context_window // 4))
