"""The SQLite half of schedules (see :mod:`stores._schedules`): the rows and the tick's
compare-and-set."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, TypeVar

from .._json import decode, encode
from .._schedules import StoredSchedule, schedule_sql
from ._rows import dt, ts

__all__ = ["Schedules"]

T = TypeVar("T")
_SQL: Final = schedule_sql("schedules", lambda n: f"?{n}")


def _schedule(found: Any) -> StoredSchedule:
    return StoredSchedule(
        name=found[0],
        runner=found[1],
        input=decode(found[2]),
        cron=found[3],
        every=found[4],
        next_at=dt(found[5]),
        last_run=found[6],
    )


class Schedules:
    """The schedule methods of :class:`~stores.SQLiteStore` (the store provides the hooks)."""

    if TYPE_CHECKING:  # the store's own, first in its bases

        def _read(self, fn: Callable[[sqlite3.Connection], T]) -> Awaitable[T]: ...

        def _write(self, fn: Callable[[sqlite3.Connection], T]) -> Awaitable[T]: ...

    async def put_schedule(self, schedule: StoredSchedule) -> None:
        """Insert or update a schedule by name (see :meth:`Store.put_schedule`)."""
        s = schedule
        args = (s.name, s.runner, encode(s.input, path="$.input"), s.cron, s.every, ts(s.next_at))
        await self._write(lambda conn: conn.execute(_SQL["put"], args).rowcount)

    async def delete_schedule(self, name: str) -> bool:
        """Delete a schedule; whether there was one."""
        return bool(await self._write(lambda conn: conn.execute(_SQL["delete"], (name,)).rowcount))

    async def list_schedules(self) -> list[StoredSchedule]:
        """Every schedule, by name."""
        return await self._read(lambda conn: [_schedule(found) for found in conn.execute(_SQL["all"])])

    async def due_schedules(self, now: datetime, limit: int) -> list[StoredSchedule]:
        """The schedules whose next tick is at or before ``now``, the earliest first."""
        args = (ts(now), limit)
        return await self._read(lambda conn: [_schedule(found) for found in conn.execute(_SQL["due"], args)])

    async def advance_schedule(self, name: str, seen: datetime, next_at: datetime, last_run: str) -> bool:
        """Move the schedule's next tick from ``seen`` to ``next_at`` (compare-and-set)."""
        args = (name, ts(seen), ts(next_at), last_run)
        return bool(await self._write(lambda conn: conn.execute(_SQL["advance"], args).rowcount))
