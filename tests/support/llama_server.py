"""A real llama.cpp `llama-server` with SmolLM2-135M-Instruct, for tests against a model
server nobody here wrote.

`scripts/build-llama.sh` builds it into `$CODEXGATE_CACHE/llama` (default `.cache/llama`; about
10 minutes the first time, then cached); `llama_binary()` runs that script on first use, once per
test session (a failed build fails every llama test at once with its cause, without building
again), and its progress shows on the terminal. The tests are skipped only where no C++
toolchain can build it; `CODEXGATE_REQUIRE_LLAMA=1` (set by CI) turns that skip into a failure.
`CODEXGATE_LLAMA_SERVER` / `CODEXGATE_LLAMA_MODEL` point at another build or model.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.scripts import install_once

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "scripts" / "build-llama.sh"
MODEL_ID = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _unavailable(reason: str) -> None:
    if os.environ.get("CODEXGATE_REQUIRE_LLAMA") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


def llama_cache() -> Path:
    """Where scripts/build-llama.sh puts its results (it reads CODEXGATE_CACHE the same way)."""
    return Path(os.environ.get("CODEXGATE_CACHE") or REPO_ROOT / ".cache") / "llama"


def llama_binary() -> tuple[Path, Path]:
    """(llama-server, model GGUF), built and downloaded on first use."""
    cache = llama_cache()
    model = Path(os.environ.get("CODEXGATE_LLAMA_MODEL") or cache / "models" / MODEL_ID)
    override = os.environ.get("CODEXGATE_LLAMA_SERVER")
    if override:
        return Path(override), model
    built = cache / "bin" / "llama-server"
    if not built.exists() and not all(shutil.which(tool) for tool in ("cmake", "c++", "make")):
        _unavailable("llama-server is not built and cmake/c++/make are missing to build it")
    install_once(BUILD_SCRIPT, timeout=1800)  # a no-op once cached
    return built, model


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
    log_dir = llama_cache()
    log_dir.mkdir(parents=True, exist_ok=True)
    log = open(log_dir / f"server-{port}.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    root = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail(
                    f"llama-server exited with {proc.returncode}: {Path(log.name).read_text()[-3000:]}"
                )
            try:
                with urllib.request.urlopen(root + "/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(
                    f"llama-server did not become healthy in 120 s: {Path(log.name).read_text()[-3000:]}"
                )
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
