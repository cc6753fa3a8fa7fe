"""The SQLite half of a run's inbox (see :mod:`stores._signals`): sending a signal, reading the
unconsumed ones, and the waits of resting runs. The guard a row's transaction runs when it reads or
consumes the inbox is :func:`stores.sqlite._insert.inbox_guard`."""

from __future__ import annotations

import sqlite3
from datetime import datetime
from typing import Any, Final

from .._base import Plan
from .._errors import check_execution_id
from .._model import Checkpoint, new_id, utcnow
from .._signals import StoredSignal, check_signal, payload_of, refuse_signal
from ._insert import WriteRow, insert_row
from ._rows import dt, ts
from ._writer import Connections

__all__ = ["SIGNAL_COLUMNS", "Inbox", "entry_of"]

#: The columns of an inbox entry, in the order :func:`entry_of` reads them.
SIGNAL_COLUMNS: Final = "id, execution_id, name, payload, created_at, consumed_seq, signal_id"


def entry_of(found: tuple[Any, ...]) -> StoredSignal:
    """The :class:`~stores.StoredSignal` of a row of ``SIGNAL_COLUMNS``."""
    return StoredSignal(
        id=found[0],
        execution_id=found[1],
        name=found[2],
        payload=payload_of(found[3]),
        created_at=dt(found[4]),
        consumed_seq=found[5],
        signal_id=found[6],
    )


def _inbox_where(execution_id: str, name: str | None, consumed_by: int | None) -> tuple[str, tuple[Any, ...]]:
    """The condition of a read of the run's inbox (unconsumed, or consumed by one row)."""
    where = "execution_id = ?"
    args: list[Any] = [execution_id]
    where += " AND consumed_seq IS NULL" if consumed_by is None else " AND consumed_seq = ?"
    if consumed_by is not None:
        args.append(consumed_by)
    if name is not None:
        where += " AND name = ?"
        args.append(name)
    return where, tuple(args)


class Inbox:
    """The inbox of :class:`~stores.SQLiteStore`: its reads and writes go through the store's
    :class:`~stores.sqlite._writer.Connections`; a ``wait`` row goes through ``write_row``, the
    store's write of a planned row with its run's ownership riding in the transaction."""

    def __init__(self, db: Connections, write_row: WriteRow) -> None:
        self._db = db
        self._write_row = write_row

    async def signal(self, execution_id: str, name: str, payload: Any = None) -> int:
        """Append a signal to the run's inbox in one transaction; its inbox id (see
        :meth:`Store.signal`)."""
        body = check_signal(execution_id, name, payload)
        now = ts(utcnow())
        await self._db.ensure()

        def run(conn: sqlite3.Connection) -> int:
            newest = conn.execute(
                "SELECT step_type, status FROM checkpoints WHERE execution_id = ? ORDER BY seq DESC LIMIT 1",
                (execution_id,),
            ).fetchone()
            refuse_signal(execution_id, None if newest is None else (newest[0], newest[1]))
            found = conn.execute(
                "INSERT INTO signals (execution_id, name, payload, created_at, signal_id) "
                "VALUES (?, ?, ?, ?, ?) RETURNING id",
                (execution_id, name, body, now, new_id()),
            ).fetchone()
            conn.execute(
                "UPDATE run_waits SET wake_at = ? WHERE execution_id = ? AND name = ? "
                "AND (wake_at IS NULL OR wake_at > ?)",
                (now, execution_id, name, now),
            )
            return int(found[0])

        return await self._db.write(run)

    async def signals(
        self, execution_id: str, *, name: str | None = None, consumed_by: int | None = None
    ) -> list[StoredSignal]:
        """The run's unconsumed signals, oldest first (of ``name`` only, if given), or with
        ``consumed_by`` those the row at that ``seq`` consumed (see :meth:`Store.signals`)."""
        check_execution_id(execution_id)
        where, args = _inbox_where(execution_id, name, consumed_by)

        def run(conn: sqlite3.Connection) -> list[StoredSignal]:
            return [
                entry_of(found)
                for found in conn.execute(
                    f"SELECT {SIGNAL_COLUMNS} FROM signals WHERE {where} ORDER BY id", args
                )
            ]

        return await self._db.read(run)

    async def append_wait(self, row: Checkpoint, name: str | None, wake_at: datetime | None) -> None:
        """Append a ``wait`` row, resting the run (see :meth:`Store.append_wait`)."""
        eid = row.execution_id
        deadline = None if wake_at is None else ts(wake_at)

        def op(conn: sqlite3.Connection, plan: Plan) -> None:
            insert_row(conn, plan)
            due = deadline
            if (
                name is not None
                and conn.execute(
                    "SELECT 1 FROM signals WHERE execution_id = ? AND name = ? AND consumed_seq IS NULL LIMIT 1",
                    (eid, name),
                ).fetchone()
            ):
                due = ts(utcnow())  # its signal is there already: due at once
            conn.execute(
                "INSERT INTO run_waits (execution_id, seq, name, wake_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (execution_id) DO UPDATE SET seq = excluded.seq, name = excluded.name, "
                "wake_at = excluded.wake_at",
                (eid, row.seq, name, due),
            )

        await self._db.ensure()
        await self._write_row(row, True, op)

    async def due_waits(self, limit: int) -> list[tuple[str, int]]:
        """Resting runs due for a wake (see :meth:`Store.due_waits`): one range of an index."""
        now = ts(utcnow())
        return await self._db.read(
            lambda conn: [
                (found[0], found[1])
                for found in conn.execute(
                    "SELECT execution_id, seq FROM run_waits WHERE wake_at <= ? ORDER BY wake_at LIMIT ?",
                    (now, limit),
                )
            ]
        )

    async def next_wake(self, after: datetime | None = None) -> datetime | None:
        """The earliest wake time of a resting run, or the earliest later than ``after`` (see
        :meth:`Store.next_wake`)."""
        sql, args = "SELECT min(wake_at) FROM run_waits WHERE wake_at IS NOT NULL", tuple[str, ...]()
        if after is not None:
            sql, args = "SELECT min(wake_at) FROM run_waits WHERE wake_at > ?", (ts(after),)
        found = await self._db.read(lambda conn: conn.execute(sql, args).fetchone())
        return None if found is None or found[0] is None else dt(found[0])

    async def settle_wait(self, execution_id: str, seq: int) -> None:
        """Forget the wait of the run at ``seq`` (woken, or no longer the run's newest row)."""
        await self._db.write(
            lambda conn: (
                conn.execute(
                    "DELETE FROM run_waits WHERE execution_id = ? AND seq = ?", (execution_id, seq)
                ).rowcount
            )
        )
