"""Run ownership locks for SQLite: one byte per run of ``<path>.locks``, locked with an
open-file-description lock.

The byte sits at an offset hashed from the run's id and is locked on the store's one descriptor of
the lock file: another descriptor (another store, another process) is refused, and the lock goes
when the descriptor closes or the process dies. ``open`` and a non-blocking ``fcntl`` on a local
file take microseconds, so they run on the event loop.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import struct
import threading
from collections.abc import Sequence
from typing import Final

from .._errors import StoreUnavailable

__all__ = ["FileLocks"]

_F_OFD_SETLK: Final[int] = getattr(fcntl, "F_OFD_SETLK", 37)
_F_OFD_GETLK: Final[int] = getattr(fcntl, "F_OFD_GETLK", 36)
_FLOCK: Final = "hhqqi4x"  # struct flock on 64-bit Linux: type, whence, start, len, pid (+ padding)

# Ownership locks held in this process, by (lock file, execution_id): a second holder is refused
# even when it uses another SQLiteStore instance on the same file.
_held: set[tuple[str, str]] = set()
_held_guard = threading.Lock()


def _offset(execution_id: str) -> int:
    """The byte of the lock file that stands for the run (a 62-bit hash of its id)."""
    return int.from_bytes(hashlib.blake2b(execution_id.encode(), digest_size=8).digest(), "big") >> 2


def _lock_byte(fd: int, kind: int, offset: int) -> None:
    """Lock or unlock one byte of the lock file (an open-file-description lock on ``fd``)."""
    fcntl.fcntl(fd, _F_OFD_SETLK, struct.pack(_FLOCK, kind, os.SEEK_SET, offset, 1, 0))


class FileLocks:
    """The ownership locks one store holds on its lock file."""

    def __init__(self, lock_path: str) -> None:
        self.path = lock_path
        self._key = os.path.realpath(lock_path)
        self._fd: int | None = None
        self._locks: dict[int, str] = {}  # the byte of the lock file -> the run holding it

    def try_lock(self, execution_id: str) -> bool:
        """Take the run's lock; ``False`` if anyone else (any process, any holder) holds it."""
        key = (self._key, execution_id)
        with _held_guard:
            if key in _held:
                return False
            _held.add(key)
        offset = _offset(execution_id)
        if offset in self._locks:  # another run of this store hashes to the same byte: refused as held
            with _held_guard:
                _held.discard(key)
            return False
        try:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fd = self._fd
        except OSError as exc:
            with _held_guard:
                _held.discard(key)
            raise StoreUnavailable(f"cannot open the lock file {self.path!r}: {exc}") from exc
        try:
            _lock_byte(fd, fcntl.F_WRLCK, offset)
        except OSError as exc:
            with _held_guard:
                _held.discard(key)
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                return False
            raise StoreUnavailable(f"cannot lock {self.path!r}: {exc}") from exc
        self._locks[offset] = execution_id
        return True

    def owned(self, execution_ids: Sequence[str]) -> set[str]:
        """Which of these runs anyone holds, tested with ``F_OFD_GETLK`` on a descriptor of its own
        (a test takes no lock). No lock file yet: nobody owns anything."""
        with _held_guard:
            found = {eid for eid in execution_ids if (self._key, eid) in _held}
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            return found
        except OSError as exc:
            raise StoreUnavailable(f"cannot open the lock file {self.path!r}: {exc}") from exc
        try:
            for eid in execution_ids:
                if eid in found:
                    continue
                probe = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, _offset(eid), 1, 0)
                if struct.unpack(_FLOCK, fcntl.fcntl(fd, _F_OFD_GETLK, probe))[0] != fcntl.F_UNLCK:
                    found.add(eid)
        finally:
            os.close(fd)
        return found

    def release(self, execution_id: str) -> None:
        """Release the run's lock if held here."""
        offset = _offset(execution_id)
        if self._locks.get(offset) != execution_id:
            return
        del self._locks[offset]
        try:
            if self._fd is not None:
                _lock_byte(self._fd, fcntl.F_UNLCK, offset)
        finally:
            with _held_guard:
                _held.discard((self._key, execution_id))

    def release_all(self) -> None:
        """Release every lock at once: closing the descriptor drops all of its locks."""
        fd, self._fd = self._fd, None
        try:
            if fd is not None:
                os.close(fd)
        finally:
            with _held_guard:
                for execution_id in self._locks.values():
                    _held.discard((self._key, execution_id))
            self._locks.clear()
