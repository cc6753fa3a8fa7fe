"""The SQLite half of schedules (see :mod:`stores._schedules`): the rows and the tick's
compare-and-set."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

from .._json import decode, encode
from .._schedules import StoredSchedule, schedule_sql
from ._rows import dt, ts
from ._writer import Connections

__all__ = ["Schedules"]

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
    """The schedules of :class:`~stores.SQLiteStore`, read and written through its connections."""

    def __init__(self, db: Connections) -> None:
        self._db = db

    async def put_schedule(self, schedule: StoredSchedule) -> None:
        """Insert or update a schedule by name (see :meth:`Store.put_schedule`)."""
        s = schedule
        args = (s.name, s.runner, encode(s.input, path="$.input"), s.cron, s.every, ts(s.next_at))
        await self._db.write(lambda conn: conn.execute(_SQL["put"], args).rowcount)

    async def delete_schedule(self, name: str) -> bool:
        """Delete a schedule; whether there was one."""
        return bool(await self._db.write(lambda conn: conn.execute(_SQL["delete"], (name,)).rowcount))

    async def list_schedules(self) -> list[StoredSchedule]:
        """Every schedule, by name."""
        return await self._db.read(lambda conn: [_schedule(found) for found in conn.execute(_SQL["all"])])

    async def due_schedules(self, now: datetime, limit: int) -> list[StoredSchedule]:
        """The schedules whose next tick is at or before ``now``, the earliest first."""
        args = (ts(now), limit)
        return await self._db.read(
            lambda conn: [_schedule(found) for found in conn.execute(_SQL["due"], args)]
        )

    async def advance_schedule(self, name: str, seen: datetime, next_at: datetime, last_run: str) -> bool:
        """Move the schedule's next tick from ``seen`` to ``next_at`` (compare-and-set)."""
        args = (name, ts(seen), ts(next_at), last_run)
        return bool(await self._db.write(lambda conn: conn.execute(_SQL["advance"], args).rowcount))
