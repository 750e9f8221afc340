"""What Codex needs of a model, which both `doctor` (what it recommends) and `codex-setup` (what
it warns about) say.

Codex 0.169's first request through codexgate (base instructions, tool schemas, environment
context) measured 30 kB, 6.6k-7.1k tokens (bench/usage_estimate.py); file reads and command
output take it to ~20k within a few turns. Below MIN_WINDOW Codex spends the turn compacting.
"""

from __future__ import annotations

__all__ = ["CODEX_FIRST_REQUEST_TOKENS", "MIN_WINDOW", "RECOMMENDED_WINDOW"]

CODEX_FIRST_REQUEST_TOKENS = 7_000
MIN_WINDOW = 16_384
RECOMMENDED_WINDOW = 32_768
