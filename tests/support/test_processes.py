"""The helpers of tests/support/processes.py that the other tests lean on: free ports that no
other worker of the run is given, and waits on a condition under a deadline."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

import pytest

from tests.support import processes
from tests.support.processes import free_port, until, wait_until


def ephemeral_low() -> int:
    return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])


def as_worker(monkeypatch: pytest.MonkeyPatch, index: int, count: int, start: int | None = None) -> None:
    """This process as worker `index` of `count`, its ports not handed out yet, from the
    `start`th of its slice if given."""
    monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{index}")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", str(count))
    monkeypatch.setattr(processes, "_ports", None)
    if start is not None:
        monkeypatch.setattr(processes.random, "randrange", lambda size: start)


@pytest.fixture
def worker(monkeypatch: pytest.MonkeyPatch) -> None:
    as_worker(monkeypatch, 1, 3)


@pytest.mark.usefixtures("worker")
def test_free_ports_come_from_below_the_ephemeral_range_in_a_slice_of_the_workers_own() -> None:
    """Neither the kernel (port 0, outgoing connections) nor another worker picks them."""
    size = (ephemeral_low() - processes.PORT_FLOOR) // 3
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == 200  # none given twice
    assert all(processes.PORT_FLOOR + size <= port < processes.PORT_FLOOR + 2 * size for port in ports)


def test_a_port_in_use_is_not_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    as_worker(monkeypatch, 1, 3, start=0)
    first = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", first + 1))  # the one that would come next
        assert free_port() == first + 2


def test_the_ports_serve_looks_for_model_servers_on_are_not_handed_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    as_worker(monkeypatch, 0, 1, start=11433 - processes.PORT_FLOOR)
    assert [free_port(), free_port()] == [11433, 11435]  # not Ollama's 11434


def test_wait_until_returns_once_the_condition_holds_and_fails_past_its_deadline() -> None:
    calls = iter(range(100))
    wait_until(lambda: next(calls) == 3, seconds=5)
    with pytest.raises(AssertionError, match="never"):
        wait_until(lambda: False, seconds=0.05, what="never")


async def test_until_lets_the_loop_run_and_fails_past_its_deadline() -> None:
    done = asyncio.Event()
    asyncio.get_running_loop().call_later(0.01, done.set)
    await until(done.is_set, seconds=5)
    with pytest.raises(AssertionError, match="never"):
        await until(lambda: False, seconds=0.05, what="never")


def test_auto_starts_three_workers_for_two_cores_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.conftest import pytest_xdist_auto_num_workers

    config = pytest.Config.__new__(pytest.Config)  # the hook does not read it
    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)
    for cores, workers in ((1, 2), (2, 3), (4, 6), (8, 12)):
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid, n=cores: set(range(n)))
        assert pytest_xdist_auto_num_workers(config) == workers
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "5")
    assert pytest_xdist_auto_num_workers(config) is None  # xdist's own reading of it: 5
