"""Opening a SQLite connection with the store's settings, and the one thread that uses it.

Each connection (the writer, the reader) is served by a :class:`DatabaseThread` this module owns:
a daemon thread taking callables from a queue, like aiosqlite's worker, but with two entries that
aiosqlite keeps private: :meth:`DatabaseThread.post` (run a callable that answers its caller
itself, which the group-commit chain needs) and :meth:`DatabaseThread.call` (run a callable and
await its result: one thread hop per transaction). Owning it means no private attribute of a
dependency is on the write path.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from queue import SimpleQueue
from typing import Any, Final, TypeVar

from .._errors import (
    StoreCorrupt,
    StoreFull,
    cannot_open,
    no_sqlite_file,
    no_wal,
    not_sqlite,
    sqlite_connection_closed,
    store_corrupt,
    store_full,
    unusable,
)
from .._loop import Loop, Settled, trio_loop

__all__ = [
    "SYNCHRONOUS",
    "DatabaseThread",
    "connect",
    "execute_busy",
    "fault_of",
    "integrity_problems",
    "is_busy",
    "retry_busy",
]

T = TypeVar("T")

#: The values ``PRAGMA synchronous`` takes.
SYNCHRONOUS: Final = frozenset({"OFF", "NORMAL", "FULL", "EXTRA"})


def is_busy(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` is SQLITE_BUSY / SQLITE_LOCKED."""
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in str(exc) or "busy" in str(exc))


def fault_of(path: str, exc: sqlite3.DatabaseError) -> StoreCorrupt | StoreFull | None:
    """The typed error of a damaged file (:class:`StoreCorrupt`) or of a write the file system had no
    room for (:class:`StoreFull`: a full disk, or a file-size limit, which SQLite reports as a
    failed write); ``None`` for any other error."""
    code = getattr(exc, "sqlite_errorcode", None) or 0
    name = getattr(exc, "sqlite_errorname", None) or type(exc).__name__
    where = f"the SQLite database {path!r}"
    if code & 0xFF in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
        return store_corrupt(where, f"{exc} ({name})")
    if code & 0xFF == sqlite3.SQLITE_FULL:
        return store_full(where, f"the disk is full ({name})")
    if code == sqlite3.SQLITE_IOERR_WRITE:
        return store_full(
            where,
            f"a write failed ({name}): the disk is full, a file-size limit was reached, or the device failed",
        )
    return None


def retry_busy(fn: Callable[[], T], deadline: float, delay: float = 0.001) -> T:
    """Run ``fn``, retrying SQLITE_BUSY with bounded backoff (from ``delay`` seconds) until
    ``deadline`` (monotonic)."""
    while True:
        try:
            return fn()
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


def execute_busy(conn: sqlite3.Connection, sql: str, patience: float) -> None:
    """Execute ``sql`` as :func:`retry_busy` would for ``patience`` seconds from now; the first
    attempt builds no callable (a transaction's ``BEGIN`` and ``COMMIT`` are rarely busy)."""
    start = time.monotonic()
    try:
        conn.execute(sql)
    except sqlite3.OperationalError as exc:
        deadline = start + patience
        if not is_busy(exc) or time.monotonic() >= deadline:
            raise
        time.sleep(0.001)
        retry_busy(lambda: conn.execute(sql), deadline, 0.002)


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


def connect(path: str, *, writer: bool, busy_timeout: float, synchronous: str) -> sqlite3.Connection:
    """Open a connection with the store's settings (blocking: run it in a worker thread)."""
    try:
        if writer:
            _create_private(path)
        conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
    except OSError as exc:
        raise cannot_open(path, exc) from exc
    except sqlite3.Error as exc:
        raise cannot_open(path, exc) from exc
    try:
        deadline = time.monotonic() + busy_timeout
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        if writer:
            mode = retry_busy(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone(), deadline)
            if mode is None or str(mode[0]).lower() != "wal":
                raise no_wal(path, mode)
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        if not writer:
            conn.execute("PRAGMA query_only = 1")
    except sqlite3.DatabaseError as exc:
        conn.close()
        if exc.sqlite_errorcode == sqlite3.SQLITE_NOTADB:  # SQLite read the header, wrote nothing
            raise not_sqlite(path) from exc
        raise unusable(f"the SQLite database {path!r}", exc) from exc
    except BaseException:
        conn.close()
        raise
    return conn


def integrity_problems(path: str, max_errors: int) -> list[str]:
    """What ``PRAGMA integrity_check`` finds wrong with the database at ``path`` (empty: nothing),
    read through a read-only connection of its own (blocking: run it in a worker thread). A file that
    is not there is ``StoreUnavailable``: a check creates nothing."""
    if not os.path.exists(path):
        raise no_sqlite_file(path)
    try:
        conn = sqlite3.connect(f"file:{_uri_path(path)}?mode=ro", uri=True, isolation_level=None)
    except sqlite3.Error as exc:
        raise cannot_open(path, exc) from exc
    try:
        found = [str(r[0]) for r in conn.execute(f"PRAGMA integrity_check({int(max_errors)})")]
    except sqlite3.DatabaseError as exc:  # too damaged to walk at all
        return [f"{exc} ({getattr(exc, 'sqlite_errorname', type(exc).__name__)})"]
    finally:
        conn.close()
    return [] if found == ["ok"] else found


def _uri_path(path: str) -> str:
    """``path`` quoted for a ``file:`` URI (``?`` and ``#`` would end the path)."""
    from urllib.parse import quote

    return quote(os.path.abspath(path))


def _answer(future: Settled[Any], ok: bool, value: Any) -> None:
    if future.done():  # its caller was cancelled
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


class DatabaseThread:
    """One ``sqlite3.Connection`` and the daemon thread that runs everything on it, in order.

    A daemon: a store the application forgot to close must not keep the interpreter alive at exit.
    Nothing is lost: a write's caller is answered only after its COMMIT.
    """

    def __init__(self, conn: sqlite3.Connection, name: str) -> None:
        self.conn = conn
        self.running = True
        self._queue: SimpleQueue[Callable[[], None] | None] = SimpleQueue()
        #: Queue a job for the thread; it must answer its caller itself and must not raise (the
        #: queue's own method: no frame of Python per write).
        self.post: Callable[[Callable[[], None]], None] = self._queue.put_nowait
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            job()  # a job answers its caller itself and never raises (see ``post`` and ``call``)
            del job  # nor is it kept while the thread waits: a write's batch holds its rows

    async def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the thread and return its result (or raise its exception)."""
        if not self.running:
            raise sqlite_connection_closed()
        return await self._submit(fn)

    def _submit(self, fn: Callable[[], T]) -> Settled[T]:
        try:
            loop: Loop = asyncio.get_running_loop()
        except RuntimeError:  # not asyncio (trio): anyio's token for this run
            loop = trio_loop()
        future: Settled[T] = loop.create_future()

        def job() -> None:
            try:
                result = fn()
            except BaseException as exc:
                loop.call_soon_threadsafe(_answer, future, False, exc)
            else:
                loop.call_soon_threadsafe(_answer, future, True, result)

        self._queue.put_nowait(job)
        return future

    async def close(self) -> None:
        """Close the connection after everything queued before it, then end the thread.

        The close and the stop are queued at once, so the thread ends even if this wait is cut short.
        """
        if not self.running:
            return
        self.running = False
        closed = self._submit(self.conn.close)
        self._queue.put_nowait(None)
        await closed
