"""`codexgate serve --workers 2` as a real process tree: both workers serve the one port (their
access lines say which), a killed worker is replaced while the other keeps serving, stored
responses continue across workers (the shared SQLite store), and SIGTERM stops them all."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.support.fake_upstream import FakeUpstream, stall_reply, text_reply
from tests.support.servers import run_asgi_server

BOUND = 30.0


def model(body: dict[str, object]) -> object:
    messages = body["messages"]
    assert isinstance(messages, list)
    said = [str(m["content"]) for m in messages if m["role"] == "user"]
    if said[-1] == "slow":
        return stall_reply("slow answer", 0.3)
    return text_reply("heard: " + " / ".join(said))


class Tree:
    def __init__(self, process: subprocess.Popen[bytes], log: Path) -> None:
        self.process = process
        self.log = log

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, pattern: str, after: int = 0) -> re.Match[str]:
        deadline = time.monotonic() + BOUND
        while time.monotonic() < deadline:
            found = list(re.finditer(pattern, self.text()))
            if len(found) > after:
                return found[after]
            assert self.process.poll() is None, self.text()
            time.sleep(0.01)
        raise AssertionError(f"no {pattern!r} in the log:\n{self.text()}")

    def workers(self) -> dict[str, int]:
        """worker number -> pid, the latest start of each."""
        return {n: int(pid) for n, pid in re.findall(r"worker (\d+) started \(pid (\d+)\)", self.text())}


@contextmanager
def serve_workers(
    upstream: str, store: Path, *args: str, env: dict[str, str] | None = None
) -> Iterator[tuple[str, Tree]]:
    """`serve --workers 2` (and `args`, with `env` added to the environment) on the SQLite store
    at `store`."""
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "log"
        environ = {**os.environ, "CODEXGATE_STORE_PATH": str(store), "PYTHONUNBUFFERED": "1", **(env or {})}
        command = [sys.executable, "-m", "codexgate.cli", "serve", "--port", "0", "--workers", "2"]
        with log.open("wb") as out:
            process = subprocess.Popen(
                [*command, "--no-discover", "--upstream", upstream, *args],
                env=environ, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
            )  # fmt: skip
        tree = Tree(process, log)
        try:
            port = tree.wait_for(r"2 workers on [\d.]+:(\d+)").group(1)
            base = f"http://127.0.0.1:{port}"
            tree.wait_for(r"Application startup complete", after=1)  # both workers
            yield base, tree
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=BOUND)
                except subprocess.TimeoutExpired:
                    for pid in tree.workers().values():
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                    process.kill()
                    process.wait()


def _served_by(tree: Tree) -> set[str]:
    return set(re.findall(r"worker=(\d+)", tree.text()))


def test_two_workers_share_the_port_survive_a_death_and_stop_together(tmp_path: Path) -> None:
    with run_asgi_server(FakeUpstream(model)) as upstream:
        with serve_workers(upstream + "/v1", tmp_path / "store.db") as (base, tree):
            body = {"model": "m", "input": "slow"}
            with ThreadPoolExecutor(8) as pool:
                for _ in range(5):  # the kernel gives connections to whichever worker accepts first
                    replies = list(
                        pool.map(
                            lambda _: httpx.post(base + "/v1/responses", json=body, timeout=BOUND), range(8)
                        )
                    )
                    assert all(r.status_code == 200 for r in replies)
                    if _served_by(tree) == {"1", "2"}:
                        break
            assert _served_by(tree) == {"1", "2"}

            # A chain continues whichever worker answers: the store is shared.
            previous = None
            for n in range(4):
                reply = httpx.post(
                    base + "/v1/responses",
                    json={"model": "m", "input": f"turn {n}", "previous_response_id": previous},
                    timeout=BOUND,
                )
                previous = reply.json()["id"]
            assert (
                reply.json()["output"][0]["content"][0]["text"] == "heard: turn 0 / turn 1 / turn 2 / turn 3"
            )

            victim = tree.workers()["1"]
            os.kill(victim, signal.SIGKILL)
            tree.wait_for(r"worker 1 \(pid \d+\) ended with signal SIGKILL; starting another")
            tree.wait_for(r"worker 1 started", after=1)
            assert tree.workers()["1"] != victim
            for _ in range(10):  # served all along, by the survivor or the replacement
                assert (
                    httpx.post(
                        base + "/v1/responses", json={"model": "m", "input": "x"}, timeout=BOUND
                    ).status_code
                    == 200
                )

            workers = list(tree.workers().values())
            tree.process.send_signal(signal.SIGTERM)
            assert tree.process.wait(timeout=BOUND) == 0
        for pid in workers:
            assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_port_in_use_is_one_line_before_anything_starts(workers: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "codexgate.cli", "serve", "--port", str(port), "--workers", workers,
             "--no-discover", "--upstream", "http://127.0.0.1:9/v1"],
            env={**os.environ, "CODEXGATE_CONFIG": ""}, capture_output=True, text=True, timeout=BOUND,
        )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"codexgate: port {port} on 127.0.0.1 is in use (by another program); choose another with --port N"
    ), done.stderr


def test_an_address_that_is_not_this_machine_s_says_so() -> None:
    from codexgate.config import ConfigError
    from codexgate.server.workers import check_address

    with pytest.raises(
        ConfigError, match="192.0.2.1 is not an address of this machine; give one with --host"
    ):
        check_address("192.0.2.1", 8787)
    check_address("127.0.0.1", 0)  # any free port: nothing to check


def test_two_workers_on_the_sqlite_store_admit_exactly_a_keys_requests_per_minute(tmp_path: Path) -> None:
    """One key's requests_per_minute counted in the SQLite file both workers share: of a burst
    spread over the workers, exactly the limit is admitted, and the usage both wrote adds up."""
    from tests.support import key_limits as k

    config = k.limits_config(tmp_path, alice={"requests_per_minute": 6})
    with run_asgi_server(FakeUpstream(k.answer_with_usage)) as upstream:
        args = ("--config", str(config))
        with serve_workers(upstream + "/v1", tmp_path / "store.db", *args, env=k.KEY_ENV) as (base, tree):
            k.fresh_window(k.WINDOW, k.BURST_SECONDS)
            statuses = k.burst([base], 24, k.ALICE)
            assert sorted(statuses) == [200] * 6 + [429] * 18
            assert _served_by(tree) == {"1", "2"}, "both workers admitted or refused some"
            rows = k.usage_of(base, k.BOB, "?key=alice")  # each worker writes its usage within a second
            deadline = time.monotonic() + BOUND
            while (not rows or rows[0]["requests"] < 6) and time.monotonic() < deadline:
                time.sleep(0.05)
                rows = k.usage_of(base, k.BOB, "?key=alice")
    assert [(r["requests"], r["input_tokens"], r["output_tokens"]) for r in rows] == [
        (6, 6 * k.USAGE.prompt_tokens, 6 * k.USAGE.completion_tokens)
    ]
