"""The PostgreSQL outbox: what the replicator reads and marks (:class:`~stores.ReplicatedStore`).

Unsynced rows, cache entries and inbox entries are found through partial indexes (``WHERE NOT
synced``); marking is one statement. Also the plane's side: a run's cache and inbox entries, and
copies of inbox entries held elsewhere; and a restored run's import, in one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from .._base import Plan
from .._codec import MessageLogs, StoredRow, encode_cache_value, encode_pending
from .._errors import run_exists
from .._json import decode
from .._model import CacheEntry, Checkpoint, PendingInterrupt, utcnow
from .._signals import StoredSignal, check_copies, check_copy, merge_copies, restored_wait
from ._inbox import entry_of
from ._rows import args, conflict, decode_many
from ._writer import WriterPool

__all__ = ["Outbox"]


class Outbox:
    """The replication side of :class:`~stores.PostgresStore`, on the pool of its :class:`WriterPool`;
    ``logs`` is the store's memory of the message logs (an import plans its rows with it)."""

    def __init__(self, db: WriterPool, sql: dict[str, str], logs: MessageLogs) -> None:
        self._db = db
        self._sql = sql
        self._logs = logs

    async def fetch_unsynced(self, limit: int) -> list[Checkpoint]:
        """Rows not yet shipped, oldest write first (one round trip)."""
        pool = await self._db.ready()
        with self._db.lost():
            recs = await pool.fetch(self._sql["unsynced"], limit)
        return decode_many(recs)

    async def mark_synced(self, checkpoint_ids: Sequence[str]) -> None:
        """Mark rows shipped (idempotent; empty is a no-op)."""
        if not checkpoint_ids:
            return
        pool = await self._db.ready()
        with self._db.lost():
            await pool.execute(self._sql["mark_synced"], list(checkpoint_ids))

    async def mark_quarantined(self, reasons: dict[str, str]) -> None:
        """Mark poison rows synced with their reason, in one statement (last reason wins)."""
        if not reasons:
            return
        pool = await self._db.ready()
        with self._db.lost():
            await pool.execute(self._sql["mark_quarantined"], list(reasons), list(reasons.values()))

    async def sync_state(self, checkpoint_id: str) -> tuple[bool, str | None] | None:
        """``(synced, sync_error)`` of a row, or ``None``."""
        pool = await self._db.ready()
        with self._db.lost():
            rec = await pool.fetchrow(self._sql["sync_state"], checkpoint_id)
        return None if rec is None else (rec["synced"], rec["sync_error"])

    async def import_rows(self, rows: Sequence[Checkpoint]) -> int:
        """Insert restored rows as synced, skipping existing ids, in one transaction."""
        if not rows:
            return 0
        pool = await self._db.ready()
        runs = {row.execution_id for row in rows}
        inserted = 0
        try:
            with self._db.lost():
                async with pool.acquire() as conn, conn.transaction():
                    ids = [row.checkpoint_id for row in rows]
                    existing = {r[0] for r in await conn.fetch(self._sql["existing_ids"], ids)}
                    fresh: dict[str, Checkpoint] = {}
                    for row in sorted(rows, key=lambda r: (r.execution_id, r.seq)):
                        if row.checkpoint_id not in existing:
                            fresh.setdefault(row.checkpoint_id, row)
                    for run in runs:
                        self._logs.forget(run)
                    plans: list[tuple[Checkpoint, Plan]] = [
                        (row, self._logs.plan(row)) for row in fresh.values()
                    ]
                    for row, plan in plans:
                        try:
                            inserted += await conn.fetchval(self._sql["import"], *args(plan))
                        except asyncpg.UniqueViolationError as exc:
                            raise conflict(row, exc) from None
        except BaseException:
            for run in runs:
                self._logs.forget(run)
            raise
        return inserted

    async def cache_entries(self, execution_id: str) -> list[CacheEntry]:
        """Every cache entry of the run, oldest first (one round trip)."""
        pool = await self._db.ready()
        with self._db.lost():
            recs = await pool.fetch(self._sql["cache_entries"], execution_id)
        return [
            CacheEntry(
                execution_id=execution_id, key=r["key"], value=decode(r["value"]), created_at=r["created_at"]
            )
            for r in recs
        ]

    async def fetch_unsynced_stored(self, limit: int) -> list[tuple[StoredRow, bytes | None]]:
        """Unsynced rows as stored (columns and the messages each adds), oldest write first."""
        pool = await self._db.ready()
        with self._db.lost():
            recs = await pool.fetch(self._sql["unsynced_stored"], limit)
        return [(StoredRow(*rec[:18]), rec[18]) for rec in recs]

    async def fetch_unsynced_cache(self, limit: int) -> list[CacheEntry]:
        """Cache entries not yet shipped, oldest first (one round trip)."""
        pool = await self._db.ready()
        with self._db.lost():
            recs = await pool.fetch(self._sql["unsynced_cache"], limit)
        return [
            CacheEntry(
                execution_id=r["execution_id"],
                key=r["key"],
                value=decode(r["value"]),
                created_at=r["created_at"],
            )
            for r in recs
        ]

    async def mark_cache_synced(self, keys: Sequence[tuple[str, str]]) -> None:
        """Mark cache entries ``(execution_id, key)`` shipped (idempotent; empty is a no-op)."""
        if not keys:
            return
        pool = await self._db.ready()
        with self._db.lost():
            await pool.execute(self._sql["mark_cache_synced"], [k[0] for k in keys], [k[1] for k in keys])

    async def attach_replica(self) -> None:
        """Remember, for good, that a replicator serves this store: prune keeps what is unsent."""
        pool = await self._db.ready()
        with self._db.lost():
            await pool.execute(self._sql["attach_replica"])

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
        values = [encode_cache_value(execution_id, e.key, e.value) for e in cache]
        context = encode_pending(pending) if pending is not None else None
        bodies = [check_copy(e, execution_id) for e in signals]
        rest = restored_wait(ordered[-1] if ordered else None, (e.name for e in signals), utcnow())
        pool = await self._db.ready()
        self._logs.forget(execution_id)
        try:
            plans = [(row, self._logs.plan(row)) for row in ordered]
            with self._db.lost():
                async with pool.acquire() as conn, conn.transaction():
                    if await conn.fetchval(self._sql["run_known"], execution_id):
                        raise run_exists(execution_id)
                    for row, plan in plans:
                        try:
                            await conn.fetchval(self._sql["import"], *args(plan))
                        except asyncpg.UniqueViolationError as exc:
                            raise conflict(row, exc) from None
                    if cache:
                        await conn.execute(
                            self._sql["import_cache"],
                            execution_id,
                            [e.key for e in cache],
                            values,
                            [e.created_at for e in cache],
                        )
                    if pending is not None:
                        await conn.execute(
                            self._sql["import_pending"],
                            execution_id,
                            pending.reason,
                            context,
                            pending.node_id,
                            pending.agent_path,
                            pending.created_at,
                            pending.expires_at,
                        )
                    if signals:
                        await conn.execute(
                            self._sql["import_signals"],
                            execution_id,
                            [e.name for e in signals],
                            bodies,
                            [e.created_at for e in signals],
                            [e.signal_id for e in signals],
                        )
                    if rest is not None:
                        await conn.execute(self._sql["import_wait"], execution_id, ordered[-1].seq, *rest)
            return len(plans)
        finally:
            self._logs.forget(execution_id)

    # -- the inbox entries' outbox -----------------------------------------------------------------

    async def fetch_unsynced_signals(self, limit: int) -> list[StoredSignal]:
        """Inbox entries whose state the plane has not accepted, oldest first (one round trip)."""
        pool = await self._db.ready()
        with self._db.lost():
            recs = await pool.fetch(self._sql["unsynced_signals"], limit)
        return [entry_of(rec) for rec in recs]

    async def mark_signals_synced(self, entries: Sequence[StoredSignal]) -> None:
        """Mark inbox entries shipped, each if its state is still the one shipped."""
        await self._mark_signals([(e, None) for e in entries])

    async def mark_signals_quarantined(self, refused: Sequence[tuple[StoredSignal, str]]) -> None:
        """Mark poison inbox entries with their reason, each if its state is still the one refused."""
        await self._mark_signals(refused)

    async def _mark_signals(self, marks: Sequence[tuple[StoredSignal, str | None]]) -> None:
        if not marks:
            return
        pool = await self._db.ready()
        with self._db.lost():
            await pool.execute(
                self._sql["mark_signals"],
                [e.signal_id for e, _ in marks],
                [e.consumed_seq for e, _ in marks],
                [reason for _, reason in marks],
            )

    async def signal_sync_state(self, signal_id: str) -> tuple[bool, str | None] | None:
        """``(synced, sync_error)`` of an inbox entry, or ``None``."""
        pool = await self._db.ready()
        with self._db.lost():
            rec = await pool.fetchrow(self._sql["signal_sync_state"], signal_id)
        return None if rec is None else (rec["synced"], rec["sync_error"])

    async def signal_entries(self, execution_id: str) -> list[StoredSignal]:
        """Every inbox entry of the run, consumed or not, oldest first (one round trip)."""
        pool = await self._db.ready()
        with self._db.lost():
            recs = await pool.fetch(self._sql["signal_entries"], execution_id)
        return [entry_of(rec) for rec in recs]

    async def copy_signals(self, entries: Sequence[StoredSignal]) -> dict[str, str]:
        """Store copies of inbox entries held elsewhere, merged by ``signal_id`` (see
        :meth:`ReplicatedStore.copy_signals`): the held ones are locked, then the new ones inserted
        and the consumptions recorded, in one transaction."""
        checked, refused = check_copies(entries)
        if not checked:
            return refused
        pool = await self._db.ready()
        with self._db.lost():
            async with pool.acquire() as conn, conn.transaction():
                recs = await conn.fetch(self._sql["held_signals"], list({e.signal_id for e, _ in checked}))
                fresh, consumed, contradicting = merge_copies({r[6]: entry_of(r) for r in recs}, checked)
                if fresh:
                    await conn.execute(
                        self._sql["copy_signals"],
                        [e.execution_id for e, _ in fresh],
                        [e.name for e, _ in fresh],
                        [body for _, body in fresh],
                        [e.created_at for e, _ in fresh],
                        [e.consumed_seq for e, _ in fresh],
                        [e.signal_id for e, _ in fresh],
                    )
                if consumed:
                    await conn.execute(
                        self._sql["consume_copies"],
                        [e.signal_id for e in consumed],
                        [e.consumed_seq for e in consumed],
                    )
        return {**refused, **contradicting}
