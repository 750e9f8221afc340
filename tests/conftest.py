"""Session-wide test setup: the install scripts' progress reaches the terminal.

Building llama-server takes minutes on first use and pytest captures every test's output, so
tests/support/scripts.py hands each progress line to the sink set here, which writes it through
pytest's terminal reporter with capturing suspended (as `capsys.disabled()` does), also under
`-q`.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile

import pytest

from tests.support.scripts import set_progress_sink

# The gateway's default store is a SQLite file under XDG_DATA_HOME: tests (and the gateways
# they start as subprocesses) keep theirs in a temporary directory, never in the user's home.
os.environ["XDG_DATA_HOME"] = tempfile.mkdtemp(prefix="codexgate-tests-")


def pytest_configure(config: pytest.Config) -> None:
    def show(line: str) -> None:
        # Looked up here: the terminal reporter may be registered after this hook runs.
        capture = config.pluginmanager.get_plugin("capturemanager")
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            if reporter is None:  # -p no:terminal
                print(line, file=sys.stderr, flush=True)
            else:
                reporter.write_line(line)

    set_progress_sink(show)
