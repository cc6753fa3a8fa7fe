"""The embedded store: SQLite in WAL mode through aiosqlite, with group commit.

How a write works. A caller encodes its row on the event loop (:meth:`MessageLogs.plan`, so a
:class:`SerializationError` or :class:`RowTooLarge` is raised before anything is queued), then puts
one operation on the write queue and awaits its own future. One drain task takes everything queued
and runs it on the writer connection's thread in ONE hop: ``BEGIN IMMEDIATE``, the operations, one
``COMMIT``. If an operation fails, the batch is re-run with a ``SAVEPOINT`` per operation, so the
failure rolls back only itself and its caller gets its own exception. While that hop runs, new operations queue up and share the next commit.

One hop per transaction: aiosqlite has no public "run this function on the connection thread", but
its ``Connection._execute(fn)`` does exactly that (it is how every aiosqlite method is built, and has
been since its first release), so :func:`_hop` calls it. We build the ``aiosqlite.Connection`` with
our own connector, so we hold the ``sqlite3.Connection`` the thread uses. Reads use a second
connection (WAL readers never block the writer) and are one hop per method too, each in one read
transaction. The re-entry walk of :mod:`stores._reentry` runs inside that hop: its row callbacks
never suspend, so the coroutine is driven to completion synchronously (:func:`_run_sync`).

The ownership lock is a Linux open-file-description lock on one byte per run of ``<path>.locks``.
``open`` and a non-blocking ``fcntl`` on a local file take microseconds, so they run on the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import functools
import hashlib
import itertools
import os
import sqlite3
import struct
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Self, TypeVar

import aiosqlite
import anyio

from ._codec import (
    DEFAULT_MAX_ROW_BYTES,
    LogAppend,
    MessageLogs,
    StoredRow,
    conversation_of,
    decode_row,
    encode_cache_value,
    encode_pending,
    rechunk,
    replay_log,
    split_chunk,
)
from ._errors import (
    AlreadyResumed,
    IncompatibleSchema,
    RunExists,
    RunNotFound,
    StoreUnavailable,
    TetherError,
    WriteConflict,
)
from ._flight import single_claim
from ._json import decode
from ._model import COMPLETED, RUN_END, Cached, Checkpoint, PendingInterrupt, ReEntry, utcnow
from ._reentry import resolve_forkable, resolve_reentry

__all__ = ["SQLiteStore"]

T = TypeVar("T")

SCHEMA_VERSION: Final = 3
#: Versioned migrations: SQL statements or a function run in the migration transaction. Never edit
#: a shipped entry; add a new one.
_MIGRATIONS: Final[dict[int, tuple[str, ...] | Callable[[sqlite3.Connection], None]]] = {
    1: (
        """CREATE TABLE IF NOT EXISTS checkpoints (
            id INTEGER PRIMARY KEY,
            checkpoint_id TEXT NOT NULL UNIQUE,
            execution_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            runner TEXT NOT NULL,
            node_id TEXT NOT NULL,
            step_index INTEGER NOT NULL,
            step_type TEXT NOT NULL,
            status TEXT NOT NULL,
            state_snapshot BLOB NOT NULL,
            log_id TEXT,
            message_count INTEGER NOT NULL DEFAULT 0,
            node_input BLOB NOT NULL,
            node_output BLOB NOT NULL,
            interrupt_reason TEXT,
            interrupt_context BLOB NOT NULL,
            agent_path TEXT,
            parent_checkpoint_id TEXT,
            created_at TEXT NOT NULL,
            synced INTEGER NOT NULL DEFAULT 0,
            sync_error TEXT,
            UNIQUE (execution_id, seq)
        )""",
        "CREATE INDEX IF NOT EXISTS checkpoints_unsynced ON checkpoints (id) WHERE synced = 0",
        """CREATE TABLE IF NOT EXISTS messages (
            execution_id TEXT NOT NULL,
            log_id TEXT NOT NULL,
            idx INTEGER NOT NULL,
            body BLOB NOT NULL,
            PRIMARY KEY (execution_id, log_id, idx)
        )""",
        """CREATE TABLE IF NOT EXISTS pending_interrupts (
            execution_id TEXT PRIMARY KEY,
            reason TEXT NOT NULL,
            context BLOB NOT NULL,
            node_id TEXT NOT NULL,
            agent_path TEXT,
            created_at TEXT NOT NULL
        )""",
        """CREATE TABLE IF NOT EXISTS idempotency_cache (
            execution_id TEXT NOT NULL,
            key TEXT NOT NULL,
            value BLOB NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (execution_id, key)
        )""",
    ),
    2: lambda conn: _chunks_onto_rows(conn),
    # The outbox becomes a low-water mark instead of a partial index: an append then writes one
    # B-tree fewer, and a store that never replicates pays nothing for its outbox.
    3: (
        "CREATE TABLE outbox (low INTEGER NOT NULL)",
        "INSERT INTO outbox (low) SELECT coalesce((SELECT min(id) FROM checkpoints WHERE synced = 0), "
        "(SELECT coalesce(max(id), 0) + 1 FROM checkpoints))",
        "DROP INDEX IF EXISTS checkpoints_unsynced",
    ),
}

_ROW_COLUMNS: Final = (
    "checkpoint_id, execution_id, seq, runner, node_id, step_index, step_type, status, state_snapshot, "
    "log_id, message_count, node_input, node_output, interrupt_reason, interrupt_context, agent_path, "
    "parent_checkpoint_id, created_at"
)
_INSERT_ROW: Final = (
    f"INSERT INTO checkpoints ({_ROW_COLUMNS}, new_messages, synced) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
# How many messages a log holds: the count of its newest row that added some.
_LOG_LENGTH: Final = (
    "SELECT message_count FROM checkpoints WHERE execution_id = ? AND log_id = ? "
    "AND new_messages IS NOT NULL ORDER BY seq DESC LIMIT 1"
)
_LOG_CHUNKS: Final = (
    "SELECT message_count, new_messages FROM checkpoints WHERE execution_id = ? AND log_id = ? "
    "AND new_messages IS NOT NULL ORDER BY seq"
)
_PENDING_COLUMNS: Final = "execution_id, reason, context, node_id, agent_path, created_at"
_SYNCHRONOUS: Final = frozenset({"OFF", "NORMAL", "FULL", "EXTRA"})
_MAX_BATCH: Final = 512
_CLOSE_TIMEOUT: Final = 10.0
_F_OFD_SETLK: Final[int] = getattr(fcntl, "F_OFD_SETLK", 37)
_FLOCK: Final = "hhqqi4x"  # struct flock on 64-bit Linux: type, whence, start, len, pid (+ padding)

# Ownership locks held in this process, by (lock file, execution_id): a second holder is refused
# even when it uses another SQLiteStore instance on the same file.
_held: set[tuple[str, str]] = set()
_held_guard = threading.Lock()

# One mutex per database file for the write transactions of every SQLiteStore of this process on it.
# Writers of one process then queue on a lock that wakes the next one the moment a COMMIT is done,
# instead of meeting in SQLite's busy handler, which sleeps 1, 2, 5, 10... ms between retries (with 8
# racing claimers that sleep cost more than the commits). Other processes still meet in the handler.
_file_locks: dict[str, threading.Lock] = {}


def _file_lock(path: str) -> threading.Lock:
    key = os.path.realpath(path)
    with _held_guard:
        lock = _file_locks.get(key)
        if lock is None:
            lock = _file_locks[key] = threading.Lock()
        return lock


class _LogGap(Exception):
    """The message log in the database is not what the plan assumed; the caller re-plans."""


def _ts(value: datetime) -> str:
    """A fixed-width, sortable UTC timestamp (naive datetimes are taken as UTC)."""
    if value.tzinfo is not UTC:  # the common case (utcnow()) needs no conversion
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        value = value.astimezone(UTC)
    return value.isoformat(timespec="microseconds")


def _dt(value: str) -> datetime:
    return datetime.fromisoformat(value).astimezone(UTC)


def _create_private(path: str) -> None:
    """Create a missing database file with mode 0600 (SQLite gives its -wal and -shm the same mode).

    Only a file that does not exist yet is opened here: closing any descriptor of a database file
    drops every POSIX lock this process holds on it, including those of SQLite connections that
    another store instance has open on it, and another process could then checkpoint and delete
    the WAL under them (seen as "database disk image is malformed").
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return
    os.close(fd)


