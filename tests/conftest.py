"""Session-wide test setup: tests run side by side in worker processes (pytest-xdist, options
in pyproject's addopts; how many `-n auto` starts is decided here), each worker with a data
home of its own; the install scripts run once per test run, in whichever worker needs them
first; their progress reaches the terminal.

Building or fetching what the tests need takes a while on first use and pytest captures every
test's output, so tests/support/scripts.py hands each progress line to the sink set here, which
writes it through pytest's terminal reporter with capturing suspended (as `capsys.disabled()`
does), also under `-q`; a worker has no terminal of its own, and writes to its stderr, which is
the terminal's.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile

import pytest

from tests.support.scripts import RUN_DIR_VARIABLE, set_progress_sink

# The gateway's default store is a SQLite file under XDG_DATA_HOME: tests (and the gateways
# they start as subprocesses) keep theirs in a temporary directory, never in the user's home.
# Imported in each worker, so each has its own.
os.environ["XDG_DATA_HOME"] = tempfile.mkdtemp(prefix="codexgate-tests-")


def _worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    if not _worker(config):
        # One directory for the whole run, which the workers inherit (they start later): what
        # they do once per run (tests/support/scripts.py's install_once) is recorded there.
        os.environ[RUN_DIR_VARIABLE] = tempfile.mkdtemp(prefix="codexgate-test-run-")

    def show(line: str) -> None:
        # Looked up here: the terminal reporter may be registered after this hook runs.
        capture = config.pluginmanager.get_plugin("capturemanager")
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            if reporter is None or _worker(config):  # -p no:terminal, or a worker's
                print(line, file=sys.stderr, flush=True)
            else:
                reporter.write_line(line)

    set_progress_sink(show)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto`: half a worker more than one per core (three for two). Much of the suite's
    time is waiting (Codex's backoff, a lingering upstream, a timeout running out), which a
    further worker's tests fill (docs/testing.md has the figures).
    PYTEST_XDIST_AUTO_NUM_WORKERS still says how many (xdist reads it)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    cores = len(os.sched_getaffinity(0))
    return cores + (cores + 1) // 2


def pytest_unconfigure(config: pytest.Config) -> None:
    if not _worker(config):
        shutil.rmtree(os.environ.pop(RUN_DIR_VARIABLE, ""), ignore_errors=True)
