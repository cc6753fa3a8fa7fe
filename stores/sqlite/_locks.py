"""Run ownership on SQLite: one byte of ``<path>.locks`` per owner id, and the ``run_owners`` rows.

The store locks the byte hashed from its owner id with an open-file-description lock on its one
descriptor of the lock file; the kernel frees it when the process dies. Whether another owner is
alive is asked with ``F_OFD_GETLK`` on its byte (a query: nothing is taken). Owning a run is a
``run_owners`` row naming the owner id, written in the same transaction that checked the previous
owner, so exactly one taker wins.

The lock is lost when the lock file is removed or replaced under the store (the byte then locks a
file nobody else opens): a watcher thread compares the path with the descriptor every
:data:`WATCH_INTERVAL` seconds, and every ownership check does the same, so the owner id is lost at
once and its runs abandoned (:mod:`stores._owners`). A forked child closes its copies of the lock
descriptors (``os.register_at_fork``): a child outliving its parent would otherwise keep the
parent's lock held. ``open`` and a non-blocking ``fcntl`` on a local file take microseconds, so they
run on the event loop.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import sqlite3
import struct
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Final

from .._errors import StoreUnavailable, owned_elsewhere
from .._heads import row_state
from .._loop import Loop, running_loop
from .._model import new_id
from .._owners import Ownership

__all__ = [
    "TAKE_SQL",
    "WATCH_INTERVAL",
    "LivenessFile",
    "Op",
    "dead_owners",
    "expired_rows",
    "owned_rows",
    "release_row",
    "ride",
    "take_row",
    "unowned_rows",
]

#: A write transaction's operation: a function of the writer connection.
Op = Callable[[sqlite3.Connection], Any]

_F_OFD_GETLK: Final[int] = getattr(fcntl, "F_OFD_GETLK", 36)
_F_OFD_SETLK: Final[int] = getattr(fcntl, "F_OFD_SETLK", 37)
_FLOCK: Final = "hhqqi4x"  # struct flock on 64-bit Linux: type, whence, start, len, pid (+ padding)
#: How often the watcher thread looks whether the lock file is still the one locked (seconds).
WATCH_INTERVAL: Final = 0.2

_NOW: Final = "strftime('%Y-%m-%dT%H:%M:%f', 'now')"
#: Record an owner with the run (its previous owner checked by the caller).
TAKE_SQL: Final = (
    f"INSERT INTO run_owners (execution_id, owner, since) VALUES (?, ?, {_NOW}) "
    "ON CONFLICT (execution_id) DO UPDATE SET owner = excluded.owner, since = excluded.since"
)
#: :data:`TAKE_SQL` where no check is needed: the run has no row, names no owner, or names this one
#: (a take's common case, one statement; it writes nothing, changing no row, when another is named).
_TAKE_FREE: Final = TAKE_SQL + " WHERE run_owners.owner IS NULL OR run_owners.owner = excluded.owner"

_open_files: weakref.WeakSet[LivenessFile] = weakref.WeakSet()


def _offset(owner: str) -> int:
    """The byte of the lock file that stands for an owner id (a 62-bit hash of it)."""
    return int.from_bytes(hashlib.blake2b(owner.encode(), digest_size=8).digest(), "big") >> 2


def _flock(kind: int, offset: int) -> bytes:
    return struct.pack(_FLOCK, kind, os.SEEK_SET, offset, 1, 0)


class LivenessFile:
    """The one lock a store's current owner id holds on the lock file, and the watcher of that file."""

    def __init__(self, lock_path: str, ownership: Ownership) -> None:
        self.path = lock_path
        self._own = ownership
        self._fd: int | None = None
        self._ident: tuple[int, int] | None = None
        self._owner: str | None = None
        self._loop: Loop | None = None
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        _open_files.add(self)

    def hold(self) -> str:
        """The current owner id, its byte locked (opening the file and starting the watcher once)."""
        self.probe()
        owner = self._own.owner
        if owner == self._owner and self._fd is not None:
            return owner
        self._drop()
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise StoreUnavailable(f"cannot open the lock file {self.path!r}: {exc}") from exc
        try:
            fcntl.fcntl(fd, _F_OFD_SETLK, _flock(fcntl.F_WRLCK, _offset(owner)))
            stat = os.fstat(fd)
        except OSError as exc:
            os.close(fd)
            raise StoreUnavailable(f"cannot lock {self.path!r}: {exc}") from exc
        self._fd, self._owner, self._ident = fd, owner, (stat.st_dev, stat.st_ino)
        self._loop = running_loop()
        if self._watcher is None:
            self._watcher = threading.Thread(target=self._watch, name="tether-sqlite-locks", daemon=True)
            self._watcher.start()
        return owner

    def alive(self, owner: str) -> bool:
        """Whether ``owner``'s byte is locked by anyone (``F_OFD_GETLK``: a query, nothing taken)."""
        fd = self._fd
        if fd is None:
            raise StoreUnavailable(f"the lock file {self.path!r} is not open")
        if owner == self._owner:
            return True  # our own lock: a query on our own descriptor does not see it
        found = fcntl.fcntl(fd, _F_OFD_GETLK, _flock(fcntl.F_WRLCK, _offset(owner)))
        kind: int = struct.unpack(_FLOCK, found)[0]
        return kind != fcntl.F_UNLCK

    def probe(self) -> None:
        """Lose the owner id now if its lock file was removed or replaced (one ``stat``)."""
        owner, ident = self._owner, self._ident
        if owner is None or ident is None:
            return
        try:
            stat = os.stat(self.path)
            same = (stat.st_dev, stat.st_ino) == ident
        except FileNotFoundError:
            same = False
        if not same:
            self._lose(owner)

    def _lose(self, owner: str) -> None:
        if owner != self._owner:
            return
        self._drop()
        self._own.lose(owner, f"its lock file {self.path!r} was removed or replaced")

    def _watch(self) -> None:
        """The watcher thread: a probe every interval, answered on the store's event loop."""
        while not self._stop.wait(WATCH_INTERVAL):
            owner, ident, loop = self._owner, self._ident, self._loop
            if owner is None or ident is None or loop is None:
                continue
            try:
                stat = os.stat(self.path)
                same = (stat.st_dev, stat.st_ino) == ident
            except FileNotFoundError:
                same = False
            except OSError:
                continue
            if not same:
                try:
                    loop.call_soon_threadsafe(self._lose, owner)
                except RuntimeError:  # the loop is closed: nothing is left to stop
                    return

    def _drop(self) -> None:
        fd, self._fd, self._owner, self._ident = self._fd, None, None, None
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        """Close the descriptor (its lock goes with it) and stop the watcher; not a loss."""
        self._stop.set()
        self._drop()

    def _after_fork_in_child(self) -> None:
        """In a forked child: close the inherited descriptor and forget the parent's owner id."""
        fd, self._fd, self._owner, self._ident = self._fd, None, None, None
        self._watcher = None
        self._stop = threading.Event()
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
        self._own.owner = new_id()
        self._own.held.clear()