def _is_busy(exc: sqlite3.Error) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in str(exc) or "busy" in str(exc))


def _retry_busy(fn: Callable[[], T], deadline: float) -> T:
    """Run ``fn``, retrying SQLITE_BUSY with bounded backoff until ``deadline`` (monotonic)."""
    delay = 0.001
    while True:
        try:
            return fn()
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


def _run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Drive a coroutine that never suspends (its awaits are plain functions) to its result."""
    try:
        coro.send(None)
    except StopIteration as stop:
        result: T = stop.value
        return result
    coro.close()
    raise RuntimeError("a store read suspended inside a database thread")


async def _hop(conn: aiosqlite.Connection, fn: Callable[[], T]) -> T:
    """Run ``fn`` on the connection's thread: one thread hop (see the module docstring)."""
    execute: Callable[[Callable[[], T]], Awaitable[T]] = conn._execute
    return await execute(fn)


class _Op:
    __slots__ = ("fn", "future")

    def __init__(self, fn: Callable[[sqlite3.Connection], Any], future: asyncio.Future[Any]) -> None:
        self.fn = fn
        self.future = future


class SQLiteStore:
    """A :class:`~stores.Store` and :class:`~stores.ReplicatedStore` on one SQLite file.

    ``synchronous="FULL"`` (the default) makes every commit durable. ``busy_timeout`` (seconds) is how
    long a write waits for another process's transaction; lock errors never reach callers.
    ``max_row_bytes`` limits a row's new content (:class:`RowTooLarge` above it). Several processes
    may share one file. :attr:`transactions` counts write transactions (group commit shares them).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] = "tether.db",
        *,
        synchronous: str = "FULL",
        busy_timeout: float = 30.0,
        max_row_bytes: int = DEFAULT_MAX_ROW_BYTES,
    ) -> None:
        if synchronous.upper() not in _SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {sorted(_SYNCHRONOUS)}, not {synchronous!r}")
        self.path = os.fspath(path)
        self.lock_path = self.path + ".locks"
        self._synchronous = synchronous.upper()
        self._busy_timeout = busy_timeout
        self._logs = MessageLogs(max_row_bytes=max_row_bytes)
        self._writer: aiosqlite.Connection | None = None
        self._reader: aiosqlite.Connection | None = None
        self._wconn: sqlite3.Connection | None = None
        self._rconn: sqlite3.Connection | None = None
        self._ready = False
        self._closed = False
        self._setup_lock = asyncio.Lock()
        self._queue: list[_Op] = []
        # Set while batches are being written; resolved when the queue is empty (``close`` waits).
        self._drain: asyncio.Future[None] | None = None
        self._locks: dict[int, str] = {}  # the byte of the lock file -> the run holding it
        self._lock_fd: int | None = None
        self._lock_key = os.path.realpath(self.lock_path)
        self._write_lock = _file_lock(self.path)
        self._db_key = os.path.realpath(self.path)
        self.transactions = 0

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    # ------------------------------------------------------------------ lifecycle

    async def setup(self) -> None:
        """Open both connections and migrate the schema (idempotent, safe across processes)."""
        if self._ready:
            return
        async with self._setup_lock:
            if self._ready:
                return
            if self._closed:
                raise StoreUnavailable(f"the SQLite store at {self.path!r} is closed")
            try:
                self._writer = await self._open(writer=True)
                await _hop(self._writer, self._migrate)
                self._reader = await self._open(writer=False)
            except BaseException:
                await self._close_connections()
                raise
            self._ready = True

    async def __aenter__(self) -> Self:
        await self.setup()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Finish queued writes, stop the threads and release every ownership lock (idempotent)."""
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT):
            if self._drain is not None:
                await asyncio.wait({self._drain})
            await self._close_connections()
        self._release_all()
        self._ready = False

    async def _close_connections(self) -> None:
        for conn in (self._writer, self._reader):
            if conn is not None:
                with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT):
                    await conn.close()
        self._writer = self._reader = None
        self._wconn = self._rconn = None

    async def _open(self, *, writer: bool) -> aiosqlite.Connection:
        # Connect in a worker thread first, so a failure never leaves an aiosqlite thread behind.
        raw = await anyio.to_thread.run_sync(functools.partial(self._connect, writer=writer))
        conn = aiosqlite.Connection(lambda: raw, iter_chunk_size=64)
        # A daemon worker: a store the application forgot to close must not keep the interpreter
        # alive at exit. Nothing is lost: a write's caller is answered only after its COMMIT.
        conn._thread.daemon = True
        await conn
        if writer:
            self._wconn = raw
        else:
            self._rconn = raw
        return conn

    def _connect(self, *, writer: bool) -> sqlite3.Connection:
        """Open a connection with the store's settings (runs on the connection's thread)."""
        path = self.path
        try:
            if writer:
                _create_private(path)
            conn = sqlite3.connect(
                path, timeout=self._busy_timeout, isolation_level=None, check_same_thread=False
            )
        except OSError as exc:
            raise StoreUnavailable(f"cannot open the SQLite database {path!r}: {exc}") from exc
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"cannot open the SQLite database {path!r}: {exc}") from exc
        try:
            deadline = time.monotonic() + self._busy_timeout
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000)}")
            if writer:
                mode = _retry_busy(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone(), deadline)
                if mode is None or str(mode[0]).lower() != "wal":
                    raise StoreUnavailable(f"cannot switch {path!r} to WAL mode (got {mode!r})")
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
            if not writer:
                conn.execute("PRAGMA query_only = 1")
        except sqlite3.DatabaseError as exc:
            conn.close()
            if exc.sqlite_errorcode == sqlite3.SQLITE_NOTADB:  # SQLite read the header, wrote nothing
                raise StoreUnavailable(f"{path!r} is not a SQLite database") from exc
            raise StoreUnavailable(f"cannot use the SQLite database {path!r}: {exc}") from exc
        except BaseException:
            conn.close()
            raise
        return conn

    def _migrate(self) -> None:
        """Apply missing migrations under ``BEGIN IMMEDIATE``, re-reading the version inside."""
        conn = self._w()
        try:
            if conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION:
                return
            self._begin(conn)
            try:
                version = int(conn.execute("PRAGMA user_version").fetchone()[0])
                if version > SCHEMA_VERSION:
                    raise IncompatibleSchema(
                        f"{self.path!r} was written by tether schema version {version}; this tether "
                        f"understands up to version {SCHEMA_VERSION}: upgrade tether"
                    )
                for target in sorted(v for v in _MIGRATIONS if v > version):
                    migration = _MIGRATIONS[target]
                    if callable(migration):
                        migration(conn)
                        continue
                    for statement in migration:
                        conn.execute(statement)
                if version < SCHEMA_VERSION:
                    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                self._commit(conn)
            except BaseException:
                conn.rollback()
                raise
        except sqlite3.DatabaseError as exc:
            raise StoreUnavailable(f"cannot use the SQLite database {self.path!r}: {exc}") from exc

    def _w(self) -> sqlite3.Connection:
        if self._wconn is None:
            raise StoreUnavailable(f"the SQLite store at {self.path!r} is closed")
        return self._wconn

    def _begin(self, conn: sqlite3.Connection) -> None:
        deadline = time.monotonic() + self._busy_timeout * 2
        try:
            _retry_busy(lambda: conn.execute("BEGIN IMMEDIATE"), deadline)
        except sqlite3.OperationalError as exc:
            raise StoreUnavailable(f"{self.path!r} stayed locked by another writer: {exc}") from exc

    def _commit(self, conn: sqlite3.Connection) -> None:
        deadline = time.monotonic() + self._busy_timeout * 2
        _retry_busy(lambda: conn.execute("COMMIT"), deadline)

    async def _ensure(self) -> None:
        if not self._ready:
            await self.setup()

    # ------------------------------------------------------------------ the writer (group commit)

    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Queue ``fn`` for the next write transaction and wait for its own outcome.

        The drain is a chain of callbacks, not a task: the first writer schedules ``_next_batch``
        for the next loop iteration (writers ready in this one share the commit), which hands the
        queued batch to the writer thread; the thread answers each caller's future itself through
        ``call_soon_threadsafe`` and chains the next batch. No task, no intermediate future, one
        wake-up per caller; nothing in the chain can be cancelled.
        """
        await self._ensure()
        if self._closed:
            raise StoreUnavailable(f"the SQLite store at {self.path!r} is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.append(_Op(fn, future))
        if self._drain is None:
            self._drain = loop.create_future()
            loop.call_soon(self._next_batch, loop)
        return await future

    def _next_batch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Send the next queued batch to the writer thread, or end the drain (on the loop)."""
        if not self._queue:
            drain, self._drain = self._drain, None
            if drain is not None and not drain.done():
                drain.set_result(None)
            return
        batch, self._queue = self._queue[:_MAX_BATCH], self._queue[_MAX_BATCH:]
        writer = self._writer
        if writer is None or not writer._running:
            closed = StoreUnavailable(f"the SQLite store at {self.path!r} is closed")
            self._batch_done(loop, batch, None, closed)
            return
        writer._tx.put_nowait((None, functools.partial(self._write_batch, loop, batch)))

    def _write_batch(self, loop: asyncio.AbstractEventLoop, batch: list[_Op]) -> None:
        """Commit ``batch`` (on the writer thread), then answer its callers on the loop."""
        outcomes: list[tuple[bool, Any]] | None = None
        error: Exception | None = None
        try:
            outcomes = self._run_batch([op.fn for op in batch])
        except BaseException as exc:  # the callers get it; this thread must go on serving
            error = exc if isinstance(exc, Exception) else StoreUnavailable(str(exc))
        loop.call_soon_threadsafe(self._batch_done, loop, batch, outcomes, error)

    def _batch_done(
        self,
        loop: asyncio.AbstractEventLoop,
        batch: list[_Op],
        outcomes: list[tuple[bool, Any]] | None,
        error: Exception | None,
    ) -> None:
        """Answer each caller of ``batch`` with its own outcome, then go on (on the loop)."""
        for i, op in enumerate(batch):
            if op.future.done():  # its caller was cancelled; the write stands or fell all the same
                continue
            if outcomes is None:
                op.future.set_exception(error if error is not None else StoreUnavailable("write failed"))
                continue
            ok, value = outcomes[i]
            if ok:
                op.future.set_result(value)
            else:
                op.future.set_exception(value)
        self._next_batch(loop)

    def _run_batch(self, fns: list[Callable[[sqlite3.Connection], Any]]) -> list[tuple[bool, Any]]:
        """Run the batch under the file's in-process write mutex (see ``_file_locks``)."""
        with self._write_lock:
            return self._run_batch_locked(fns)

    def _run_batch_locked(self, fns: list[Callable[[sqlite3.Connection], Any]]) -> list[tuple[bool, Any]]:
        """One write transaction for the whole batch, one commit (runs on the writer thread).

        Optimistic first: the operations run back to back. If one fails, the transaction is rolled
        back and the batch re-run with a ``SAVEPOINT`` per operation, so the failure undoes only
        itself (conflicts are rare; the common path saves two statements per operation).
        """
        conn = self._w()
        self._begin(conn)
        try:
            try:
                outcomes: list[tuple[bool, Any]] = [(True, fn(conn)) for fn in fns]
            except Exception as exc:
                conn.rollback()
                if len(fns) == 1:
                    return [(False, exc)]
                self._begin(conn)
                outcomes = [self._isolated(conn, fn) for fn in fns]
            self._commit(conn)
        except BaseException:
            if conn.in_transaction:
                conn.rollback()
            raise
        self.transactions += 1
        return outcomes

    @staticmethod
    def _isolated(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], Any]) -> tuple[bool, Any]:
        """Run one operation under a savepoint: its failure rolls back only itself."""
        conn.execute("SAVEPOINT op")
        try:
            value = fn(conn)
        except Exception as exc:
            conn.execute("ROLLBACK TO op")
            conn.execute("RELEASE op")
            return False, exc
        conn.execute("RELEASE op")
        return True, value

    # ------------------------------------------------------------------ reads (one hop each)

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` in one read transaction on the reader thread."""
        await self._ensure()
        reader, conn = self._reader, self._rconn
        if reader is None or conn is None:
            raise StoreUnavailable(f"the SQLite store at {self.path!r} is closed")

        def run() -> T:
            deadline = time.monotonic() + self._busy_timeout * 2
            _retry_busy(lambda: conn.execute("BEGIN"), deadline)
            try:
                return fn(conn)
            finally:
                conn.rollback()

        try:
            return await _hop(reader, run)
        except sqlite3.OperationalError as exc:
            raise StoreUnavailable(f"cannot read {self.path!r}: {exc}") from exc

    # ------------------------------------------------------------------ writes

    async def append(self, row: Checkpoint) -> None:
        """Append ``row`` at its ``seq`` (see :meth:`Store.append`)."""
        await self._planned_write(row, lambda stored, log: lambda c: self._insert(c, stored, log))

    async def append_pause(self, row: Checkpoint, pending: PendingInterrupt) -> None:
        """Append the interrupted row and the pending row in one transaction."""
        context = encode_pending(pending)
        values = (
            pending.execution_id,
            pending.reason,
            context,
            pending.node_id,
            pending.agent_path,
            _ts(pending.created_at),
        )

        def op(stored: StoredRow, log: LogAppend | None) -> Callable[[sqlite3.Connection], None]:
            def run(conn: sqlite3.Connection) -> None:
                self._insert(conn, stored, log)
                try:
                    conn.execute(
                        f"INSERT INTO pending_interrupts ({_PENDING_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
                        values,
                    )
                except sqlite3.IntegrityError as exc:
                    raise WriteConflict(
                        f"run {pending.execution_id!r} already has a pending interrupt"
                    ) from exc

            return run

        await self._planned_write(row, op)

    async def claim(self, row: Checkpoint) -> PendingInterrupt:
        """Claim the run's pause: delete its pending row and append ``row``, in one transaction.

        A claim of a run that another claimer of this process (any store on the same file) is
        already claiming waits for that one: if it won, this one lost without touching the database.
        """
        eid = row.execution_id
        return await single_claim(
            ("sqlite", self._db_key, eid), lambda: self._claim(row), lambda: self._no_pause(eid, True)
        )

    async def _claim(self, row: Checkpoint) -> PendingInterrupt:
        eid = row.execution_id

        def probe(conn: sqlite3.Connection) -> tuple[bool, bool]:
            has_pending = conn.execute(
                "SELECT 1 FROM pending_interrupts WHERE execution_id = ?", (eid,)
            ).fetchone()
            has_rows = conn.execute(
                "SELECT 1 FROM checkpoints WHERE execution_id = ? LIMIT 1", (eid,)
            ).fetchone()
            return has_pending is not None, has_rows is not None

        has_pending, has_rows = await self._read(probe)
        if not has_pending:
            raise self._no_pause(eid, has_rows)

        def op(stored: StoredRow, log: LogAppend | None) -> Callable[[sqlite3.Connection], PendingInterrupt]:
            def run(conn: sqlite3.Connection) -> PendingInterrupt:
                found = conn.execute(
                    f"DELETE FROM pending_interrupts WHERE execution_id = ? RETURNING {_PENDING_COLUMNS}",
                    (eid,),
                ).fetchone()
                if found is None:
                    rows = conn.execute("SELECT 1 FROM checkpoints WHERE execution_id = ? LIMIT 1", (eid,))
                    raise self._no_pause(eid, rows.fetchone() is not None)
                self._insert(conn, stored, log)
                return _pending(found)

            return run

        return await self._planned_write(row, op)

    @staticmethod
    def _no_pause(execution_id: str, has_rows: bool) -> Exception:
        if not has_rows:
            return RunNotFound(f"run {execution_id!r} has no checkpoints")
        return AlreadyResumed(
            f"run {execution_id!r} has no pending interrupt to claim: another resumer claimed it, "
            "or the run is not paused"
        )

    async def _planned_write(
        self,
        row: Checkpoint,
        make: Callable[[StoredRow, LogAppend | None], Callable[[sqlite3.Connection], T]],
    ) -> T:
        """Plan ``row`` on the loop, then write it; re-plan if the message log moved under us."""
        await self._ensure()
        eid = row.execution_id
        for _ in range(3):
            await self._know(row)
            stored, log = self._logs.plan(row)
            try:
                return await self._write(make(stored, log))
            except _LogGap:
                self._logs.forget(eid)
            except BaseException:
                self._logs.forget(eid)
                raise
        raise WriteConflict(f"the message log of run {eid!r} kept changing while writing {row.node_id!r}")

    async def _know(self, row: Checkpoint) -> None:
        """Load the row's conversation log into memory if a continuing run's log is not known."""
        messages = row.state_snapshot.get("messages") if isinstance(row.state_snapshot, dict) else None
        if row.seq == 0 or not isinstance(messages, list | tuple):
            return
        eid, conversation = row.execution_id, conversation_of(row.agent_path)
        if self._logs.known(eid, conversation):
            return

        def load(conn: sqlite3.Connection) -> tuple[str, list[Any]] | None:
            cursor = conn.execute(
                "SELECT log_id, agent_path FROM checkpoints WHERE execution_id = ? AND log_id IS NOT NULL "
                "ORDER BY seq DESC",
                (eid,),
            )
            for log_id, agent_path in cursor.fetchall():
                if conversation_of(agent_path) == conversation:
                    return log_id, _load_log(conn, eid, log_id)
            return None

        found = await self._read(load)
        if found is not None and not self._logs.known(eid, conversation):
            self._logs.remember(eid, conversation, found[0], found[1])

    def _insert(
        self, conn: sqlite3.Connection, stored: StoredRow, log: LogAppend | None, synced: int = 0
    ) -> None:
        """Insert a planned row with the messages it adds (inside the caller's transaction)."""
        eid = stored.execution_id
        if (
            stored.seq == 0
            and conn.execute("SELECT 1 FROM checkpoints WHERE execution_id = ? LIMIT 1", (eid,)).fetchone()
        ):
            raise RunExists(f"run {eid!r} already has checkpoints")
        need = log.start if log is not None else stored.message_count
        if stored.log_id is not None and need:
            last = conn.execute(_LOG_LENGTH, (eid, stored.log_id)).fetchone()
            have = 0 if last is None else last[0]
            if (log is not None and have != need) or have < need:
                raise _LogGap
        chunk = log.chunk if log is not None else None
        try:
            conn.execute(_INSERT_ROW, (*stored[:-1], _ts(stored.created_at), chunk, synced))
        except sqlite3.IntegrityError as exc:
            what = "checkpoint_id" if "checkpoint_id" in str(exc) else "seq"
            value = stored.checkpoint_id if what == "checkpoint_id" else stored.seq
            raise WriteConflict(
                f"{what} {value!r} is already taken (run {eid!r}, node {stored.node_id!r}): a stale writer lost"
            ) from exc
        if stored.step_type == RUN_END:
            conn.execute("DELETE FROM pending_interrupts WHERE execution_id = ?", (eid,))

    async def delete_run(self, execution_id: str) -> int:
        """Delete the run's rows, pending row and cache in one transaction."""

        def run(conn: sqlite3.Connection) -> int:
            deleted = conn.execute("DELETE FROM checkpoints WHERE execution_id = ?", (execution_id,)).rowcount
            _lower_outbox_mark(conn)
            for table in ("pending_interrupts", "idempotency_cache"):
                conn.execute(f"DELETE FROM {table} WHERE execution_id = ?", (execution_id,))
            return int(deleted)

        try:
            return await self._write(run)
        finally:
            self._logs.forget(execution_id)

    async def prune(self, older_than: timedelta) -> int:
        """Delete what rule 10 of the design allows, older than ``older_than``; returns rows deleted."""
        cutoff = _ts(utcnow() - older_than)
        deleted, touched = await self._write(lambda conn: _prune(conn, cutoff))
        for eid in touched:
            self._logs.forget(eid)
        return deleted

    async def cache_get(self, execution_id: str, key: str) -> Cached | None:
        """The cache entry for ``(execution_id, key)``, if any."""

        def run(conn: sqlite3.Connection) -> Cached | None:
            found = conn.execute(
                "SELECT value FROM idempotency_cache WHERE execution_id = ? AND key = ?", (execution_id, key)
            ).fetchone()
            return None if found is None else Cached(decode(found[0]))

        return await self._read(run)

    async def cache_put(self, execution_id: str, key: str, value: Any) -> Any:
        """Insert the entry if absent; return the stored value (the first writer's)."""
        body = encode_cache_value(execution_id, key, value)
        now = _ts(utcnow())

        def run(conn: sqlite3.Connection) -> Any:
            conn.execute(
                "INSERT INTO idempotency_cache (execution_id, key, value, created_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (execution_id, key) DO NOTHING",
                (execution_id, key, body, now),
            )
            stored = conn.execute(
                "SELECT value FROM idempotency_cache WHERE execution_id = ? AND key = ?", (execution_id, key)
            ).fetchone()
            return decode(stored[0])

        return await self._write(run)

    # ------------------------------------------------------------------ row reads

    async def latest(self, execution_id: str) -> Checkpoint | None:
        """The newest row of the run, or ``None``."""

        def run(conn: sqlite3.Connection) -> tuple[Checkpoint | None, _Ctx]:
            ctx = _Ctx()
            return _row_where(conn, ctx, "execution_id = ? ORDER BY seq DESC LIMIT 1", (execution_id,)), ctx

        row, ctx = await self._read(run)
        self._seed(execution_id, (row,), ctx)
        return row

    async def reentry(self, execution_id: str) -> ReEntry:
        """Where a resume re-enters the run (see :meth:`Store.reentry`)."""

        def run(conn: sqlite3.Connection) -> tuple[ReEntry, _Ctx]:
            ctx = _Ctx()
            newest, row_at, row_before = _walkers(conn, ctx, execution_id)
            return _run_sync(resolve_reentry(execution_id, newest, row_at, row_before)), ctx

        found, ctx = await self._read(run)
        self._seed(execution_id, (found.step, found.newest), ctx)
        return found

    async def forkable(self, execution_id: str, checkpoint_id: str | None = None) -> Checkpoint:
        """The row a fork starts from (see :meth:`Store.forkable`)."""

        def run(conn: sqlite3.Connection) -> Checkpoint:
            ctx = _Ctx()
            newest, row_at, row_before = _walkers(conn, ctx, execution_id)
            named = None
            if checkpoint_id is not None:
                named = _row_where(
                    conn, ctx, "execution_id = ? AND checkpoint_id = ?", (execution_id, checkpoint_id)
                )
            return _run_sync(resolve_forkable(execution_id, newest, named, checkpoint_id, row_at, row_before))

        return await self._read(run)

    async def get(self, execution_id: str, checkpoint_id: str) -> Checkpoint | None:
        """One row by id (both keys must match)."""
        return await self._read(
            lambda conn: _row_where(
                conn, _Ctx(), "execution_id = ? AND checkpoint_id = ?", (execution_id, checkpoint_id)
            )
        )

    async def history(self, execution_id: str) -> list[Checkpoint]:
        """Every row of the run in ``seq`` order."""
        return await self._read(
            lambda conn: _rows_where(conn, _Ctx(), "execution_id = ? ORDER BY seq", (execution_id,))
        )

    async def pending(self, execution_id: str | None = None) -> list[PendingInterrupt]:
        """Pending interrupts, newest first; all runs, or one."""

        def run(conn: sqlite3.Connection) -> list[PendingInterrupt]:
            where, args = (
                ("WHERE execution_id = ?", (execution_id,)) if execution_id is not None else ("", ())
            )
            cursor = conn.execute(
                f"SELECT {_PENDING_COLUMNS} FROM pending_interrupts {where} ORDER BY created_at DESC, rowid DESC",
                args,
            )
            return [_pending(found) for found in cursor]

        return await self._read(run)

    def _seed(self, execution_id: str, rows: Iterable[Checkpoint | None], ctx: _Ctx) -> None:
        """Remember the full logs of the rows just read, so a resumed run does not copy them again."""
        for row in rows:
            log_id = None if row is None else ctx.row_logs.get(row.checkpoint_id)
            if row is None or log_id is None:
                continue
            messages = ctx.logs.get(log_id)
            if messages is not None:
                self._logs.remember(execution_id, conversation_of(row.agent_path), log_id, list(messages))

    # ------------------------------------------------------------------ the outbox

    async def fetch_unsynced(self, limit: int) -> list[Checkpoint]:
        """Rows not yet shipped, oldest write first."""
        return await self._read(
            lambda conn: _rows_where(
                conn, _Ctx(), "id >= (SELECT low FROM outbox) AND synced = 0 ORDER BY id LIMIT ?", (limit,)
            )
        )

    async def mark_synced(self, checkpoint_ids: Sequence[str]) -> None:
        """Mark rows shipped (idempotent; an empty request is a no-op)."""
        if not checkpoint_ids:
            return
        ids = [(cid,) for cid in checkpoint_ids]
        await self._mark_sent("UPDATE checkpoints SET synced = 1 WHERE checkpoint_id = ?", ids)

    async def mark_quarantined(self, reasons: dict[str, str]) -> None:
        """Mark poison rows: never re-sent, the reason kept (idempotent; last reason wins)."""
        if not reasons:
            return
        pairs = [(reason, cid) for cid, reason in reasons.items()]
        await self._mark_sent(
            "UPDATE checkpoints SET synced = 1, sync_error = ? WHERE checkpoint_id = ?", pairs
        )

    async def _mark_sent(self, update: str, params: Sequence[tuple[str, ...]]) -> None:
        """Run ``update`` for each of ``params`` and move the outbox mark past the rows it sent."""

        def run(conn: sqlite3.Connection) -> None:
            conn.executemany(update, params)
            _raise_outbox_mark(conn)

        await self._write(run)

    async def sync_state(self, checkpoint_id: str) -> tuple[bool, str | None] | None:
        """``(synced, sync_error)`` of a row, or ``None``."""

        def run(conn: sqlite3.Connection) -> tuple[bool, str | None] | None:
            found = conn.execute(
                "SELECT synced, sync_error FROM checkpoints WHERE checkpoint_id = ?", (checkpoint_id,)
            ).fetchone()
            return None if found is None else (bool(found[0]), found[1])

        return await self._read(run)

    async def import_rows(self, rows: Sequence[Checkpoint]) -> int:
        """Insert rows restored from the plane as already synced; existing ids are skipped."""
        if not rows:
            return 0
        ids = [row.checkpoint_id for row in rows]

        def existing(conn: sqlite3.Connection) -> set[str]:
            found: set[str] = set()
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                marks = ", ".join("?" * len(chunk))
                cursor = conn.execute(
                    f"SELECT checkpoint_id FROM checkpoints WHERE checkpoint_id IN ({marks})", chunk
                )
                found.update(cid for (cid,) in cursor)
            return found

        skip = await self._read(existing)
        fresh = sorted(
            (row for row in rows if row.checkpoint_id not in skip), key=lambda r: (r.execution_id, r.seq)
        )
        runs = {row.execution_id for row in fresh}
        for eid in runs:
            self._logs.forget(eid)
        try:
            planned = [self._logs.plan(row) for row in fresh]

            def run(conn: sqlite3.Connection) -> int:
                inserted = 0
                for stored, log in planned:
                    if conn.execute(
                        "SELECT 1 FROM checkpoints WHERE checkpoint_id = ?", (stored.checkpoint_id,)
                    ).fetchone():
                        continue
                    self._insert(conn, stored, log, synced=1)
                    inserted += 1
                return inserted

            return await self._write(run)
        finally:
            for eid in runs:
                self._logs.forget(eid)

    # ------------------------------------------------------------------ the ownership lock

    async def try_lock(self, execution_id: str) -> bool:
        """Take the run's ownership lock; ``False`` if anyone else (any process, any holder) holds it.

        The lock is one byte of the lock file, at an offset hashed from the run's id, locked with an
        open-file-description lock on the store's one descriptor of that file: another descriptor
        (another store, another process) is refused, and the lock goes when the descriptor closes
        or the process dies.
        """
        if self._closed:
            raise StoreUnavailable(f"the SQLite store at {self.path!r} is closed")
        key = (self._lock_key, execution_id)
        with _held_guard:
            if key in _held:
                return False
            _held.add(key)
        offset = _lock_offset(execution_id)
        if offset in self._locks:  # another run of this store hashes to the same byte: refused as held
            with _held_guard:
                _held.discard(key)
            return False
        try:
            if self._lock_fd is None:
                self._lock_fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fd = self._lock_fd
        except OSError as exc:
            with _held_guard:
                _held.discard(key)
            raise StoreUnavailable(f"cannot open the lock file {self.lock_path!r}: {exc}") from exc
        try:
            self._lock_byte(fd, fcntl.F_WRLCK, offset)
        except OSError as exc:
            with _held_guard:
                _held.discard(key)
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                return False
            raise StoreUnavailable(f"cannot lock {self.lock_path!r}: {exc}") from exc
        self._locks[offset] = execution_id
        return True

    @staticmethod
    def _lock_byte(fd: int, kind: int, offset: int) -> None:
        """Lock or unlock one byte of the lock file (an open-file-description lock on ``fd``)."""
        fcntl.fcntl(fd, _F_OFD_SETLK, struct.pack(_FLOCK, kind, os.SEEK_SET, offset, 1, 0))

    async def unlock(self, execution_id: str) -> None:
        """Release the run's ownership lock if this store holds it."""
        self._release(execution_id)

    def _release(self, execution_id: str) -> None:
        offset = _lock_offset(execution_id)
        if self._locks.get(offset) != execution_id:
            return
        del self._locks[offset]
        try:
            if self._lock_fd is not None:
                self._lock_byte(self._lock_fd, fcntl.F_UNLCK, offset)
        finally:
            with _held_guard:
                _held.discard((self._lock_key, execution_id))

    def _release_all(self) -> None:
        """Release every lock at once: closing the descriptor drops all of its locks."""
        fd, self._lock_fd = self._lock_fd, None
        try:
            if fd is not None:
                os.close(fd)
        finally:
            with _held_guard:
                for execution_id in self._locks.values():
                    _held.discard((self._lock_key, execution_id))
            self._locks.clear()


def _lock_offset(execution_id: str) -> int:
    """The byte of the lock file that stands for the run (a 62-bit hash of its id)."""
    return int.from_bytes(hashlib.blake2b(execution_id.encode(), digest_size=8).digest(), "big") >> 2


# ---------------------------------------------------------------------- row helpers (database threads)


class _Ctx:
    """What one read hop loaded: full message logs by ``log_id``, each row's log, the seqs visited."""

    __slots__ = ("logs", "row_logs", "visited")

    def __init__(self) -> None:
        self.logs: dict[str, list[Any]] = {}
        self.row_logs: dict[str, str] = {}
        self.visited: set[int] = set()


def _pending(found: Sequence[Any]) -> PendingInterrupt:
    return PendingInterrupt(
        execution_id=found[0],
        reason=found[1],
        context=decode(found[2]),
        node_id=found[3],
        agent_path=found[4],
        created_at=_dt(found[5]),
    )


def _load_log(
    conn: sqlite3.Connection, execution_id: str, log_id: str, split: Callable[[bytes], list[Any]] = decode
) -> list[Any]:
    """A log's messages (decoded, or as JSON bytes with ``split=split_chunk``)."""
    return replay_log(conn.execute(_LOG_CHUNKS, (execution_id, log_id)).fetchall(), split)


def _materialise(conn: sqlite3.Connection, ctx: _Ctx, found: Sequence[Any]) -> Checkpoint:
    stored = StoredRow._make([*found[:17], _dt(found[17])])
    messages: list[Any] | None = None
    if stored.log_id is not None:
        full = ctx.logs.get(stored.log_id)
        if full is None:
            full = ctx.logs[stored.log_id] = _load_log(conn, stored.execution_id, stored.log_id)
        messages = full[: stored.message_count]
        ctx.row_logs[stored.checkpoint_id] = stored.log_id
    ctx.visited.add(stored.seq)
    return decode_row(stored, messages)


def _rows_where(conn: sqlite3.Connection, ctx: _Ctx, where: str, args: Sequence[Any]) -> list[Checkpoint]:
    cursor = conn.execute(f"SELECT {_ROW_COLUMNS} FROM checkpoints WHERE {where}", args)
    return [_materialise(conn, ctx, found) for found in cursor.fetchall()]


def _row_where(conn: sqlite3.Connection, ctx: _Ctx, where: str, args: Sequence[Any]) -> Checkpoint | None:
    rows = _rows_where(conn, ctx, where, args)
    return rows[0] if rows else None


RowAt = Callable[[int], Awaitable[Checkpoint | None]]


def _walkers(
    conn: sqlite3.Connection, ctx: _Ctx, execution_id: str
) -> tuple[Checkpoint | None, RowAt, RowAt]:
    """The newest row and the two (never-suspending) row readers the re-entry walk needs."""

    async def row_at(seq: int) -> Checkpoint | None:
        return _row_where(conn, ctx, "execution_id = ? AND seq = ?", (execution_id, seq))

    async def row_before(seq: int) -> Checkpoint | None:
        return _row_where(
            conn, ctx, "execution_id = ? AND seq < ? ORDER BY seq DESC LIMIT 1", (execution_id, seq)
        )

    newest = _row_where(conn, ctx, "execution_id = ? ORDER BY seq DESC LIMIT 1", (execution_id,))
    return newest, row_at, row_before


def _prune(conn: sqlite3.Connection, cutoff: str) -> tuple[int, set[str]]:
    """Rule 10 of the design, in the caller's write transaction; returns (rows deleted, runs touched)."""
    candidates = {
        eid
        for (eid,) in conn.execute(
            "SELECT DISTINCT execution_id FROM checkpoints WHERE created_at < ? "
            "UNION SELECT DISTINCT execution_id FROM idempotency_cache WHERE created_at < ?",
            (cutoff, cutoff),
        )
    }
    deleted = 0
    touched: set[str] = set()
    for eid in candidates:
        newest = conn.execute(
            "SELECT seq, step_type, status FROM checkpoints WHERE execution_id = ? ORDER BY seq DESC LIMIT 1",
            (eid,),
        ).fetchone()
        if newest is None:
            continue  # a cache of a run without rows has not completed: keep it
        if newest[1] == RUN_END and newest[2] == COMPLETED:
            doomed = conn.execute(
                "SELECT seq FROM checkpoints WHERE execution_id = ? AND created_at < ?", (eid, cutoff)
            ).fetchall()
            conn.execute(
                "DELETE FROM idempotency_cache WHERE execution_id = ? AND created_at < ?", (eid, cutoff)
            )
        else:
            keep = set(_reentry_rows(conn, eid))
            doomed = [
                found
                for found in conn.execute(
                    "SELECT seq FROM checkpoints WHERE execution_id = ? AND created_at < ? AND status = ?",
                    (eid, cutoff, COMPLETED),
                )
                if found[0] not in keep
            ]
        if doomed:
            deleted += _delete_rows(conn, eid, [seq for (seq,) in doomed])
            touched.add(eid)
    if deleted:
        _lower_outbox_mark(conn)
    return deleted, touched


def _delete_rows(conn: sqlite3.Connection, execution_id: str, seqs: list[int]) -> int:
    """Delete rows of one run; the messages they added move onto the remaining rows that need them."""
    doomed = set(seqs)
    losing = {
        log_id
        for seq, log_id in conn.execute(
            "SELECT seq, log_id FROM checkpoints WHERE execution_id = ? AND new_messages IS NOT NULL",
            (execution_id,),
        )
        if seq in doomed
    }
    moved = {log_id: _load_log(conn, execution_id, log_id, split_chunk) for log_id in losing}
    conn.executemany(
        "DELETE FROM checkpoints WHERE execution_id = ? AND seq = ?", [(execution_id, s) for s in seqs]
    )
    for log_id, bodies in moved.items():
        rows = conn.execute(
            "SELECT id, message_count, new_messages FROM checkpoints WHERE execution_id = ? AND log_id = ? "
            "ORDER BY seq",
            (execution_id, log_id),
        ).fetchall()
        _rechunk_rows(conn, rows, bodies)
    return len(seqs)


# The outbox is the rows with ``synced = 0``; ``outbox.low`` is a mark no such row lies below, so
# fetching scans the table from there instead of keeping an index that every append would write.
def _raise_outbox_mark(conn: sqlite3.Connection) -> None:
    """Move the mark up to the oldest row still unsynced (after rows were marked synced)."""
    conn.execute(
        "UPDATE outbox SET low = coalesce((SELECT id FROM checkpoints WHERE id >= outbox.low AND synced = 0 "
        "ORDER BY id LIMIT 1), (SELECT coalesce(max(id), 0) + 1 FROM checkpoints))"
    )


def _lower_outbox_mark(conn: sqlite3.Connection) -> None:
    """Keep the mark at most one past the newest row (after a delete).

    SQLite gives a new row the id after the largest one left, so deleting the newest rows would
    otherwise let the next row take an id below the mark, and the outbox would never send it.
    """
    conn.execute("UPDATE outbox SET low = min(low, (SELECT coalesce(max(id), 0) + 1 FROM checkpoints))")


def _rechunk_rows(conn: sqlite3.Connection, rows: Sequence[Sequence[Any]], bodies: list[bytes]) -> None:
    """Give the rows of one log, ``(id, message_count, new_messages)`` in seq order, the chunks
    :func:`stores._codec.rechunk` assigns them (only rows whose chunk changes are written)."""
    chunks = rechunk([found[1] for found in rows], bodies)
    conn.executemany(
        "UPDATE checkpoints SET new_messages = ? WHERE id = ?",
        [(chunk, found[0]) for found, chunk in zip(rows, chunks, strict=True) if found[2] != chunk],
    )


def _chunks_onto_rows(conn: sqlite3.Connection) -> None:
    """Schema 2: each row carries the messages it added (``new_messages``); the messages table goes."""
    conn.execute("ALTER TABLE checkpoints ADD COLUMN new_messages BLOB")
    rows = conn.execute(
        "SELECT execution_id, log_id, id, message_count, new_messages FROM checkpoints "
        "WHERE log_id IS NOT NULL ORDER BY execution_id, log_id, seq"
    ).fetchall()
    for (eid, log_id), group in itertools.groupby(rows, key=lambda found: (found[0], found[1])):
        bodies = [
            bytes(body)
            for (body,) in conn.execute(
                "SELECT body FROM messages WHERE execution_id = ? AND log_id = ? ORDER BY idx", (eid, log_id)
            )
        ]
        _rechunk_rows(conn, [found[2:] for found in group], bodies)
    conn.execute("DROP TABLE messages")


def _reentry_rows(conn: sqlite3.Connection, execution_id: str) -> list[int]:
    """The seqs re-entry reads (so it gives the same answer after a prune), and the re-entry row."""
    ctx = _Ctx()
    newest, row_at, row_before = _walkers(conn, ctx, execution_id)
    with contextlib.suppress(TetherError):
        _run_sync(resolve_reentry(execution_id, newest, row_at, row_before))
    found = conn.execute(
        "SELECT seq FROM checkpoints WHERE execution_id = ? AND step_type != ? ORDER BY seq DESC LIMIT 1",
        (execution_id, RUN_END),
    ).fetchone()
    if found is not None:
        ctx.visited.add(found[0])
    return sorted(ctx.visited)
