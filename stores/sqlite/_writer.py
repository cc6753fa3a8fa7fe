"""The one owner of a SQLite store's connections: group commit on the writer, one hop per read.

:class:`Connections` opens the writer and the reader (each served by its own
:class:`~stores.sqlite._connection.DatabaseThread`), migrates the file, and answers the store's
requests: a read is one hop to the reader thread in one read transaction; a write is a message (an
operation, a function of the ``sqlite3.Connection``, with the caller's future) on the write queue.

Group commit: many callers' writes, one transaction, one COMMIT. A caller puts one operation on the
write queue and awaits its own future. The drain is a chain of callbacks, not a task: the first writer
schedules :meth:`Connections._next_batch` for the next loop iteration (writers ready in this one share
the commit), which posts the queued batch to the writer thread; the thread runs it in ONE hop
(``BEGIN IMMEDIATE``, the operations, one ``COMMIT``), answers each caller's future itself through
``call_soon_threadsafe`` and chains the next batch. The loop is the caller's, asyncio's or trio's
(:mod:`stores._loop`). No task, no intermediate future, one wake-up
per caller; nothing in the chain can be cancelled. If an operation fails, the batch is re-run with
a ``SAVEPOINT`` per operation, so the failure rolls back only itself and its caller gets its own
exception. While that hop runs, new operations queue up and share the next commit.
"""

from __future__ import annotations

import asyncio
import functools
import os
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

import anyio
import anyio.to_thread

from .._errors import (
    StoreCorrupt,
    batch_stopped,
    stayed_locked,
    store_closed,
    store_corrupt,
    unreadable,
    write_failed,
)
from .._loop import Loop, Settled, settled, trio_loop
from ._connection import DatabaseThread, connect, fault_of, retry_busy
from ._schema import migrate

__all__ = ["Connections", "file_lock"]

T = TypeVar("T")

_MAX_BATCH: Final = 512
#: Bound on stopping one database thread (seconds).
_CLOSE_TIMEOUT: Final = 10.0

# One mutex per database file for the write transactions of every SQLiteStore of this process on it.
# Writers of one process then queue on a lock that wakes the next one the moment a COMMIT is done,
# instead of meeting in SQLite's busy handler, which sleeps 1, 2, 5, 10... ms between retries (with 8
# racing claimers that sleep cost more than the commits). Other processes still meet in the handler.
_file_locks: dict[str, threading.Lock] = {}
_file_locks_guard = threading.Lock()


def file_lock(path: str) -> threading.Lock:
    """The in-process write mutex of the database file at ``path``."""
    key = os.path.realpath(path)
    with _file_locks_guard:
        lock = _file_locks.get(key)
        if lock is None:
            lock = _file_locks[key] = threading.Lock()
        return lock


class _Op:
    __slots__ = ("fn", "future")

    def __init__(self, fn: Callable[[sqlite3.Connection], Any], future: Settled[Any]) -> None:
        self.fn = fn
        self.future = future


