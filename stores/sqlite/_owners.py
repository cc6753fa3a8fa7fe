"""The ownership dialect of :class:`~stores.SQLiteStore` (the shared half is ``stores._owners``): each
statement runs one of :mod:`stores.sqlite._locks`' functions in a write or a read transaction."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

from .._model import utcnow
from .._queues import Admission, Queue, Work
from ._locks import (
    LivenessFile,
    expired_rows,
    owned_rows,
    release_row,
    take_row,
    unowned_rows,
)
from ._queues import declare_row, hand_off_row, queue_rows, take_queued_row, work_rows
from ._rows import ts

__all__ = ["FileOwners", "Transact"]

T = TypeVar("T")


class Transact(Protocol):
    """Run a function of the connection in one transaction (a write, or a read) and return its value."""

    def __call__(self, fn: Callable[[sqlite3.Connection], T], /) -> Awaitable[T]: ...


class FileOwners:
    """Ownership on SQLite (an :class:`~stores._owners.OwnerRows`): the lock file's liveness lock and
    the ``run_owners`` statements, written through the store's writer and read through its reader.

    ``refuse_closed`` refuses a closed store, ``ensure`` sets it up on first use.
    """

    def __init__(
        self,
        liveness: LivenessFile,
        *,
        refuse_closed: Callable[[], None],
        ensure: Callable[[], Awaitable[None]],
        read: Transact,
        write: Transact,
    ) -> None:
        self._liveness = liveness
        self._refuse_closed = refuse_closed
        self._ensure = ensure
        self._read = read
        self._write = write

    async def hold(self) -> str:
        self._refuse_closed()
        await self._ensure()
        return self._liveness.hold()

    async def take_row(self, execution_id: str, owner: str) -> bool:
        lock = self._liveness
        return await self._write(lambda c: take_row(c, execution_id, owner, lock))

    async def release_row(self, execution_id: str, owner: str) -> None:
        await self._write(lambda c: release_row(c, execution_id, owner))

    async def owned_rows(self, execution_ids: Sequence[str]) -> set[str]:
        await self.hold()
        lock = self._liveness
        return await self._read(lambda c: owned_rows(c, execution_ids, lock))

    async def expired_rows(self, limit: int) -> list[str]:
        now = ts(utcnow())
        return await self._read(lambda c: expired_rows(c, now, limit))

    async def work_rows(
        self, limit: int, full: Sequence[str], full_keys: Sequence[tuple[str, str]]
    ) -> list[Work]:
        lock = self._liveness
        return await self._read(lambda c: work_rows(c, limit, lock, full, full_keys))

    async def take_queued_row(self, execution_id: str, owner: str) -> Admission:
        lock = self._liveness
        return await self._write(lambda c: take_queued_row(c, execution_id, owner, lock))

    async def hand_off_row(
        self, execution_id: str, owner: str, queue: str, key: str | None, priority: int
    ) -> None:
        await self._write(lambda c: hand_off_row(c, execution_id, owner, queue, key, priority))

    async def declare_row(self, queue: Queue, owner: str) -> tuple[Queue | None, Queue]:
        lock = self._liveness
        return await self._write(lambda c: declare_row(c, queue, owner, lock))

    async def queue_rows(self, execution_ids: Sequence[str]) -> dict[str, tuple[str, str | None]]:
        return await self._read(lambda c: queue_rows(c, execution_ids))

    async def unowned_rows(self, execution_ids: Sequence[str]) -> set[str]:
        return await self._read(lambda c: unowned_rows(c, execution_ids))

    async def ownership_rows(self, execution_ids: Sequence[str]) -> tuple[set[str], set[str]]:
        await self.hold()
        lock = self._liveness
        return await self._read(
            lambda c: (owned_rows(c, execution_ids, lock), unowned_rows(c, execution_ids))
        )

    def probe(self) -> None:
        self._liveness.probe()