def _close_in_child() -> None:
    for lock in list(_open_files):
        lock._after_fork_in_child()


os.register_at_fork(after_in_child=_close_in_child)


def take_row(conn: sqlite3.Connection, execution_id: str, owner: str, lock: LivenessFile) -> bool:
    """In a write transaction: record ``owner`` with the run unless a live other owner is recorded."""
    if conn.execute(_TAKE_FREE, (execution_id, owner)).rowcount:
        return True
    found = conn.execute("SELECT owner FROM run_owners WHERE execution_id = ?", (execution_id,)).fetchone()
    if found is not None and found[0] is not None and found[0] != owner and lock.alive(found[0]):
        return False
    conn.execute(TAKE_SQL, (execution_id, owner))
    return True


def release_row(conn: sqlite3.Connection, execution_id: str, owner: str) -> None:
    """In a write transaction: delete the run's row if ``owner`` holds it and the run rests (a
    ``run_end``, a pause, a tool's ``wait``) or has no rows; a run left mid-step is handed to the
    fleet instead (no owner)."""
    newest = conn.execute(
        "SELECT step_type, status FROM checkpoints WHERE execution_id = ? ORDER BY seq DESC LIMIT 1",
        (execution_id,),
    ).fetchone()
    if newest is None or row_state(newest[0], newest[1]) != "unfinished":
        rest_row(conn, execution_id, owner)
    else:
        conn.execute(
            f"UPDATE run_owners SET owner = NULL, since = {_NOW} WHERE execution_id = ? AND owner = ?",
            (execution_id, owner),
        )


