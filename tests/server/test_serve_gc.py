"""`codexgate serve` tunes the garbage collector for a long-running server (server/serve.py)."""

from __future__ import annotations

import subprocess
import sys


def test_serve_freezes_what_startup_loaded_and_collects_less_often() -> None:
    # In a fresh interpreter: the setting is process-wide and this test process must keep its own.
    code = (
        "import gc\n"
        "from codexgate.server.serve import tune_garbage_collector\n"
        "before = gc.get_threshold()\n"
        "tune_garbage_collector()\n"
        "print(before[0], gc.get_threshold()[0], gc.get_freeze_count() > 1000)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["700", "20000", "True"]
