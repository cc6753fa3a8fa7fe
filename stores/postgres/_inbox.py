"""The PostgreSQL half of a run's inbox (see :mod:`stores._signals`): sending a signal (one
statement: the refusal read, the insert and the notice), reading a run's signals, and writing a row
that consumes some (its own statement, outside the group commit: such rows are rare)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncpg

from .._errors import check_execution_id, signals_taken
from .._model import Checkpoint, new_id, utcnow
from .._owners import Ownership
from .._signals import CONSUMES, StoredSignal, check_signal, payload_of, refuse_signal
from ._connection import advisory_key
from ._owners import LockOwners
from ._writer import WritePlanned, WriterPool

__all__ = ["Inbox", "consumed_elsewhere", "consumes_of", "entry_of"]


class Inbox:
    """The inbox of :class:`~stores.PostgresStore`, on the pool of its :class:`WriterPool`. A ``wait``
    row is written by ``write_planned``, the store's single-row write, carrying its run's ownership
    (``own``, and ``owner_rows``' ride)."""

    def __init__(
        self,
        db: WriterPool,
        *,
        sql: dict[str, str],
        schema: str,
        own: Ownership,
        owner_rows: LockOwners,
        write_planned: WritePlanned,
    ) -> None:
        self._db = db
        self._sql = sql
        self._schema = schema
        self._own = own
        self._owner_rows = owner_rows
        self._write_planned = write_planned

    async def signal(self, execution_id: str, name: str, payload: Any = None) -> int:
        """Append a signal to the run's inbox (see :meth:`Store.signal`); its inbox id. Serialised
        with the run's ``wait`` rows by a transaction lock on the run, so a wait written meanwhile
        either sees the signal or is marked due by it (no lost wake)."""
        body = check_signal(execution_id, name, payload)
        pool = await self._db.ready()
        with self._db.lost():
            async with pool.acquire() as conn, conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock($1)", self._wait_key(execution_id))
                rec = await conn.fetchrow(self._sql["signal"], execution_id, name, body, utcnow(), new_id())
        assert rec is not None
        refuse_signal(execution_id, None if rec["step_type"] is None else (rec["step_type"], rec["status"]))
        return int(rec["id"])

    async def signals(
        self, execution_id: str, *, name: str | None = None, consumed_by: int | None = None
    ) -> list[StoredSignal]:
        """The run's unconsumed signals, oldest first, or those the row at ``consumed_by`` consumed."""
        check_execution_id(execution_id)
        pool = await self._db.ready()
        with self._db.lost():
            if consumed_by is None:
                recs = await pool.fetch(self._sql["signals_open"], execution_id, name)
            else:
                recs = await pool.fetch(self._sql["signals_by"], execution_id, name, consumed_by)
        return [entry_of(rec) for rec in recs]

    def _wait_key(self, execution_id: str) -> int:
        """The transaction lock that orders a run's signals and its ``wait`` rows."""
        return advisory_key(self._schema, "\x00wait:" + execution_id)

    async def append_wait(self, row: Checkpoint, name: str | None, wake_at: datetime | None) -> None:
        """Append a ``wait`` row, resting the run (see :meth:`Store.append_wait`)."""
        eid = row.execution_id
        self._own.check(eid)

        async def write(take: str | None, release: str | None) -> None:
            extra = (name, wake_at, release, utcnow())

            async def write_in(via: asyncpg.pool.PoolConnectionProxy | None) -> None:
                if via is not None:
                    await via.execute("SELECT pg_advisory_xact_lock($1)", self._wait_key(eid))
                    return await self._write_planned("wait", row, None, extra, via=via)
                pool = await self._db.ready()
                with self._db.lost():
                    async with pool.acquire() as conn, conn.transaction():
                        await conn.execute("SELECT pg_advisory_xact_lock($1)", self._wait_key(eid))
                        await self._write_planned("wait", row, None, extra, via=conn)

            await self._owner_rows.ride(eid, take, write_in)

        await self._own.carrying(eid, True, write)

    async def due_waits(self, limit: int) -> list[tuple[str, int]]:
        """Resting runs due for a wake (see :meth:`Store.due_waits`): one range of an index."""
        pool = await self._db.ready()
        with self._db.lost():
            recs = await pool.fetch(self._sql["due_waits"], utcnow(), limit)
        return [(rec[0], rec[1]) for rec in recs]

    async def next_wake(self, after: datetime | None = None) -> datetime | None:
        """The earliest wake time of a resting run, or the earliest later than ``after`` (see
        :meth:`Store.next_wake`)."""
        pool = await self._db.ready()
        with self._db.lost():
            if after is None:
                found: datetime | None = await pool.fetchval(self._sql["next_wake"])
            else:
                found = await pool.fetchval(self._sql["next_wake_after"], after)
        return found

    async def settle_wait(self, execution_id: str, seq: int) -> None:
        """Forget the wait of the run at ``seq`` (woken, or no longer the run's newest row)."""
        pool = await self._db.ready()
        with self._db.lost():
            await pool.execute(self._sql["settle_wait"], execution_id, seq)

    async def steering_waits(self, execution_id: str) -> bool:
        """Whether ``"message"`` signals wait for the run (read only when a turn's row was refused)."""
        pool = await self._db.ready()
        with self._db.lost():
            return bool(await pool.fetchval(self._sql["signals_waiting"], execution_id))


def entry_of(rec: Any) -> StoredSignal:
    """The :class:`~stores.StoredSignal` of a record of ``SIGNAL_COLUMNS``."""
    return StoredSignal(
        id=rec[0],
        execution_id=rec[1],
        name=rec[2],
        payload=payload_of(rec[3]),
        created_at=rec[4],
        consumed_seq=rec[5],
        signal_id=rec[6],
    )


def consumes_of(row: Checkpoint) -> list[int] | None:
    """The inbox ids ``row`` consumes (its ``node_input`` says), or ``None``."""
    found = row.node_input.get(CONSUMES)
    if isinstance(found, list) and found and all(type(i) is int for i in found):
        return found
    return None


def consumed_elsewhere(row: Checkpoint) -> Exception:
    """The refusal of a consuming row whose signals another row consumed."""
    return signals_taken(row.execution_id, row.seq)
