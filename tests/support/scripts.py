"""Running the project's install scripts (scripts/*.sh) from tests, which install what they
need on first use.

A script runs at most once per test run with the same arguments (`install_once`): its
outcome is remembered, a failure included, so when a build breaks the first test that needs it
fails with the cause and every later one fails at once with the same cause instead of building
again. The tests run in several worker processes (pytest-xdist), so the outcome is also written
to the run's directory ($CODEXGATE_TEST_RUN_DIR, which tests/conftest.py makes), under a file
lock: the first worker to need a script runs it, one that needs it meanwhile waits for it and
reads its outcome. While it runs, each line it writes to stderr (its progress) goes to the
progress sink, which tests/conftest.py points at the terminal so a long build is visible even
though pytest captures output.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

ProgressSink = Callable[[str], None]

# A directory shared by the processes of one test run (the workers inherit it).
RUN_DIR_VARIABLE = "CODEXGATE_TEST_RUN_DIR"


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# Where install scripts' progress lines go; the default serves callers outside pytest (bench/).
_progress: ProgressSink = _to_stderr

# The outcome of each script (and its arguments) in this run: its stdout or the failure, and
# whether it ran in this process.
_outcomes: dict[tuple[Path, tuple[str, ...]], tuple[bool, str, bool]] = {}


def set_progress_sink(sink: ProgressSink) -> None:
    global _progress
    _progress = sink


class ScriptFailed(Exception):
    """An install script exited non-zero or timed out; the message says why, with its output."""


def run_script(
    script: Path, timeout: float, sink: ProgressSink | None = None, args: Sequence[str] = ()
) -> str:
    """Run `bash script args...`, passing each stderr line to `sink` (default: the progress
    sink) as it comes; returns its stdout. Past `timeout` seconds its whole process group is killed."""
    sink = sink or _progress
    tail: deque[str] = deque(maxlen=60)
    timed_out = threading.Event()
    with (
        tempfile.TemporaryFile("w+") as out,
        subprocess.Popen(
            ["bash", str(script), *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # a process group to kill: cmake, make and the compilers
        ) as proc,
    ):

        def kill_group() -> None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)

        def on_timeout() -> None:
            timed_out.set()
            kill_group()

        timer = threading.Timer(timeout, on_timeout)
        timer.start()
        try:
            assert proc.stderr is not None
            for raw in proc.stderr:
                line = raw.rstrip("\n")
                tail.append(line)
                sink(line)
            returncode = proc.wait()
        finally:
            timer.cancel()
            if proc.poll() is None:  # interrupted (Ctrl-C): leave no build behind
                kill_group()
        out.seek(0)
        stdout = out.read()
    output = "\n".join(tail)
    if timed_out.is_set():
        raise ScriptFailed(f"{script.name} timed out after {timeout:g} s; its last output:\n{output}")
    if returncode != 0:
        raise ScriptFailed(f"{script.name} failed (exit status {returncode}):\n{output}")
    return stdout


def install_once(script: Path, timeout: float, args: Sequence[str] = ()) -> str:
    """`run_script` once per test run and arguments; returns its stdout, or fails the calling
    test with the cause, the first time and every time after (without running the script again),
    in this process and in the run's other workers."""
    key = (script, tuple(args))
    first = key not in _outcomes
    if first:
        _outcomes[key] = _outcome_in_this_run(script, timeout, args)
    ok, result, ran_here = _outcomes[key]
    if not ok:
        again = (
            "" if first and ran_here else f"{script.name} already failed in this session, not run again:\n"
        )
        pytest.fail(again + result, pytrace=False)
    return result


def _run(script: Path, timeout: float, args: Sequence[str]) -> tuple[bool, str]:
    try:
        return True, run_script(script, timeout, args=args)
    except ScriptFailed as exc:
        return False, str(exc)


def _outcome_in_this_run(script: Path, timeout: float, args: Sequence[str]) -> tuple[bool, str, bool]:
    """(succeeded, stdout or cause, ran in this process): run here, or read from the run's
    directory where another worker ran it (waiting for it if it still runs)."""
    run_dir = os.environ.get(RUN_DIR_VARIABLE)
    if not run_dir:  # not under tests/conftest.py (bench/)
        return (*_run(script, timeout, args), True)
    name = hashlib.sha256(json.dumps([str(script), *args]).encode()).hexdigest()[:20]
    record = Path(run_dir, name + ".json")
    with open(Path(run_dir, name + ".lock"), "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _progress(f"{script.name}: another test worker is running it; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)  # bounded: the holder's run has a timeout
        if record.exists():
            saved = json.loads(record.read_text())
            return saved["ok"], saved["result"], False
        ok, result = _run(script, timeout, args)
        record.write_text(json.dumps({"ok": ok, "result": result}))
        return ok, result, True