def rest_row(conn: sqlite3.Connection, execution_id: str, owner: str) -> None:
    """In a write transaction: delete the run's row if ``owner`` holds it (the run rests)."""
    conn.execute("DELETE FROM run_owners WHERE execution_id = ? AND owner = ?", (execution_id, owner))


def ride(op: Op, execution_id: str, take: str | None, release: str | None, lock: LivenessFile) -> Op:
    """``op`` in the transaction that takes the run for ``take`` (checked as :func:`take_row` does;
    refused with :func:`~stores._owners.taken`) and releases it for ``release`` after: ``release`` is
    set only for an ``op`` that writes a resting row (a ``run_end``, a pause), which is then the run's
    newest, so the release deletes the row without reading the run's newest row back."""

    def run(conn: sqlite3.Connection) -> Any:
        if take is not None and not take_row(conn, execution_id, take, lock):
            raise owned_elsewhere(execution_id)
        value = op(conn)
        if release is not None:
            rest_row(conn, execution_id, release)
        return value

    return run


def dead_owners(conn: sqlite3.Connection, lock: LivenessFile) -> list[str]:
    """The owners recorded with runs whose byte is unlocked (dead, or lost their lock)."""
    owners = [o for (o,) in conn.execute("SELECT DISTINCT owner FROM run_owners WHERE owner IS NOT NULL")]
    return [o for o in owners if not lock.alive(o)]


def owned_rows(conn: sqlite3.Connection, execution_ids: Sequence[str], lock: LivenessFile | None) -> set[str]:
    """Which of these runs name an owner whose byte is locked (``lock`` None: no lock file yet)."""
    found: set[str] = set()
    for start in range(0, len(execution_ids), 500):
        chunk = list(execution_ids[start : start + 500])
        marks = ", ".join("?" for _ in chunk)
        for eid, owner in conn.execute(
            f"SELECT execution_id, owner FROM run_owners WHERE owner IS NOT NULL AND execution_id IN ({marks})",
            chunk,
        ):
            if lock is not None and lock.alive(owner):
                found.add(eid)
    return found


def unowned_rows(conn: sqlite3.Connection, execution_ids: Sequence[str]) -> set[str]:
    """Which of these runs have a ``run_owners`` row naming no owner (handed to the fleet)."""
    found: set[str] = set()
    for start in range(0, len(execution_ids), 500):
        chunk = list(execution_ids[start : start + 500])
        marks = ", ".join("?" for _ in chunk)
        found.update(
            eid
            for (eid,) in conn.execute(
                f"SELECT execution_id FROM run_owners WHERE owner IS NULL AND execution_id IN ({marks})",
                chunk,
            )
        )
    return found


def expired_rows(conn: sqlite3.Connection, now: str, limit: int) -> list[str]:
    """Paused runs whose pending row expired at or before ``now``, soonest first."""
    found = conn.execute(
        "SELECT execution_id FROM pending_interrupts WHERE expires_at IS NOT NULL AND expires_at <= ? "
        "ORDER BY expires_at LIMIT ?",
        (now, limit),
    )
    return [eid for (eid,) in found]
