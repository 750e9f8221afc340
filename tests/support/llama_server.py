"""A real llama.cpp `llama-server` with SmolLM2-135M-Instruct, for tests against a model
server nobody here wrote; the same build the embedded model runs (backends/llama_build.py).

`scripts/build-llama.sh` builds it once per user into `$CODEXGATE_LLAMA_DIR` (default
`$XDG_CACHE_HOME/codexgate/llama`, i.e. `~/.cache/codexgate/llama`): about 10 minutes the first
time on a machine, then every clone and every `serve` reuses it. `llama_binary()` runs that
script on first use, once per test session (a failed build fails every llama test at once with
its cause, without building again), and its progress shows on the terminal. The tests are
skipped only where no C++ toolchain can build it; `CODEXGATE_REQUIRE_LLAMA=1` (set by CI) turns
that skip into a failure. `CODEXGATE_LLAMA_SERVER` / `CODEXGATE_LLAMA_MODEL` point at another
build or model.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest

from codexgate.backends.llama_build import find_build, llama_root, missing_tools
from tests.support.scripts import install_once

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "scripts" / "build-llama.sh"
MODEL_ID = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _unavailable(reason: str) -> None:
    if os.environ.get("CODEXGATE_REQUIRE_LLAMA") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


def llama_cache() -> Path:
    """Where the builds are (the builder reads CODEXGATE_LLAMA_DIR the same way)."""
    return llama_root()


def llama_binary() -> tuple[Path, Path]:
    """(llama-server, model GGUF), built and downloaded on first use."""
    override = os.environ.get("CODEXGATE_LLAMA_SERVER")
    model = os.environ.get("CODEXGATE_LLAMA_MODEL")
    if override and model:
        return Path(override), Path(model)
    found = find_build(llama_cache())
    if found is None:
        missing = missing_tools()
        if missing:
            _unavailable(f"llama-server is not built and {', '.join(missing)} missing to build it")
        install_once(BUILD_SCRIPT, timeout=1800)
        found = find_build(llama_cache())
        if found is None:
            pytest.fail(f"scripts/build-llama.sh succeeded but left no build in {llama_cache()}")
    return Path(override or found.server), Path(model or found.model)


def post_json(url: str, body: Any, timeout: float = 600) -> Any:
    """POST JSON with the standard library; an HTTP error's JSON body is returned as well."""
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return json.loads(exc.read())


@dataclass(frozen=True)
class LlamaServer:
    base_url: str  # ends in /v1
    root: str
    n_ctx: int
    model: str = MODEL_ID


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _tail(log: IO[str]) -> str:
    log.flush()
    log.seek(0)
    return log.read()[-3000:]


@contextmanager
def run_llama_server(n_ctx: int = 4096, *extra: str) -> Iterator[LlamaServer]:
    """Start llama-server on a free loopback port and wait (bounded) until the model is loaded;
    stops it (by its PID) on exit."""
    binary, model = llama_binary()
    port = _free_port()
    argv = [
        str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
        "-c", str(n_ctx), "-np", "1", "-t", "2", "--no-warmup", *extra,
    ]  # fmt: skip
    log = tempfile.TemporaryFile("w+")  # noqa: SIM115 - closed below; read when it fails
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    root = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail(f"llama-server exited with {proc.returncode}: {_tail(log)}")
            try:
                with urllib.request.urlopen(root + "/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"llama-server did not become healthy in 120 s: {_tail(log)}")
            time.sleep(0.2)
        yield LlamaServer(base_url=root + "/v1", root=root, n_ctx=n_ctx)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
