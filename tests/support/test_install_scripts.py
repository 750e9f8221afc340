"""The install scripts run from tests (tests/support/scripts.py): once per session whatever the
outcome, a failure failing every caller at once with its cause, progress streamed while they run.
All with fake scripts and a fake uv: nothing is downloaded here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import scripts
from tests.support.llama_server import llama_runtime
from tests.support.processes import dead, wait_until
from tests.support.scripts import ScriptFailed, install_once, run_script

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def progress(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """A fresh run: no install has run yet (in this process or another worker), and progress
    lines are collected here."""
    lines: list[str] = []
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    monkeypatch.setenv(scripts.RUN_DIR_VARIABLE, str(run_dir))
    monkeypatch.setattr(scripts, "_outcomes", {})
    monkeypatch.setattr(scripts, "_progress", lines.append)
    return lines


def write_script(path: Path, body: str) -> Path:
    path.write_text("set -eu\n" + body)
    return path


def runs(counter: Path) -> int:
    return len(counter.read_text().splitlines()) if counter.exists() else 0


def test_a_failed_install_runs_once_and_fails_every_caller_with_its_cause(
    tmp_path: Path, progress: list[str]
) -> None:
    counter = tmp_path / "runs"
    script = write_script(
        tmp_path / "build.sh",
        f"echo run >> {counter}\necho 'build: configuring' >&2\necho 'CMake Error: no compiler' >&2\nexit 3\n",
    )
    with pytest.raises(pytest.fail.Exception) as first:
        install_once(script, timeout=30)
    assert "exit status 3" in str(first.value) and "CMake Error: no compiler" in str(first.value)
    for _ in range(3):
        with pytest.raises(pytest.fail.Exception) as later:
            install_once(script, timeout=30)
        assert "already failed" in str(later.value) and "CMake Error: no compiler" in str(later.value)
    assert runs(counter) == 1
    assert progress == ["build: configuring", "CMake Error: no compiler"]


def test_a_successful_install_runs_once_and_returns_its_stdout(tmp_path: Path) -> None:
    counter = tmp_path / "runs"
    script = write_script(tmp_path / "install.sh", f"echo run >> {counter}\necho /opt/tool/bin/tool\n")
    assert install_once(script, timeout=30) == "/opt/tool/bin/tool\n"
    assert install_once(script, timeout=30) == "/opt/tool/bin/tool\n"
    assert runs(counter) == 1


def test_an_install_runs_once_per_arguments(tmp_path: Path) -> None:
    counter = tmp_path / "runs"
    script = write_script(tmp_path / "install.sh", f'echo "$1" >> {counter}\necho "/opt/tool/$1/bin/tool"\n')
    assert install_once(script, timeout=30, args=("1.0",)) == "/opt/tool/1.0/bin/tool\n"
    assert install_once(script, timeout=30, args=("2.0",)) == "/opt/tool/2.0/bin/tool\n"
    assert install_once(script, timeout=30, args=("1.0",)) == "/opt/tool/1.0/bin/tool\n"
    assert counter.read_text().splitlines() == ["1.0", "2.0"]


def start_in_another_worker(script: Path) -> subprocess.Popen[str]:
    """Another process of the same run (as a pytest-xdist worker is) calling `install_once`."""
    code = (
        "import sys, pytest\n"
        "from pathlib import Path\n"
        "from tests.support.scripts import install_once\n"
        "try:\n"
        "    print(install_once(Path(sys.argv[1]), timeout=30), end='')\n"
        "except pytest.fail.Exception as exc:\n"
        "    print('failed:', exc)\n"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code, str(script)],
        cwd=REPO_ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def in_another_worker(script: Path) -> str:
    """What `install_once(script)` returned in another process of the run (or its failure)."""
    out, _ = start_in_another_worker(script).communicate(timeout=60)
    return out


def test_an_install_another_worker_ran_is_not_run_again(tmp_path: Path) -> None:
    counter = tmp_path / "runs"
    script = write_script(tmp_path / "install.sh", f"echo run >> {counter}\necho /opt/tool/bin/tool\n")
    assert install_once(script, timeout=30) == "/opt/tool/bin/tool\n"
    assert in_another_worker(script) == "/opt/tool/bin/tool\n"
    assert runs(counter) == 1


def test_an_install_that_failed_in_another_worker_fails_here_with_its_cause(tmp_path: Path) -> None:
    counter = tmp_path / "runs"
    script = write_script(tmp_path / "build.sh", f"echo run >> {counter}\necho 'no compiler' >&2\nexit 3\n")
    assert "no compiler" in in_another_worker(script)
    with pytest.raises(pytest.fail.Exception) as here:
        install_once(script, timeout=30)
    assert "already failed" in str(here.value) and "no compiler" in str(here.value)
    assert runs(counter) == 1


def test_a_worker_that_needs_an_install_another_is_running_waits_for_it(
    tmp_path: Path, progress: list[str]
) -> None:
    counter, go = tmp_path / "runs", tmp_path / "go"
    script = write_script(
        tmp_path / "install.sh",
        f"echo run >> {counter}\nwhile [ ! -e {go} ]; do sleep 0.01; done\necho /opt/tool/bin/tool\n",
    )
    first = start_in_another_worker(script)
    wait_until(lambda: runs(counter) == 1, what="the first worker's install did not start")
    second = start_in_another_worker(script)
    assert second.stderr is not None
    assert "another test worker is running it; waiting for it" in second.stderr.readline()
    go.touch()
    for proc in (first, second):
        out, _ = proc.communicate(timeout=60)
        assert out == "/opt/tool/bin/tool\n"
    assert runs(counter) == 1


FAKE_NPM = """#!/bin/sh
# `npm install --prefix DIR ... @openai/codex@VERSION`: a `codex` that reports VERSION.
echo "$*" >> "{log}"
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix=$2; shift ;;
    @openai/codex@*) version=${{1#@openai/codex@}} ;;
  esac
  shift
done
mkdir -p "$prefix/node_modules/.bin"
printf '#!/bin/sh\\necho "codex-cli %s"\\n' "$version" > "$prefix/node_modules/.bin/codex"
chmod +x "$prefix/node_modules/.bin/codex"
"""


def test_install_codex_puts_each_version_in_its_own_prefix(tmp_path: Path) -> None:
    """scripts/install-codex.sh with a fake npm: the current release by default, another by its
    argument, side by side; an installed version is not installed again; a bad one is refused."""
    fake_bin, log = tmp_path / "bin", tmp_path / "npm.log"
    fake_bin.mkdir()
    (fake_bin / "npm").write_text(FAKE_NPM.format(log=log))
    (fake_bin / "npm").chmod(0o755)
    (fake_bin / "node").symlink_to("/bin/true")
    env = {"PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}", "CODEXGATE_CACHE": str(tmp_path / "cache")}

    def install(*args: str) -> subprocess.CompletedProcess[str]:
        script = str(REPO_ROOT / "scripts" / "install-codex.sh")
        return subprocess.run(["bash", script, *args], env=env, capture_output=True, text=True, timeout=60)

    default, older, again = install(), install("0.169.0"), install("0.169.0")
    cache = tmp_path / "cache" / "codex"
    assert default.stdout == f"{cache}/0.171.0/node_modules/.bin/codex\n", default.stderr
    assert older.stdout == again.stdout == f"{cache}/0.169.0/node_modules/.bin/codex\n", older.stderr
    assert [line.split()[-1] for line in log.read_text().splitlines()] == [
        "@openai/codex@0.171.0",
        "@openai/codex@0.169.0",
    ]
    bad = install("latest")
    assert bad.returncode != 0 and "not a release version: 'latest'" in bad.stderr


FAKE_CLAUDE_NPM = """#!/bin/sh
# `npm install --prefix DIR ... @anthropic-ai/claude-code@VERSION`: a `claude` that reports VERSION.
# With {go} named, it waits for that file before installing (the test holds the install open).
echo "$*" >> "{log}"
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix=$2; shift ;;
    @anthropic-ai/claude-code@*) version=${{1#@anthropic-ai/claude-code@}} ;;
  esac
  shift
done
if [ -n "{go}" ]; then while [ ! -e "{go}" ]; do sleep 0.01; done; fi
mkdir -p "$prefix/node_modules/.bin"
printf '#!/bin/sh\\necho "%s (Claude Code)"\\n' "$version" > "$prefix/node_modules/.bin/claude"
chmod +x "$prefix/node_modules/.bin/claude"
"""


def fake_claude_npm(tmp_path: Path, go: Path | None = None) -> tuple[dict[str, str], Path]:
    """PATH and cache for scripts/install-claude.sh with a fake npm, and the npm call log."""
    fake_bin, log = tmp_path / "bin", tmp_path / "npm.log"
    fake_bin.mkdir()
    (fake_bin / "npm").write_text(FAKE_CLAUDE_NPM.format(log=log, go=go or ""))
    (fake_bin / "npm").chmod(0o755)
    (fake_bin / "node").symlink_to("/bin/true")
    env = {"PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}", "CODEXGATE_CACHE": str(tmp_path / "cache")}
    return env, log


CLAUDE_SCRIPT = str(REPO_ROOT / "scripts" / "install-claude.sh")


def test_install_claude_installs_the_pinned_version_in_its_own_prefix(tmp_path: Path) -> None:
    """scripts/install-claude.sh with a fake npm: the pinned version by default (the one the e2e
    helper runs), another by its argument; an installed version is not installed again."""
    from tests.e2e.claude_cli import CLAUDE_VERSION

    env, log = fake_claude_npm(tmp_path)

    def install(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", CLAUDE_SCRIPT, *args], env=env, capture_output=True, text=True, timeout=60
        )

    default, again, other = install(), install(), install("2.1.328")
    cache = tmp_path / "cache" / "claude"
    assert default.stdout == again.stdout == f"{cache}/{CLAUDE_VERSION}/node_modules/.bin/claude\n", (
        default.stderr
    )
    assert other.stdout == f"{cache}/2.1.328/node_modules/.bin/claude\n", other.stderr
    assert [line.split()[-1] for line in log.read_text().splitlines()] == [
        f"@anthropic-ai/claude-code@{CLAUDE_VERSION}",
        "@anthropic-ai/claude-code@2.1.328",
    ]
    bad = install("latest")
    assert bad.returncode != 0 and "not a release version: 'latest'" in bad.stderr


def _children(pid: int) -> list[str]:
    """The command names of a process's children."""
    names = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            name, rest = stat.read_text().rsplit(")", 1)
        except OSError:
            continue
        if int(rest.split()[1]) == pid:
            names.append(name.split("(", 1)[1])
    return names


def test_two_concurrent_claude_installs_download_once(tmp_path: Path) -> None:
    """While one install runs, a second waits on the lock (its flock(1) child is seen), then
    finds the version installed and downloads nothing."""
    go = tmp_path / "go"
    env, log = fake_claude_npm(tmp_path, go)
    options: dict[str, Any] = {"env": env, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    first = subprocess.Popen(["bash", CLAUDE_SCRIPT], **options)
    try:
        wait_until(lambda: log.exists(), what="the first install never called npm")
        second = subprocess.Popen(["bash", CLAUDE_SCRIPT], **options)
        try:
            wait_until(
                lambda: "flock" in _children(second.pid), what="the second install did not wait on the lock"
            )
            go.touch()
            outs = [first.communicate(timeout=60), second.communicate(timeout=60)]
        finally:
            second.kill()
            second.wait()
    finally:
        first.kill()
        first.wait()
    assert first.returncode == second.returncode == 0, outs
    assert outs[0][0] == outs[1][0] and outs[0][0].endswith("/node_modules/.bin/claude\n")
    assert len(log.read_text().splitlines()) == 1


def test_progress_reaches_the_sink_while_the_script_is_still_running(tmp_path: Path) -> None:
    # The script blocks on a FIFO until the sink has seen its first line: progress delivered
    # only at exit would never unblock it (the timeout would kill it instead).
    fifo = tmp_path / "go"
    os.mkfifo(fifo)
    script = write_script(
        tmp_path / "build.sh",
        f"echo 'compiling: 5%' >&2\nread -r answer < {fifo}\necho \"done after $answer\" >&2\n",
    )
    seen: list[str] = []

    def sink(line: str) -> None:
        seen.append(line)
        if line == "compiling: 5%":
            with open(fifo, "w") as go:
                go.write("ack\n")

    run_script(script, timeout=30, sink=sink)
    assert seen == ["compiling: 5%", "done after ack"]


def test_a_hung_install_is_killed_with_its_children_at_the_timeout(tmp_path: Path) -> None:
    pid_file = tmp_path / "child"
    script = write_script(
        tmp_path / "hang.sh", f"echo 'downloading' >&2\nsleep 600 &\necho $! > {pid_file}\nwait\n"
    )
    with pytest.raises(ScriptFailed, match=r"timed out after 0\.5 s(.|\n)*downloading"):
        run_script(script, timeout=0.5, sink=lambda line: None)
    child = int(pid_file.read_text())
    # SIGKILL was sent to the whole group; wait until it has landed
    wait_until(lambda: dead(child), seconds=10, what=f"the script's child {child} survived the timeout")


def test_where_the_runtime_cannot_run_llama_tests_skip_or_fail_when_required(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CODEXGATE_LLAMA_SERVER", raising=False)
    monkeypatch.setenv("CODEXGATE_LLAMA_DIR", str(tmp_path / "llama"))
    monkeypatch.setattr("tests.support.llama_server.cpu_problem", lambda: "this CPU lacks AVX2")
    monkeypatch.delenv("CODEXGATE_REQUIRE_LLAMA", raising=False)
    reason = "cannot run here: this CPU lacks AVX2"
    with pytest.raises(pytest.skip.Exception, match=reason):
        llama_runtime()
    monkeypatch.setenv("CODEXGATE_REQUIRE_LLAMA", "1")
    with pytest.raises(pytest.fail.Exception, match=reason):
        llama_runtime()


FAKE_UV = """#!/bin/sh
echo run >> "{counter}"
echo "error: no wheel of xllamacpp for this platform (fake uv)" >&2
exit 1
"""


def test_a_broken_runtime_download_fails_every_llama_test_once_with_its_cause(tmp_path: Path) -> None:
    """The real fetch script and pytest session, its tests in a worker process as pyproject's
    addopts run them (one worker: two cost ~10 s more here, and what two workers share is
    tested above), with a uv that fails: the download runs once, its progress and cause reach
    the terminal under -q, every llama test fails with the cause."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    counter = tmp_path / "uv-runs"
    (fake_bin / "uv").write_text(FAKE_UV.format(counter=counter))
    (fake_bin / "uv").chmod(0o755)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("CODEXGATE_", "PYTEST_")) and key != "UV"
    }
    env.update(
        PATH=f"{fake_bin}{os.pathsep}{env['PATH']}",
        CODEXGATE_LLAMA_DIR=str(tmp_path / "llama"),
        CODEXGATE_REQUIRE_LLAMA="1",
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "1"]
        + ["tests/test_llama_cpp.py", "tests/e2e/test_codex_llama.py"],
        cwd=REPO_ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert runs(counter) == 1, out
    assert "fetch-llama: downloading xllamacpp" in out  # progress, shown despite capturing
    assert "fetch-llama: error: downloading xllamacpp" in out
    assert "already failed in this session" in out  # the e2e module did not fetch again
    assert out.count("no wheel of xllamacpp for this platform (fake uv)") >= 3
