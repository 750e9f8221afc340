"""Running the project's install scripts (scripts/*.sh) from tests, which install what they
need on first use: a failed or timed-out install fails the calling test with its output."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest


def run_install_script(script: Path, timeout: float) -> str:
    """Run `bash script`; returns its stdout."""
    try:
        proc = subprocess.run(
            ["bash", str(script)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        )
    except subprocess.CalledProcessError as exc:
        pytest.fail(f"{script.name} failed ({exc.returncode}):\n{exc.stdout[-3000:]}{exc.stderr[-3000:]}")
    except subprocess.TimeoutExpired:
        pytest.fail(f"{script.name} timed out after {timeout:g} s")
    return proc.stdout
