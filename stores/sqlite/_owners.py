"""The ownership hooks of :class:`~stores.SQLiteStore` (the shared half is ``stores._owners``): each
runs one of :mod:`stores.sqlite._locks`' functions in a write or a read transaction."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from .._model import utcnow
from .._owners import Op
from ._locks import (
    LivenessFile,
    expired_rows,
    orphan_rows,
    owned_rows,
    release_row,
    ride,
    take_row,
    unowned_rows,
)
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

    async def _orphan_rows(self, limit: int) -> list[str]:
        lock = self._liveness
        return await self._read(lambda c: orphan_rows(c, limit, lock))

    async def _unowned_rows(self, execution_ids: Sequence[str]) -> set[str]:
        return await self._read(lambda c: unowned_rows(c, execution_ids))

    def _probe(self) -> None:
        self._liveness.probe()

    _rides = True

    def _ride(self, execution_id: str, op: Op, take: str | None, release: str | None) -> Op:
        return ride(op, execution_id, take, release, self._liveness)