class Connections:
    """The writer and the reader of one :class:`~stores.SQLiteStore`, and the only code that uses them.

    ``store`` names the store in errors; ``ensure`` sets the store up on first use (it calls
    :meth:`open` once), and is what the store's parts call for it. :attr:`transactions` counts write transactions (group commit shares them).
    """

    def __init__(
        self,
        path: str,
        *,
        synchronous: str,
        busy_timeout: float,
        store: object,
        ensure: Callable[[], Awaitable[None]],
    ) -> None:
        self.path = path
        self._synchronous = synchronous
        self._busy_timeout = busy_timeout
        self._store = store
        self.ensure = ensure
        self._writer: DatabaseThread | None = None
        self._reader: DatabaseThread | None = None
        self._write_lock = file_lock(path)
        self._queue: list[_Op] = []
        # Set while batches are being written; resolved when the queue is empty (``close`` waits).
        self._drain: Settled[None] | None = None
        # Why the file is known to be damaged (set by the first read or write that found it so).
        self._corrupt: str | None = None
        self.closed = False
        self.transactions = 0

    # -- opening and closing ----------------------------------------------------------------------

    async def open(self) -> None:
        """Open both connections and migrate the schema (safe across processes); on a failure
        nothing is left open."""
        try:
            self._writer = await self._connect(writer=True)
            await self._writer.call(
                functools.partial(migrate, self._writer.conn, self.path, self._begin, self._commit)
            )
            self._reader = await self._connect(writer=False)
        except BaseException:
            await self._close_threads()
            raise

    async def _connect(self, *, writer: bool) -> DatabaseThread:
        # Connect in a worker thread first, so a failure never leaves a database thread behind.
        opener = functools.partial(
            connect,
            self.path,
            writer=writer,
            busy_timeout=self._busy_timeout,
            synchronous=self._synchronous,
        )
        raw = await anyio.to_thread.run_sync(opener)
        return DatabaseThread(raw, f"tether-sqlite-{'writer' if writer else 'reader'}")

    async def close(self) -> None:
        """Refuse new writes, finish the queued ones, then stop both threads (each bounded)."""
        self.closed = True
        if self._drain is not None:
            await settled(self._drain)
        await self._close_threads()

    async def _close_threads(self) -> None:
        for thread in (self._writer, self._reader):
            if thread is not None:
                with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT):
                    await thread.close()
        self._writer = self._reader = None

    # -- reads ------------------------------------------------------------------------------------

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` in one read transaction on the reader thread (one hop)."""
        await self.ensure()
        reader = self._reader
        if reader is None:
            raise store_closed(self._store)
        conn = reader.conn

        def run() -> T:
            deadline = time.monotonic() + self._busy_timeout * 2
            retry_busy(lambda: conn.execute("BEGIN"), deadline)
            try:
                return fn(conn)
            finally:
                conn.rollback()

        try:
            return await reader.call(run)
        except sqlite3.DatabaseError as exc:
            fault = self._fault(exc)
            if fault is exc and isinstance(exc, sqlite3.OperationalError):
                raise unreadable(self.path, exc) from exc
            raise fault from exc

    # -- writes -----------------------------------------------------------------------------------

    def _w(self) -> sqlite3.Connection:
        writer = self._writer
        if writer is None:
            raise store_closed(self._store)
        return writer.conn

    def _begin(self, conn: sqlite3.Connection) -> None:
        deadline = time.monotonic() + self._busy_timeout * 2
        try:
            retry_busy(lambda: conn.execute("BEGIN IMMEDIATE"), deadline)
        except sqlite3.OperationalError as exc:
            raise stayed_locked(self.path, exc) from exc

    def _commit(self, conn: sqlite3.Connection) -> None:
        deadline = time.monotonic() + self._busy_timeout * 2
        retry_busy(lambda: conn.execute("COMMIT"), deadline)

    def _fault(self, exc: sqlite3.DatabaseError) -> BaseException:
        """The typed error for ``exc`` (``exc`` itself when it has none); a damaged file is
        remembered, and every later write is refused with :class:`StoreCorrupt`."""
        fault = fault_of(self.path, exc)
        if isinstance(fault, StoreCorrupt) and self._corrupt is None:
            self._corrupt = f"{exc} ({exc.sqlite_errorname})"
        return exc if fault is None else fault

    async def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Queue ``fn`` for the next write transaction and wait for its own outcome."""
        await self.ensure()
        if self.closed:
            raise store_closed(self._store)
        if self._corrupt is not None:
            raise store_corrupt(f"the SQLite database {self.path!r}", self._corrupt)
        try:
            loop: Loop = asyncio.get_running_loop()
        except RuntimeError:  # not asyncio (trio): anyio's token for this run
            loop = trio_loop()
        future: Settled[T] = loop.create_future()
        self._queue.append(_Op(fn, future))
        if self._drain is None:
            self._drain = loop.create_future()
            loop.call_soon(self._next_batch, loop)
        try:
            return await future
        except sqlite3.DatabaseError as exc:
            raise self._fault(exc) from exc

    def _next_batch(self, loop: Loop) -> None:
        """Send the next queued batch to the writer thread, or end the drain (on the loop)."""
        if not self._queue:
            drain, self._drain = self._drain, None
            if drain is not None and not drain.done():
                drain.set_result(None)
            return
        batch, self._queue = self._queue[:_MAX_BATCH], self._queue[_MAX_BATCH:]
        writer = self._writer
        if writer is None or not writer.running:
            self._batch_done(loop, batch, None, store_closed(self._store))
            return
        writer.post(functools.partial(self._write_batch, loop, batch))

    def _write_batch(self, loop: Loop, batch: list[_Op]) -> None:
        """Commit ``batch`` (on the writer thread), then answer its callers on the loop."""
        outcomes: list[tuple[bool, Any]] | None = None
        error: Exception | None = None
        try:
            outcomes = self._run_batch([op.fn for op in batch])
        except BaseException as exc:  # the callers get it; this thread must go on serving
            error = exc if isinstance(exc, Exception) else batch_stopped(exc)
        loop.call_soon_threadsafe(self._batch_done, loop, batch, outcomes, error)

    def _batch_done(
        self,
        loop: Loop,
        batch: list[_Op],
        outcomes: list[tuple[bool, Any]] | None,
        error: Exception | None,
    ) -> None:
        """Answer each caller of ``batch`` with its own outcome, then go on (on the loop)."""
        for i, op in enumerate(batch):
            if op.future.done():  # its caller was cancelled; the write stands or fell all the same
                continue
            if outcomes is None:
                op.future.set_exception(error if error is not None else write_failed())
                continue
            ok, value = outcomes[i]
            if ok:
                op.future.set_result(value)
            else:
                op.future.set_exception(value)
        # One loop turn later: the callers just answered run first and queue their next writes
        # (a run's next row, an awaited spawn's next first row), which then share the next batch
        # instead of each waiting behind a batch posted without them.
        loop.call_soon(self._next_batch, loop)

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
