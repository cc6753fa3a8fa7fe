"""What the halves of :class:`~stores.PostgresStore` (its mixins: appends, inbox, outbox,
schedules, ownership) use of the store itself, declared once for the type checker; the store
defines each of them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

import asyncpg

from .._base import Plan
from .._model import Checkpoint
from ._owners import LockOwners

__all__ = ["StoreHalf"]

T = TypeVar("T")


class StoreHalf:
    """A half of :class:`~stores.PostgresStore`: the store's pool, its outage guard and its writes."""

    _owner_rows: LockOwners

    if TYPE_CHECKING:

        def _ready(self) -> Awaitable[asyncpg.Pool]: ...

        def _lost(self) -> AbstractContextManager[None]: ...

        async def _owning(
            self, execution_id: str, resting: bool, write: Callable[[str | None, str | None], Awaitable[T]]
        ) -> T: ...

        async def _write_planned(
            self,
            kind: str,
            row: Checkpoint,
            plan: Plan | None,
            extra: tuple[Any, ...],
            via: asyncpg.pool.PoolConnectionProxy | None = None,
        ) -> None: ...
