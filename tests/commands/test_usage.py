"""`codexgate usage` (commands/usage/command.py): the ledger a gateway wrote to its store, as a
table with a total (a row per face), as JSON, for one key or every key, and what it says when
there is nothing to read."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from codexgate.cli import main
from codexgate.store.base import Retention
from codexgate.store.meter import UsageRow
from codexgate.store.sqlite import SqliteStore
from codexgate.store.sqlite_meter import SqliteMeter

ROWS = [
    UsageRow("alice", "2026-03-01", "coder", "local", "responses", 2, 2400, 2000, 600, 240),
    UsageRow("alice", "2026-03-01", "coder", "local", "messages", 1, 900, 0, 100, 0),
    UsageRow("bob", "2026-03-01", "other", "vllm", "chat", 1, 1200, 0, 300, 0),
    UsageRow("bob", "2026-03-01", "other", "vllm", "", 1, 5, 0, 1, 0),  # written before faces
    UsageRow("alice", "2026-03-02", "coder", "local", "compact", 1, 1200, 1000, 300, 120),
]


def ledger(path: Path) -> Path:
    async def write() -> None:
        store = SqliteStore(path, Retention())
        await store.open()
        meter = SqliteMeter(store)
        await meter.open()
        await meter.charge([], ROWS)
        await store.close()

    asyncio.run(write())
    return path


@pytest.fixture(autouse=True)
def no_config_of_the_user(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CODEXGATE_CONFIG", "CODEXGATE_STORE", "CODEXGATE_STORE_PATH", "CODEXGATE_STORE_URL"):
        monkeypatch.delenv(name, raising=False)


def usage(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(["usage", *args])
    out, err = capsys.readouterr()
    return status, out, err


def test_every_keys_rows_as_a_table_with_a_total(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = ledger(tmp_path / "store.sqlite3")
    status, out, _ = usage(
        capsys, "--store-path", str(store), "--start-date", "2026-03-01", "--end-date", "2026-03-31"
    )
    assert status == 0
    assert out.splitlines() == [
        "date        key    model  upstream  face       requests  input  cached  output  reasoning",
        "----------  -----  -----  --------  ---------  --------  -----  ------  ------  ---------",
        "2026-03-01  alice  coder  local     messages          1    900       0     100          0",
        "2026-03-01  alice  coder  local     responses         2   2400    2000     600        240",
        "2026-03-01  bob    other  vllm      (unknown)         1      5       0       1          0",
        "2026-03-01  bob    other  vllm      chat              1   1200       0     300          0",
        "2026-03-02  alice  coder  local     compact           1   1200    1000     300        120",
        "----------  -----  -----  --------  ---------  --------  -----  ------  ------  ---------",
        "total                                                 6   5705    3000    1301        360",
    ]


def test_one_keys_rows_as_json_for_one_day(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = ledger(tmp_path / "store.sqlite3")
    args = (
        "--store-path",
        str(store),
        "--key",
        "alice",
        "--start-date",
        "2026-03-02",
        "--end-date",
        "2026-03-02",
    )
    status, out, _ = usage(capsys, *args, "--json")
    assert status == 0
    assert orjson.loads(out) == {"object": "list", "data": [
        {"key": "alice", "date": "2026-03-02", "model": "coder", "upstream": "local", "face": "compact",
         "requests": 1, "input_tokens": 1200, "cached_tokens": 1000, "output_tokens": 300,
         "reasoning_tokens": 120},
    ]}  # fmt: skip
    status, out, _ = usage(capsys, "--store-path", str(store), "--key", "carol", "--end-date", "2026-03-02")
    assert (status, out) == (0, "no usage by key 'carol' from 2026-02-01 to 2026-03-02 (UTC)\n")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--store", "none"), 'store = "none": each gateway process keeps its usage to itself'),
        (("--store-path", "{tmp}/nothing.sqlite3"), "no store at {tmp}/nothing.sqlite3: nothing was served"),
        (("--end-date", "yesterday"), "--end-date 'yesterday' is not a date written YYYY-MM-DD"),
        (("--start-date", "2026-03-05", "--end-date", "2026-03-01"), "--start-date 2026-03-05 is after"),
    ],
)
def test_what_cannot_be_read_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], said: str
) -> None:
    status, _, err = usage(capsys, *(arg.format(tmp=tmp_path) for arg in args))
    assert status == 2 and err.startswith("codexgate: " + said.format(tmp=tmp_path)), err
