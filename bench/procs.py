"""Subprocesses of the benchmark (fake upstream, gateways, profiler) and /proc readings.

Every process is started in its own session (so its process group id is its pid) and ended by
that id, at the latest when the benchmark exits: `Processes` is a context manager, and an
atexit hook covers the paths that skip `finally`.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
CLK_TCK = os.sysconf("SC_CLK_TCK")
# The CPUs this benchmark may use, read once before anything is pinned: a process pinned to one
# CPU reads only that one from sched_getaffinity, and its children inherit the pin.
CPUS = sorted(os.sched_getaffinity(0))
PAGE = os.sysconf("SC_PAGE_SIZE")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# Set by `run.py --src DIR`: where subprocesses import codexgate from (ahead of the venv's copy).
SRC_OVERRIDE: str | None = None


def clean_env() -> dict[str, str]:
    """The environment without codexgate's own settings, so nothing but our flags configures it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODEXGATE_")}
    env["PYTHONUNBUFFERED"] = "1"
    if SRC_OVERRIDE:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (SRC_OVERRIDE, env.get("PYTHONPATH")) if p)
    return env


def source_info() -> str:
    """Which codexgate the subprocesses run: the --src folder, or the repo's commit and whether
    src/ has uncommitted changes."""
    if SRC_OVERRIDE:
        return f"codexgate from {SRC_OVERRIDE}"
    try:
        head = subprocess.run(
            ["git", "log", "-1", "--format=%h %cI %s"], cwd=ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "src"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.splitlines()
    except (OSError, subprocess.TimeoutExpired):
        return "codexgate: git state unknown"
    state = f"{len(dirty)} uncommitted change(s) in src/" if dirty else "src/ clean"
    return f"codexgate at {head[:90]} ({state})"


class Proc:
    def __init__(self, name: str, argv: list[str], *, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.argv = argv
        self.log = tempfile.NamedTemporaryFile(prefix=f"bench-{name}-", suffix=".log", delete=False)
        self.popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env or clean_env(),
            cwd=ROOT,
            start_new_session=True,
        )
        self.pid = self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, n: int = 30) -> str:
        try:
            lines = Path(self.log.name).read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def stop(self, timeout: float = 5.0) -> None:
        if self.popen.poll() is None:
            for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(self.pid, sig)  # its own group: this process and its children only
                except ProcessLookupError:
                    break
                try:
                    self.popen.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        self.log.close()
        try:
            os.unlink(self.log.name)
        except OSError:
            pass


class Processes:
    """Owns every subprocess (and temporary paths); stops them all on exit, error or signal."""

    def __init__(self) -> None:
        self.procs: list[Proc] = []
        self.paths: list[str] = []
        atexit.register(self.stop_all)
        # Ctrl-C and SIGTERM end the run at once. Raising from the handler is not enough: under
        # uvloop an exception raised inside a protocol callback becomes a transport error, and
        # asyncio's own Ctrl-C handling only cancels the main task, which a streaming client may
        # absorb. So the handler stops every subprocess itself and exits.
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, _frame: object) -> None:
        print(f"\nbench: signal {signum}: stopping subprocesses", file=sys.stderr, flush=True)
        self.stop_all()
        os._exit(128 + signum)

    def start(self, name: str, argv: list[str], *, env: dict[str, str] | None = None) -> Proc:
        proc = Proc(name, argv, env=env)
        self.procs.append(proc)
        return proc

    def stop(self, proc: Proc) -> None:
        proc.stop()
        if proc in self.procs:
            self.procs.remove(proc)

    def stop_all(self) -> None:
        while self.procs:
            self.procs.pop().stop()
        while self.paths:
            shutil.rmtree(self.paths.pop(), ignore_errors=True)

    def __enter__(self) -> Processes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()


def wait_http(proc: Proc, url: str, timeout: float = 30.0) -> None:
    """Until `url` answers 200 (bounded), or fail with the process's log."""
    deadline = time.monotonic() + timeout
    while True:
        if not proc.alive():
            raise RuntimeError(f"{proc.name} exited during startup:\n{proc.log_tail()}")
        try:
            with urllib.request.urlopen(url, timeout=1.0) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{proc.name} did not answer {url} within {timeout}s:\n{proc.log_tail()}")
        time.sleep(0.05)


def get_json(url: str) -> dict:  # type: ignore[type-arg]
    import orjson

    with urllib.request.urlopen(url, timeout=5.0) as response:
        return orjson.loads(response.read())  # type: ignore[no-any-return]


def get_bytes(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5.0) as response:
        return response.read()  # type: ignore[no-any-return]


def _stat_fields(pid: int) -> list[bytes]:
    """/proc/<pid>/stat after the command name: [0] is field 3 (state)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process (all its threads), in seconds."""
    fields = _stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14 and 15


def minor_faults(pid: int) -> int:
    """The page faults the process (all its threads) took that read no disk: each a page the
    kernel handed it (a fresh one, or one the allocator had given back)."""
    return int(_stat_fields(pid)[7])  # field 10, minflt


def mem_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (and friends) in bytes."""
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Vm"):
                key, value = line.split(":", 1)
                parts = value.split()
                if len(parts) == 2 and parts[1] == "kB":
                    out[key] = int(parts[0]) * 1024
    return out


def reset_hwm(pid: int) -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0, needs permission on the process)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def set_affinity(pid: int, cpus: set[int]) -> None:
    """Pin every thread of `pid` (0: this process) to `cpus`; threads that went away are skipped."""
    base = "/proc/self/task" if pid == 0 else f"/proc/{pid}/task"
    for tid in os.listdir(base):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except (ProcessLookupError, PermissionError):
            pass


def _machine_busy() -> float:
    """CPU seconds all CPUs spent in user, nice and system since boot (not irq/softirq/idle)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return (int(fields[1]) + int(fields[2]) + int(fields[3])) / CLK_TCK


def _own_tree_cpu() -> float:
    """CPU seconds of this process and its descendants: live ones from /proc (with the time of
    the children they reaped), reaped ones from os.times()."""
    me = os.getpid()
    parent: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        pid = int(name)
        parent[pid] = int(fields[1])
        cpu[pid] = sum(int(x) for x in fields[11:15]) / CLK_TCK  # utime stime cutime cstime
    total = 0.0
    for pid, value in cpu.items():
        p = pid
        for _ in range(64):  # walk up to this process (bounded)
            if p == me:
                total += value
                break
            p = parent.get(p, 0)
            if p <= 1:
                break
    return total


class ForeignLoad:
    """How much CPU other processes on the machine used while a section ran: the machine's busy
    time minus this benchmark's process tree. Other work on a 2-CPU machine skews every figure."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.busy0 = _machine_busy()
        self.own0 = _own_tree_cpu()

    def cores(self) -> float:
        wall = time.monotonic() - self.t0
        foreign = (_machine_busy() - self.busy0) - (_own_tree_cpu() - self.own0)
        return max(0.0, foreign / wall) if wall > 0 else 0.0
