"""Sampling to apply when the client sends none, per model family. Pure data.

Codex sends no `temperature` or `top_p`, so the upstream uses its own default: 0.8 in
llama.cpp, the Modelfile's value in Ollama, the model's generation_config in vLLM. Small models
wander and loop until the context is full (bench/sampling.py measures it). These are the values
the model publishers recommend (model cards and generation_config.json).

- The gateway applies a known family's temperature and top_p to requests that carry none
  (`default_sampling = "auto"`, the default). `top_k` and the repetition penalty only where
  `doctor` recommends them, under the server's own names, since OpenAI-strict servers reject
  unknown fields.
- For small models the repetition penalty matters more than the temperature: SmolLM2-135M ran
  to the context limit in 2/12 answers at llama.cpp's defaults, 3/12 at the card's
  temperature 0.2, 0/12 with repeat_penalty 1.1 added.
- `doctor` recommends the full set, and a `max_tokens` cap per turn: Codex sends no limit,
  and a model stuck in a loop otherwise runs to the end of the context window. A capped turn
  ends as `response.incomplete`, which Codex reports.
"""

from __future__ import annotations

import functools
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
        Sampling(
            "Qwen3-Coder",
            {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05},
            "Qwen3-Coder model card",
        ),
    ),
    (
        r"qwen2\.5.*coder",
        Sampling(
            "Qwen2.5-Coder",
            {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05},
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
    (
        r"smollm",
        Sampling(
            "SmolLM2",
            {"temperature": 0.2, "top_p": 0.9, "repetition_penalty": 1.1},
            "SmolLM2 model card; the repetition penalty measured by bench/sampling.py",
        ),
    ),
)
_UNKNOWN = Sampling("unknown", {}, "no published values known: the server's defaults stay")

# Keys beyond OpenAI's (which strict servers reject), by the name each server gives them.
_SERVER_KEYS: dict[str, dict[str, str]] = {
    "top_k": {"llama.cpp": "top_k", "vLLM": "top_k", "SGLang": "top_k", "LM Studio": "top_k"},
    "repetition_penalty": {
        "llama.cpp": "repeat_penalty",
        "LM Studio": "repeat_penalty",
        "vLLM": "repetition_penalty",
        "SGLang": "repetition_penalty",
    },
}


@functools.lru_cache(maxsize=256)  # asked for every request: a dozen patterns each time
def family_sampling(model: str) -> Sampling | None:
    """The publisher's sampling for the model's family, None for a model not in the table."""
    name = model.lower()
    return next((s for pattern, s in _FAMILIES if re.search(pattern, name)), None)


def for_server(sampling: Sampling, server: str | None) -> Sampling:
    """The values under the names `server` accepts; keys it is not known to take are left out
    (with `server=None`, only OpenAI's own keys remain)."""
    values = {}
    for key, value in sampling.values.items():
        names = _SERVER_KEYS.get(key)
        if names is None:
            values[key] = value
        elif server in names:
            values[names[server]] = value
    return Sampling(sampling.family, values, sampling.source)


def recommended_sampling(model: str, server: str | None) -> Sampling:
    """What doctor recommends for `model` on `server`."""
    return for_server(family_sampling(model) or _UNKNOWN, server)


def turn_token_cap(context_window: int | None) -> int:
    """A cap on one turn's output: a quarter of the window, between 1k and 16k tokens."""
    if not context_window:
        return 8192
    return max(1024, min(16384, context_window // 4))
