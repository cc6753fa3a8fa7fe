"""The SQLite half of replication: the rows' outbox (unsynced rows, marking them sent or quarantined,
importing restored rows), the cache entries' outbox, the inbox entries' outbox, the memory of having
been attached to a replicator, a run's cache and inbox entries (the plane's reads), copies of inbox
entries (the plane's writes), and importing a restored run (rows, cache entries, pending row, its
unconsumed signals and the wait it rests at) in one write transaction."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import TypeVar

from .._codec import MessageLogs, StoredRow, encode_cache_value, encode_pending
from .._errors import run_exists
from .._json import decode
from .._model import CacheEntry, Checkpoint, PendingInterrupt, utcnow
from .._signals import StoredSignal, check_copies, check_copy, merge_copies, restored_wait
from ._inbox import SIGNAL_COLUMNS, entry_of
from ._insert import insert_row
from ._rows import PENDING_COLUMNS, ROW_COLUMNS, Ctx, dt, raise_outbox_mark, rows_where, ts
from ._writer import Connections

__all__ = ["Replica"]

T = TypeVar("T")


class Replica:
    """The replication side of :class:`~stores.SQLiteStore`, read and written through its connections;
    ``logs`` is the store's memory of the message logs (an import plans its rows with it)."""

    def __init__(self, db: Connections, logs: MessageLogs) -> None:
        self._db = db
        self._logs = logs

    async def fetch_unsynced(self, limit: int) -> list[Checkpoint]:
        """Rows not yet shipped, oldest write first."""
        return await self._db.read(
            lambda conn: rows_where(
                conn, Ctx(), "id >= (SELECT low FROM outbox) AND synced = 0 ORDER BY id LIMIT ?", (limit,)
            )
        )

    async def mark_synced(self, checkpoint_ids: Sequence[str]) -> None:
        """Mark rows shipped (idempotent; an empty request is a no-op)."""
        if not checkpoint_ids:
            return
        ids = [(cid,) for cid in checkpoint_ids]
        await self._mark_sent("UPDATE checkpoints SET synced = 1 WHERE checkpoint_id = ?", ids)

    async def mark_quarantined(self, reasons: dict[str, str]) -> None:
        """Mark poison rows: never re-sent, the reason kept (idempotent; last reason wins)."""
        if not reasons:
            return
        pairs = [(reason, cid) for cid, reason in reasons.items()]
        await self._mark_sent(
            "UPDATE checkpoints SET synced = 1, sync_error = ? WHERE checkpoint_id = ?", pairs
        )

    async def _mark_sent(self, update: str, params: Sequence[tuple[str, ...]]) -> None:
        """Run ``update`` for each of ``params`` and move the outbox mark past the rows it sent."""

        def run(conn: sqlite3.Connection) -> None:
            conn.executemany(update, params)
            raise_outbox_mark(conn)

        await self._db.write(run)

    async def sync_state(self, checkpoint_id: str) -> tuple[bool, str | None] | None:
        """``(synced, sync_error)`` of a row, or ``None``."""

        def run(conn: sqlite3.Connection) -> tuple[bool, str | None] | None:
            found = conn.execute(
                "SELECT synced, sync_error FROM checkpoints WHERE checkpoint_id = ?", (checkpoint_id,)
            ).fetchone()
            return None if found is None else (bool(found[0]), found[1])

        return await self._db.read(run)

    async def import_rows(self, rows: Sequence[Checkpoint]) -> int:
        """Insert rows restored from the plane as already synced; existing ids are skipped."""
        if not rows:
            return 0
        ids = [row.checkpoint_id for row in rows]

        def existing(conn: sqlite3.Connection) -> set[str]:
            found: set[str] = set()
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                marks = ", ".join("?" * len(chunk))
                cursor = conn.execute(
                    f"SELECT checkpoint_id FROM checkpoints WHERE checkpoint_id IN ({marks})", chunk
                )
                found.update(cid for (cid,) in cursor)
            return found

        skip = await self._db.read(existing)
        fresh = sorted(
            (row for row in rows if row.checkpoint_id not in skip), key=lambda r: (r.execution_id, r.seq)
        )
        runs = {row.execution_id for row in fresh}
        for eid in runs:
            self._logs.forget(eid)
        try:
            planned = [self._logs.plan(row) for row in fresh]

            def run(conn: sqlite3.Connection) -> int:
                inserted = 0
                for plan in planned:
                    if conn.execute(
                        "SELECT 1 FROM checkpoints WHERE checkpoint_id = ?", (plan[0].checkpoint_id,)
                    ).fetchone():
                        continue
                    insert_row(conn, plan, synced=1)
                    inserted += 1
                return inserted

            return await self._db.write(run)
        finally:
            for eid in runs:
                self._logs.forget(eid)

    async def cache_entries(self, execution_id: str) -> list[CacheEntry]:
        """Every cache entry of the run, oldest first."""

        def run(conn: sqlite3.Connection) -> list[CacheEntry]:
            cursor = conn.execute(
                "SELECT key, value, created_at FROM idempotency_cache WHERE execution_id = ? "
                "ORDER BY created_at, key",
                (execution_id,),
            )
            return [
                CacheEntry(execution_id=execution_id, key=key, value=decode(value), created_at=dt(created))
                for key, value, created in cursor
            ]

        return await self._db.read(run)

    async def fetch_unsynced_stored(self, limit: int) -> list[tuple[StoredRow, bytes | None]]:
        """Unsynced rows as stored (columns and the messages each adds), oldest write first."""

        def run(conn: sqlite3.Connection) -> list[tuple[StoredRow, bytes | None]]:
            cursor = conn.execute(
                f"SELECT {ROW_COLUMNS}, new_messages FROM checkpoints "
                "WHERE id >= (SELECT low FROM outbox) AND synced = 0 ORDER BY id LIMIT ?",
                (limit,),
            )
            return [
                (
                    StoredRow._make([*found[:17], dt(found[17])]),
                    None if found[18] is None else bytes(found[18]),
                )
                for found in cursor
            ]

        return await self._db.read(run)

    async def fetch_unsynced_cache(self, limit: int) -> list[CacheEntry]:
        """Cache entries not yet shipped, oldest first."""

        def run(conn: sqlite3.Connection) -> list[CacheEntry]:
            cursor = conn.execute(
                "SELECT execution_id, key, value, created_at FROM idempotency_cache WHERE synced = 0 "
                "ORDER BY created_at, execution_id, key LIMIT ?",
                (limit,),
            )
            return [
                CacheEntry(execution_id=eid, key=key, value=decode(value), created_at=dt(created))
                for eid, key, value, created in cursor
            ]

        return await self._db.read(run)

    async def mark_cache_synced(self, keys: Sequence[tuple[str, str]]) -> None:
        """Mark cache entries ``(execution_id, key)`` shipped (idempotent; empty is a no-op)."""
        if not keys:
            return
        pairs = list(keys)
        await self._db.write(
            lambda conn: conn.executemany(
                "UPDATE idempotency_cache SET synced = 1 WHERE execution_id = ? AND key = ?", pairs
            )
        )

    async def attach_replica(self) -> None:
        """Remember, for good, that a replicator serves this store: prune keeps what is unsent."""

        def run(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO replica (attached_at) SELECT ? WHERE NOT EXISTS (SELECT 1 FROM replica)",
                (ts(utcnow()),),
            )

        await self._db.write(run)

    async def import_run(
        self,
        execution_id: str,
        rows: Sequence[Checkpoint],
        cache: Sequence[CacheEntry],
        pending: PendingInterrupt | None,
        signals: Sequence[StoredSignal] = (),
    ) -> int:
        """Import a restored run in one transaction (see :meth:`ReplicatedStore.import_run`)."""
        ordered = sorted(rows, key=lambda r: r.seq)
        values = [(e.key, encode_cache_value(execution_id, e.key, e.value), ts(e.created_at)) for e in cache]
        inbox = [
            (execution_id, e.name, check_copy(e, execution_id), ts(e.created_at), e.signal_id)
            for e in signals
        ]
        rest = restored_wait(ordered[-1] if ordered else None, (e.name for e in signals), utcnow())
        waits = None if rest is None else (execution_id, ordered[-1].seq, rest[0], _ts_or_none(rest[1]))
        pend = None
        if pending is not None:
            pend = (
                execution_id,
                pending.reason,
                encode_pending(pending),
                pending.node_id,
                pending.agent_path,
                ts(pending.created_at),
                None if pending.expires_at is None else ts(pending.expires_at),
            )
        self._logs.forget(execution_id)
        try:
            plans = [self._logs.plan(row) for row in ordered]

            def run(conn: sqlite3.Connection) -> int:
                if conn.execute(
                    "SELECT 1 FROM checkpoints WHERE execution_id = ? LIMIT 1", (execution_id,)
                ).fetchone():
                    raise run_exists(execution_id)
                for plan in plans:
                    insert_row(conn, plan, synced=1)
                conn.executemany(
                    "INSERT INTO idempotency_cache (execution_id, key, value, created_at, synced) "
                    "VALUES (?, ?, ?, ?, 1) "
                    "ON CONFLICT (execution_id, key) DO NOTHING",
                    [(execution_id, *v) for v in values],
                )
                if pend is not None:
                    conn.execute(
                        f"INSERT INTO pending_interrupts ({PENDING_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                        pend,
                    )
                conn.executemany(  # in order: each gets this store's next id
                    "INSERT INTO signals (execution_id, name, payload, created_at, signal_id, synced) "
                    "VALUES (?, ?, ?, ?, ?, 1) ON CONFLICT (signal_id) DO NOTHING",
                    inbox,
                )
                if waits is not None:
                    conn.execute(
                        "INSERT INTO run_waits (execution_id, seq, name, wake_at) VALUES (?, ?, ?, ?) "
                        "ON CONFLICT (execution_id) DO UPDATE SET seq = excluded.seq, name = excluded.name, "
                        "wake_at = excluded.wake_at",
                        waits,
                    )
                return len(plans)

            return await self._db.write(run)
        finally:
            self._logs.forget(execution_id)

    # -- the inbox entries' outbox -----------------------------------------------------------------

    async def fetch_unsynced_signals(self, limit: int) -> list[StoredSignal]:
        """Inbox entries whose state the plane has not accepted, oldest first (a partial index)."""
        return await self._db.read(
            lambda conn: [
                entry_of(found)
                for found in conn.execute(
                    f"SELECT {SIGNAL_COLUMNS} FROM signals WHERE synced = 0 ORDER BY id LIMIT ?", (limit,)
                )
            ]
        )

    async def mark_signals_synced(self, entries: Sequence[StoredSignal]) -> None:
        """Mark inbox entries shipped, each if its state is still the one shipped."""
        if entries:
            await self._mark_signals([(None, e.signal_id, e.consumed_seq) for e in entries])

    async def mark_signals_quarantined(self, refused: Sequence[tuple[StoredSignal, str]]) -> None:
        """Mark poison inbox entries with their reason, each if its state is still the one refused."""
        if refused:
            await self._mark_signals([(reason, e.signal_id, e.consumed_seq) for e, reason in refused])

    async def _mark_signals(self, params: Sequence[tuple[str | None, str, int | None]]) -> None:
        """Mark entries sent (``sync_error`` the reason, or ``NULL``): a compare-and-set on the
        state sent, so a consumption committed meanwhile stays to send."""
        await self._db.write(
            lambda conn: conn.executemany(
                "UPDATE signals SET synced = 1, sync_error = ? WHERE signal_id = ? AND consumed_seq IS ?",
                params,
            )
        )

    async def signal_sync_state(self, signal_id: str) -> tuple[bool, str | None] | None:
        """``(synced, sync_error)`` of an inbox entry, or ``None``."""

        def run(conn: sqlite3.Connection) -> tuple[bool, str | None] | None:
            found = conn.execute(
                "SELECT synced, sync_error FROM signals WHERE signal_id = ?", (signal_id,)
            ).fetchone()
            return None if found is None else (bool(found[0]), found[1])

        return await self._db.read(run)

    async def signal_entries(self, execution_id: str) -> list[StoredSignal]:
        """Every inbox entry of the run, consumed or not, oldest first."""
        return await self._db.read(
            lambda conn: [
                entry_of(found)
                for found in conn.execute(
                    f"SELECT {SIGNAL_COLUMNS} FROM signals WHERE execution_id = ? ORDER BY id",
                    (execution_id,),
                )
            ]
        )

    async def copy_signals(self, entries: Sequence[StoredSignal]) -> dict[str, str]:
        """Store copies of inbox entries held elsewhere, merged by ``signal_id`` (see
        :meth:`ReplicatedStore.copy_signals`), in one write transaction."""
        checked, refused = check_copies(entries)
        if not checked:
            return refused
        ids = list({e.signal_id for e, _ in checked})

        def run(conn: sqlite3.Connection) -> dict[str, str]:
            held: dict[str, StoredSignal] = {}
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                cursor = conn.execute(
                    f"SELECT {SIGNAL_COLUMNS} FROM signals WHERE signal_id IN ({', '.join('?' * len(chunk))})",
                    chunk,
                )
                held.update((found[6], entry_of(found)) for found in cursor)
            fresh, consumed, contradicting = merge_copies(held, checked)
            conn.executemany(
                "INSERT INTO signals (execution_id, name, payload, created_at, consumed_seq, signal_id) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (e.execution_id, e.name, body, ts(e.created_at), e.consumed_seq, e.signal_id)
                    for e, body in fresh
                ],
            )
            conn.executemany(
                "UPDATE signals SET consumed_seq = ?, synced = 0 WHERE signal_id = ?",
                [(e.consumed_seq, e.signal_id) for e in consumed],
            )
            return contradicting

        refused.update(await self._db.write(run))
        return refused


def _ts_or_none(value: datetime | None) -> str | None:
    return None if value is None else ts(value)
