"""The embedded store: one SQLite file, the default.

The event loop never touches SQLite. Writes go to one writer thread with its own connection;
it takes every write pending at that moment and commits them in one transaction (group
commit), so 200 requests finishing at once cost one commit, not 200. Reads run on a small
pool of reader threads, each with its own connection: in WAL mode readers see the last commit
and never wait for the writer.

Durability: WAL with `synchronous=NORMAL` loses nothing on a crash of the process (`kill -9`)
once a commit has returned; only a power loss may drop the last commits. That is the promise
of `Store.put`, which resolves only after the commit holding its record.

Several processes may share the file: `busy_timeout` makes a writer wait for another
process's transaction instead of failing, and the secret is created with INSERT OR IGNORE
inside a write transaction, so every process reads the same one.

Schema changes are migrations (`migrate`): forward only, each named and recorded in the table
`migrations` when applied, in the write transaction that applies it, so that of several
processes opening the file at once one applies it and the others find it done.
"""

from __future__ import annotations

import asyncio
import os
import queue
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from codexgate.store.base import (
    MAX_CHAIN,
    RECORD_COLUMNS,
    Item,
    Retention,
    StoredResponse,
    StoreError,
    StoreStats,
    encode_body,
    pick_items,
    record_of_row,
)

T = TypeVar("T")

