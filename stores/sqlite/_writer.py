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
from .._loop import Loop, Settled, running_loop, settled, trio_loop
from ._connection import DatabaseThread, connect, execute_busy, fault_of
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


#: One caller's write on the queue: the operation and the caller's future (a tuple: no object to build).
_Op = tuple[Callable[[sqlite3.Connection], Any], Settled[Any]]


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
        # True while batches are being written (the chain of ``_next_batch`` is on); ``close`` waits
        # for the queue to empty on ``_drained``, made only then.
        self._sending = False
        self._drained: Settled[None] | None = None
        # Set once both connections are open and migrated: a write then needs no set-up check.
        self._opened = False
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
        self._opened = True

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
        if self._sending:
            if self._drained is None:
                self._drained = running_loop().create_future()
            await settled(self._drained)
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
            execute_busy(conn, "BEGIN", self._busy_timeout * 2)
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

    def _begin(self, conn: sqlite3.Connection) -> None:
        try:
            execute_busy(conn, "BEGIN IMMEDIATE", self._busy_timeout * 2)
        except sqlite3.OperationalError as exc:
            raise stayed_locked(self.path, exc) from exc

    def _commit(self, conn: sqlite3.Connection) -> None:
        execute_busy(conn, "COMMIT", self._busy_timeout * 2)

    def _fault(self, exc: sqlite3.DatabaseError) -> BaseException:
        """The typed error for ``exc`` (``exc`` itself when it has none); a damaged file is
        remembered, and every later write is refused with :class:`StoreCorrupt`."""
        fault = fault_of(self.path, exc)
        if isinstance(fault, StoreCorrupt) and self._corrupt is None:
            self._corrupt = f"{exc} ({exc.sqlite_errorname})"
        return exc if fault is None else fault

    def write(self, fn: Callable[[sqlite3.Connection], T]) -> Awaitable[T]:
        """Queue ``fn`` for the next write transaction; the caller awaits its own outcome (a
        database error already turned into the store's typed one, see :meth:`_batch_done`)."""
        if not self._opened or self.closed or self._corrupt is not None:
            return self._write_checked(fn)
        try:
            loop: Loop = asyncio.get_running_loop()
        except RuntimeError:  # not asyncio (trio): anyio's token for this run
            loop = trio_loop()
        future: Settled[T] = loop.create_future()
        self._queue.append((fn, future))
        if not self._sending:
            self._sending = True
            loop.call_soon(self._next_batch, loop)
        return future

    async def _write_checked(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """:meth:`write` of a store not yet set up (set up here), closed or found damaged (refused)."""
        await self.ensure()  # opens the connections (or raises): the write below is queued
        if self.closed:
            raise store_closed(self._store)
        if self._corrupt is not None:
            raise store_corrupt(f"the SQLite database {self.path!r}", self._corrupt)
        return await self.write(fn)

    def _next_batch(self, loop: Loop) -> None:
        """Send the next queued batch to the writer thread, or end the chain (on the loop)."""
        queue = self._queue
        if not queue:
            self._sending = False
            drained, self._drained = self._drained, None
            if drained is not None and not drained.done():
                drained.set_result(None)
            return
        if len(queue) <= _MAX_BATCH:
            batch, self._queue = queue, []
        else:
            batch, self._queue = queue[:_MAX_BATCH], queue[_MAX_BATCH:]
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
            # Under the file's in-process write mutex (see ``_file_locks``).
            with self._write_lock:
                outcomes = self._run_batch_locked(batch)
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
        """Answer each caller of ``batch`` with its own outcome, then go on (on the loop). A
        database error reaches its caller as the store's typed error (:meth:`_fault`) when it has one."""
        if outcomes is None:
            for _, future in batch:
                if not future.done():  # else its caller was cancelled
                    future.set_exception(self._typed(error if error is not None else write_failed()))
        else:
            for (_, future), (ok, value) in zip(batch, outcomes, strict=True):
                if future.done():  # its caller was cancelled; the write stands or fell all the same
                    continue
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(self._typed(value))
        # One loop turn later: the callers just answered run first and queue their next writes
        # (a run's next row, an awaited spawn's next first row), which then share the next batch
        # instead of each waiting behind a batch posted without them.
        loop.call_soon(self._next_batch, loop)

    def _typed(self, exc: BaseException) -> BaseException:
        """What a write's caller gets for ``exc``: a database error's typed error, caused by it."""
        if not isinstance(exc, sqlite3.DatabaseError):
            return exc
        fault = self._fault(exc)
        if fault is not exc:
            fault.__cause__ = exc  # as ``raise fault from exc``
        return fault

    def _run_batch_locked(self, batch: list[_Op]) -> list[tuple[bool, Any]]:
        """One write transaction for the whole batch, one commit (runs on the writer thread, under
        the file's write mutex).

        Optimistic first: the operations run back to back. If one fails, the transaction is rolled
        back and the batch re-run with a ``SAVEPOINT`` per operation, so the failure undoes only
        itself (conflicts are rare; the common path saves two statements per operation).
        """
        writer = self._writer
        if writer is None:
            raise store_closed(self._store)
        conn = writer.conn
        self._begin(conn)
        try:
            outcomes: list[tuple[bool, Any]] = []
            try:
                for fn, _ in batch:
                    outcomes.append((True, fn(conn)))
            except Exception as exc:
                conn.rollback()
                if len(batch) == 1:
                    return [(False, exc)]
                self._begin(conn)
                outcomes = [self._isolated(conn, fn) for fn, _ in batch]
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
