"""`codexgate usage`: the usage ledger (store/meter.py) as a table, read from the store the
gateway writes it to (the same settings as `serve`: --config, --store, --store-path,
--store-url): one row per key, UTC day, route, upstream and face, with a total, or the rows as
JSON (those of GET /v1/usage). Every key's, or one's with --key.

A gateway writes what its answers spent within a second; rows of a gateway running with
`store = "none"` live in its process only, so only its GET /v1/usage can tell them.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sys
from typing import TextIO

import orjson

from codexgate.app import response_store
from codexgate.config import ConfigError, Settings
from codexgate.store import meter_of
from codexgate.store.base import StoreError
from codexgate.store.meter import COUNT_FIELDS, ROW_FIELDS, UsageRow

DEFAULT_DAYS = 30
_HEADINGS = ("date", "key", "model", "upstream", "face", "requests", "input", "cached", "output", "reasoning")
_NAMES = len(_HEADINGS) - len(COUNT_FIELDS)  # the columns that name the row, left-aligned


def run_usage(settings: Settings, args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Print the ledger's rows (to `out`, default stdout). Raises ConfigError (exit status 2)
    for dates that are not dates, a gateway without a store, or a store that cannot be read."""
    out = out or sys.stdout
    end = _date(args.end_date, "--end-date") or dt.datetime.now(dt.UTC).date()
    start = _date(args.start_date, "--start-date") or end - dt.timedelta(days=DEFAULT_DAYS - 1)
    if start > end:
        raise ConfigError(f"--start-date {start} is after --end-date {end}")
    rows = asyncio.run(_read(settings, args.key, start.isoformat(), end.isoformat()))
    if args.json:
        data = [{name: getattr(row, name) for name in ROW_FIELDS} for row in rows]
        out.write(orjson.dumps({"object": "list", "data": data}, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    if not rows:
        who = f"key {args.key!r}" if args.key else "any key"
        out.write(f"no usage by {who} from {start} to {end} (UTC)\n")
        return 0
    out.write(table(rows))
    return 0


async def _read(settings: Settings, key: str | None, start: str, end: str) -> list[UsageRow]:
    if settings.store == "none":
        raise ConfigError(
            'store = "none": each gateway process keeps its usage to itself; ask it (GET /v1/usage), '
            "or give the gateway a store (docs/state.md)"
        )
    store = response_store(settings)
    assert store is not None
    where = getattr(store, "path", None)
    if where is not None and not where.exists():
        raise ConfigError(f"no store at {where}: nothing was served with it yet (or give --store-path)")
    try:
        await store.open()
        try:
            meter = meter_of(store)
            await meter.open()
            try:
                return await meter.usage(key, start, end)
            finally:
                await meter.close()
        finally:
            await store.close()
    except StoreError as exc:
        raise ConfigError(str(exc)) from None


def table(rows: list[UsageRow]) -> str:
    """The rows, numbers right-aligned, and a total line. A row written before the ledger
    recorded faces shows its face as "(unknown)"."""
    lines = [[row.date, row.key or "(no key)", row.model, row.upstream, row.face or "(unknown)",
              *map(str, row.counts())] for row in rows]  # fmt: skip
    totals = [sum(row.counts()[n] for row in rows) for n in range(len(COUNT_FIELDS))]
    total = ["total", *[""] * (_NAMES - 1), *map(str, totals)]
    widths = [max(len(cells[n]) for cells in [list(_HEADINGS), *lines, total]) for n in range(len(_HEADINGS))]

    def line(cells: list[str]) -> str:
        placed = [
            cell.ljust(widths[n]) if n < _NAMES else cell.rjust(widths[n]) for n, cell in enumerate(cells)
        ]
        return "  ".join(placed).rstrip() + "\n"

    rule = "  ".join("-" * w for w in widths) + "\n"
    return line(list(_HEADINGS)) + rule + "".join(map(line, lines)) + rule + line(total)


def _date(value: str | None, flag: str) -> dt.date | None:
    if value is None:
        return None
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise ConfigError(f"{flag} {value!r} is not a date written YYYY-MM-DD") from None