_BUSY_TIMEOUT_MS = 10_000
_READERS = 4

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    rid INTEGER PRIMARY KEY,
    owner TEXT NOT NULL,
    id TEXT NOT NULL,
    created_at REAL NOT NULL,
    previous_response_id TEXT,
    size INTEGER NOT NULL,
    body BLOB NOT NULL,
    UNIQUE (owner, id)
);
CREATE INDEX IF NOT EXISTS responses_by_age ON responses (created_at);
-- (owner, item_id) -> response_id. One item id may sit in several responses of an owner (a
-- request repeats an item of the one it continues), so the response is part of the key.
CREATE TABLE IF NOT EXISTS items (
    owner TEXT NOT NULL,
    item_id TEXT NOT NULL,
    response_id TEXT NOT NULL,
    PRIMARY KEY (owner, item_id, response_id),
    FOREIGN KEY (owner, response_id) REFERENCES responses (owner, id) ON DELETE CASCADE
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS items_by_response ON items (owner, response_id);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value BLOB NOT NULL);
"""


# Newest first, each with the sum of its own and all newer sizes: rows past `max_bytes`.
_OVER_BUDGET = """
SELECT rid FROM (
    SELECT rid, SUM(size) OVER (
        ORDER BY created_at DESC, rid DESC ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
    ) AS running FROM responses
) WHERE running > ?
"""

_CHAIN = f"""
WITH RECURSIVE chain(depth, rid, prev) AS (
    SELECT 0, rid, previous_response_id FROM responses
        WHERE owner = :owner AND id = :id AND created_at >= :oldest
    UNION ALL
    SELECT chain.depth + 1, r.rid, r.previous_response_id FROM chain
        JOIN responses AS r ON r.owner = :owner AND r.id = chain.prev
        WHERE chain.depth + 1 < :limit AND r.created_at >= :oldest
)
SELECT {RECORD_COLUMNS} FROM chain JOIN responses USING (rid) ORDER BY depth DESC
"""


# A schema change: its name (recorded once applied: never renamed, changed or reused; a change
# to it is a new migration) and what it does on the writer's connection, in its transaction.
Migration = tuple[str, Callable[[sqlite3.Connection], None]]

_MIGRATIONS_TABLE = (
    "CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL) WITHOUT ROWID"
)


def migrate(conn: sqlite3.Connection, migrations: Sequence[Migration]) -> list[str]:
    """Apply, in order, each of `migrations` the file has not recorded yet, and record it. Run
    inside a write transaction (the writer's: `SqliteStore._write`), which makes the check and
    the change one step for every process. Returns the names applied. Raises sqlite3.Error
    (the transaction's caller undoes it all)."""
    conn.execute(_MIGRATIONS_TABLE)
    done = {name for (name,) in conn.execute("SELECT name FROM migrations")}
    applied: list[str] = []
    for name, change in migrations:
        if name in done:
            continue
        change(conn)
        conn.execute("INSERT INTO migrations (name, applied_at) VALUES (?, ?)", (name, time.time()))
        applied.append(name)
    return applied


def default_path() -> Path:
    """Where the store lives unless configured: the XDG data directory."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "codexgate" / "store.sqlite3"


def _connect(path: Path) -> sqlite3.Connection:
    # isolation_level=None: no implicit transactions; the writer says BEGIN/COMMIT itself, and
    # a reader never keeps a snapshot open between statements (that would hold back checkpoints).
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def _enable_wal(conn: sqlite3.Connection) -> str:
    """Switch the file to WAL (it stays so); the journal mode then in force.

    Switching takes an exclusive lock without waiting on `busy_timeout`: two processes
    creating the store at the same moment see "database is locked". Retry for as long as
    busy_timeout would have waited (this runs in a thread, never on the event loop)."""
    deadline = time.monotonic() + _BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            mode: str = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            return mode.lower()
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


class _Write:
    """One pending write: what to run on the writer's connection, and whom to tell."""

    __slots__ = ("fn", "future", "loop")

    def __init__(self, fn: Callable[[sqlite3.Connection], Any], loop: asyncio.AbstractEventLoop) -> None:
        self.fn = fn
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()


def _resolve(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():  # the caller gave up; the write is done all the same
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class SqliteStore:
    name = "sqlite"

    def __init__(self, path: Path, retention: Retention) -> None:
        self.path = Path(path)
        self.retention = retention
        self._writes: queue.SimpleQueue[_Write | None] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._readers: ThreadPoolExecutor | None = None
        self._reader_conns: queue.SimpleQueue[sqlite3.Connection] = queue.SimpleQueue()
        self._all_reader_conns: list[sqlite3.Connection] = []
        self._secret: bytes | None = None
        self.commits = 0  # transactions the writer committed (for tests and benchmarks)

    # -- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        try:
            writer_conn = await asyncio.to_thread(self._open_writer)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the SQLite store at {self.path}: {exc}") from exc
        self._writer = threading.Thread(
            target=self._write_loop, args=(writer_conn,), name=f"codexgate-sqlite-writer:{self.path.name}"
        )
        self._writer.daemon = True
        self._writer.start()
        self._readers = ThreadPoolExecutor(_READERS, thread_name_prefix="codexgate-sqlite-reader")
        self._secret = await self._write(self._ensure_secret)

    def _open_writer(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = _connect(self.path)
        try:
            mode = _enable_wal(conn)
            if mode != "wal":
                raise StoreError(f"the SQLite store at {self.path} cannot use WAL (journal_mode={mode})")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.executescript(f"BEGIN IMMEDIATE; {_SCHEMA}; COMMIT;")
        except BaseException:
            conn.close()
            raise
        return conn

    async def close(self) -> None:
        if self._writer is not None:
            self._writes.put(None)
            await asyncio.to_thread(self._writer.join)
            self._writer = None
        if self._readers is not None:
            await asyncio.to_thread(self._readers.shutdown)  # lets reads in flight finish
            self._readers = None
        for conn in self._all_reader_conns:
            conn.close()
        self._all_reader_conns.clear()
        self._reader_conns = queue.SimpleQueue()

    # -- the writer --------------------------------------------------------------------------

    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._writer is None:
            raise StoreError(f"the SQLite store at {self.path} is not open")
        write = _Write(fn, asyncio.get_running_loop())
        self._writes.put(write)
        result: T = await write.future
        return result

    def _write_loop(self, conn: sqlite3.Connection) -> None:
        try:
            stop = False
            while not stop:
                batch: list[_Write] = []
                first = self._writes.get()
                if first is None:
                    break
                batch.append(first)
                while True:  # everything that queued up while the last commit ran
                    try:
                        more = self._writes.get_nowait()
                    except queue.Empty:
                        break
                    if more is None:
                        stop = True
                        break
                    batch.append(more)
                self._commit(conn, batch)
        finally:
            conn.close()

    def _commit(self, conn: sqlite3.Connection, batch: list[_Write]) -> None:
        """Run `batch` in one transaction, each write in a savepoint so one that fails is
        undone alone and the others still commit; then tell every waiter."""
        outcomes: list[tuple[Any, BaseException | None]] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            for write in batch:
                conn.execute("SAVEPOINT one")
                try:
                    outcomes.append((write.fn(conn), None))
                except Exception as exc:
                    conn.execute("ROLLBACK TO one")
                    if isinstance(exc, sqlite3.Error):
                        exc = StoreError(f"cannot write to the SQLite store at {self.path}: {exc}")
                    outcomes.append((None, exc))
                conn.execute("RELEASE one")
            conn.execute("COMMIT")
            self.commits += 1
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            error = StoreError(f"cannot write to the SQLite store at {self.path}: {exc}")
            outcomes = [(None, error)] * len(batch)
        for write, (result, error_) in zip(batch, outcomes, strict=True):
            try:
                write.loop.call_soon_threadsafe(_resolve, write.future, result, error_)
            except RuntimeError:  # that caller's event loop is closed: nobody is waiting
                pass

    @staticmethod
    def _ensure_secret(conn: sqlite3.Connection) -> bytes:
        # Inside the writer's transaction: a second process creating the store at the same
        # moment waits on the lock, then finds this row and keeps it.
        conn.execute(
            "INSERT OR IGNORE INTO meta (key, value) VALUES ('secret', ?)", (secrets.token_bytes(32),)
        )
        value: bytes = conn.execute("SELECT value FROM meta WHERE key = 'secret'").fetchone()[0]
        return value

    # -- readers -----------------------------------------------------------------------------

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._readers is None:
            raise StoreError(f"the SQLite store at {self.path} is not open")
        return await asyncio.get_running_loop().run_in_executor(self._readers, self._with_reader, fn)

    def _with_reader(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        try:
            conn = self._reader_conns.get_nowait()
        except queue.Empty:
            conn = _connect(self.path)
            conn.execute("PRAGMA query_only = ON")
            self._all_reader_conns.append(conn)
        try:
            return fn(conn)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read the SQLite store at {self.path}: {exc}") from exc
        finally:
            self._reader_conns.put(conn)

    # -- the protocol ------------------------------------------------------------------------

    async def put(self, record: StoredResponse) -> None:
        body = encode_body(record)
        record.size = len(body)
        ids = record.item_ids()

        def put(conn: sqlite3.Connection) -> None:
            conn.execute(
                f"INSERT INTO responses ({RECORD_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (owner, id) DO UPDATE SET created_at = excluded.created_at,"
                " previous_response_id = excluded.previous_response_id, size = excluded.size,"
                " body = excluded.body",
                (record.id, record.owner, record.created_at, record.previous_response_id, len(body), body),
            )
            # A replaced record's items go; its new ones come.
            conn.execute("DELETE FROM items WHERE owner = ? AND response_id = ?", (record.owner, record.id))
            conn.executemany(
                "INSERT INTO items (owner, item_id, response_id) VALUES (?, ?, ?)",
                [(record.owner, item_id, record.id) for item_id in ids],
            )

        await self._write(put)

    async def get(self, response_id: str, owner: str) -> StoredResponse | None:
        oldest = self.retention.oldest_kept()

        def get(conn: sqlite3.Connection) -> StoredResponse | None:
            row = conn.execute(
                f"SELECT {RECORD_COLUMNS} FROM responses WHERE owner = ? AND id = ? AND created_at >= ?",
                (owner, response_id, oldest),
            ).fetchone()
            return None if row is None else record_of_row(row)

        return await self._read(get)

    async def chain(self, response_id: str, owner: str) -> list[StoredResponse]:
        oldest = self.retention.oldest_kept()
        params = {"owner": owner, "id": response_id, "oldest": oldest, "limit": MAX_CHAIN}

        def chain(conn: sqlite3.Connection) -> list[StoredResponse]:
            return [record_of_row(row) for row in conn.execute(_CHAIN, params)]

        return await self._read(chain)

    async def items(self, item_ids: list[str], owner: str) -> dict[str, Item]:
        if not item_ids:
            return {}
        oldest = self.retention.oldest_kept()
        wanted = list(dict.fromkeys(item_ids))

        def items(conn: sqlite3.Connection) -> dict[str, Item]:
            records: list[StoredResponse] = []
            # SQLite limits the parameters of one statement: look the ids up in slices.
            for start in range(0, len(wanted), 500):
                part = wanted[start : start + 500]
                rows = conn.execute(
                    f"SELECT {RECORD_COLUMNS} FROM responses WHERE rid IN ("
                    "  SELECT r.rid FROM items AS i"
                    "  JOIN responses AS r ON r.owner = i.owner AND r.id = i.response_id"
                    f"  WHERE i.owner = ? AND i.item_id IN ({','.join('?' * len(part))})"
                    "  AND r.created_at >= ?"
                    ") ORDER BY created_at DESC, rid DESC",
                    (owner, *part, oldest),
                ).fetchall()
                records += [record_of_row(row) for row in rows]
            return pick_items(records, wanted)

        return await self._read(items)

    async def delete(self, response_id: str, owner: str) -> bool:
        def delete(conn: sqlite3.Connection) -> bool:
            cursor = conn.execute("DELETE FROM responses WHERE owner = ? AND id = ?", (owner, response_id))
            return cursor.rowcount > 0

        return await self._write(delete)

    async def prune(self) -> int:
        oldest = self.retention.oldest_kept()
        max_bytes = self.retention.max_bytes

        def prune(conn: sqlite3.Connection) -> int:
            removed = conn.execute("DELETE FROM responses WHERE created_at < ?", (oldest,)).rowcount
            if max_bytes is not None:
                removed += conn.execute(
                    f"DELETE FROM responses WHERE rid IN ({_OVER_BUDGET})", (max_bytes,)
                ).rowcount
            return removed

        return await self._write(prune)

    async def stats(self) -> StoreStats:
        def stats(conn: sqlite3.Connection) -> StoreStats:
            count, total = conn.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM responses").fetchone()
            return StoreStats(responses=count, bytes=total, extra={"path": str(self.path)})

        return await self._read(stats)

    async def secret(self) -> bytes:
        if self._secret is None:
            raise StoreError(f"the SQLite store at {self.path} is not open")
        return self._secret
