"""The wheel as users get it: `uv build` makes it with every file the package reads at run time
(the live view's page, not only modules), and `uv tool install` and `uvx` run it.

Offline when the uv cache can answer (it does once the project was synced and installed once),
else through the registry; dependencies are held to uv.lock's versions, which the cache has."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

import pytest

import codexgate

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "codexgate"


def _uv() -> str:
    uv = os.environ.get("UV") or shutil.which("uv")
    assert uv, "uv is needed (README: pip install uv)"
    return uv


def _uv_run(args: Sequence[str], env: dict[str, str] | None = None, timeout: float = 180) -> str:
    """`uv ARGS`, offline first (the cache), then with the registry; returns the output.
    Raises AssertionError with uv's output when both fail."""
    outputs = []
    for mode in (["--offline"], []):
        result = subprocess.run(
            [_uv(), *args[:1], *mode, *args[1:]],
            capture_output=True,
            text=True,
            env={**os.environ, **(env or {})},
            timeout=timeout,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
        )
        if result.returncode == 0:
            return result.stdout + result.stderr
        outputs.append(result.stdout + result.stderr)
    raise AssertionError("\n---\n".join(outputs))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    _uv_run(["build", "--wheel", "-o", str(out), str(ROOT)])
    (built,) = out.glob("codexgate-*.whl")
    return built


@pytest.fixture(scope="module")
def constraints(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """uv.lock's versions of the runtime dependencies, as a constraints file."""
    path = tmp_path_factory.mktemp("lock") / "constraints.txt"
    _uv_run(["export", "--frozen", "--no-dev", "--no-emit-project", "--no-hashes", "-o", str(path)])
    return path


def test_the_wheel_holds_every_file_of_the_package(wheel: Path) -> None:
    wanted = {
        "codexgate/" + path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert not wanted - names, f"missing from the wheel: {sorted(wanted - names)}"
    assert "codexgate/observability/live_view.html" in names  # read with importlib.resources
    assert not {n for n in names if "__pycache__" in n or n.endswith(".pyc")}


def test_uv_tool_install_runs_the_wheel(wheel: Path, constraints: Path, tmp_path: Path) -> None:
    env = {"UV_TOOL_DIR": str(tmp_path / "tools"), "UV_TOOL_BIN_DIR": str(tmp_path / "bin")}
    _uv_run(
        ["tool", "install", "--python", sys.executable, "-c", str(constraints), "--from", str(wheel),
         "codexgate"],
        env,
    )  # fmt: skip
    command = tmp_path / "bin" / "codexgate"
    version = subprocess.run([command, "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.strip() == f"codexgate {codexgate.__version__}"
    helped = subprocess.run([command, "serve", "--help"], capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and "--shutdown-grace" in helped.stdout
    # The installed package reads its page as the server does (not from the source tree).
    python = tmp_path / "tools" / "codexgate" / "bin" / "python"
    page = subprocess.run(
        [python, "-c", "from importlib import resources as r; "
         "print(len(r.files('codexgate.observability').joinpath('live_view.html').read_bytes()))"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert page.returncode == 0 and int(page.stdout) > 0, page.stderr


def test_uvx_runs_the_wheel(wheel: Path, constraints: Path) -> None:
    out = _uv_run(
        ["tool", "run", "--python", sys.executable, "-c", str(constraints), "--from", str(wheel),
         "codexgate", "--version"],
    )  # fmt: skip
    assert f"codexgate {codexgate.__version__}" in out
