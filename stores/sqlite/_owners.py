"""The ownership hooks of :class:`~stores.SQLiteStore` (the shared half is ``stores._owners``): each
runs one of :mod:`stores.sqlite._locks`' functions in a write or a read transaction."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from .._model import utcnow
from .._owners import Op
from .._queues import Admission, Queue, Work
from ._locks import (
    LivenessFile,
    expired_rows,
    owned_rows,
    release_row,
    ride,
    take_row,
    unowned_rows,
)
from ._queues import declare_row, hand_off_row, queue_rows, take_queued_row, work_rows
from ._rows import ts

__all__ = ["FileOwners"]

T = TypeVar("T")


class FileOwners:
    """The dialect of ownership on SQLite (a mixin of the store, before ``BaseStore``)."""

    _liveness: LivenessFile

    if TYPE_CHECKING:

        def _refuse_closed(self) -> None: ...

        async def _ensure(self) -> None: ...

        async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...

        async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...

    async def _hold(self) -> str:
        self._refuse_closed()
        await self._ensure()
        return self._liveness.hold()

    async def _take_row(self, execution_id: str, owner: str) -> bool:
        lock = self._liveness
        return await self._write(lambda c: take_row(c, execution_id, owner, lock))

    async def _release_row(self, execution_id: str, owner: str) -> None:
        await self._write(lambda c: release_row(c, execution_id, owner))

    async def _owned_rows(self, execution_ids: Sequence[str]) -> set[str]:
        await self._hold()
        lock = self._liveness
        return await self._read(lambda c: owned_rows(c, execution_ids, lock))

    async def _expired_rows(self, limit: int) -> list[str]:
        now = ts(utcnow())
        return await self._read(lambda c: expired_rows(c, now, limit))

    async def _work_rows(
        self, limit: int, full: Sequence[str], full_keys: Sequence[tuple[str, str]]
    ) -> list[Work]:
        lock = self._liveness
        return await self._read(lambda c: work_rows(c, limit, lock, full, full_keys))

    async def _take_queued_row(self, execution_id: str, owner: str) -> Admission:
        lock = self._liveness
        return await self._write(lambda c: take_queued_row(c, execution_id, owner, lock))

    async def _hand_off_row(
        self, execution_id: str, owner: str, queue: str, key: str | None, priority: int
    ) -> None:
        await self._write(lambda c: hand_off_row(c, execution_id, owner, queue, key, priority))

    async def _declare_row(self, queue: Queue, owner: str) -> tuple[Queue | None, Queue]:
        lock = self._liveness
        return await self._write(lambda c: declare_row(c, queue, owner, lock))

    async def _queue_rows(self, execution_ids: Sequence[str]) -> dict[str, tuple[str, str | None]]:
        return await self._read(lambda c: queue_rows(c, execution_ids))

    async def _unowned_rows(self, execution_ids: Sequence[str]) -> set[str]:
        return await self._read(lambda c: unowned_rows(c, execution_ids))

    async def _ownership_rows(self, execution_ids: Sequence[str]) -> tuple[set[str], set[str]]:
        await self._hold()
        lock = self._liveness
        return await self._read(
            lambda c: (owned_rows(c, execution_ids, lock), unowned_rows(c, execution_ids))
        )

    def _probe(self) -> None:
        self._liveness.probe()

    _rides = True

    def _ride(self, execution_id: str, op: Op, take: str | None, release: str | None) -> Op:
        return ride(op, execution_id, take, release, self._liveness)
