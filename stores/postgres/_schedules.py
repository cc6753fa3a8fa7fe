"""The PostgreSQL half of schedules (see :mod:`stores._schedules`): the rows and the tick's
compare-and-set."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .._json import decode, encode
from .._schedules import StoredSchedule, schedule_sql
from ._writer import WriterPool

__all__ = ["Schedules"]


def _schedule(rec: Any) -> StoredSchedule:
    return StoredSchedule(
        name=rec[0],
        runner=rec[1],
        input=decode(rec[2]),
        cron=rec[3],
        every=rec[4],
        next_at=rec[5],
        last_run=rec[6],
    )


class Schedules:
    """The schedules of :class:`~stores.PostgresStore`, on the pool of its :class:`WriterPool`."""

    def __init__(self, db: WriterPool, schema: str) -> None:
        self._db = db
        self._sql = schedule_sql(f'"{schema}".schedules', lambda n: f"${n}")

    async def put_schedule(self, schedule: StoredSchedule) -> None:
        """Insert or update a schedule by name (see :meth:`Store.put_schedule`)."""
        s = schedule
        body = encode(s.input, path="$.input")
        pool = await self._db.ready()
        with self._db.lost():
            await pool.execute(self._sql["put"], s.name, s.runner, body, s.cron, s.every, s.next_at)

    async def delete_schedule(self, name: str) -> bool:
        """Delete a schedule; whether there was one."""
        pool = await self._db.ready()
        with self._db.lost():
            done = await pool.execute(self._sql["delete"], name)
        return bool(done.endswith(" 1"))

    async def list_schedules(self) -> list[StoredSchedule]:
        """Every schedule, by name."""
        pool = await self._db.ready()
        with self._db.lost():
            return [_schedule(rec) for rec in await pool.fetch(self._sql["all"])]

    async def due_schedules(self, now: datetime, limit: int) -> list[StoredSchedule]:
        """The schedules whose next tick is at or before ``now``, the earliest first."""
        pool = await self._db.ready()
        with self._db.lost():
            return [_schedule(rec) for rec in await pool.fetch(self._sql["due"], now, limit)]

    async def advance_schedule(self, name: str, seen: datetime, next_at: datetime, last_run: str) -> bool:
        """Move the schedule's next tick from ``seen`` to ``next_at`` (compare-and-set)."""
        pool = await self._db.ready()
        with self._db.lost():
            done = await pool.execute(self._sql["advance"], name, seen, next_at, last_run)
        return bool(done.endswith(" 1"))
