"""The PostgreSQL outbox: what the replicator reads and marks (:class:`~stores.ReplicatedStore`).

Unsynced rows are found through a partial index (``WHERE NOT synced``); marking is one statement.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager

import asyncpg

from .._base import Plan
from .._codec import MessageLogs
from .._model import Checkpoint
from ._rows import args, conflict, decode_many

__all__ = ["Outbox"]


class Outbox:
    """The outbox half of :class:`~stores.PostgresStore` (the store sets these attributes)."""

    _logs: MessageLogs
    _sql: dict[str, str]

    async def _ready(self) -> asyncpg.Pool:
        raise NotImplementedError

    def _lost(self) -> AbstractContextManager[None]:
        raise NotImplementedError

    async def fetch_unsynced(self, limit: int) -> list[Checkpoint]:
        """Rows not yet shipped, oldest write first (one round trip)."""
        pool = await self._ready()
        with self._lost():
            recs = await pool.fetch(self._sql["unsynced"], limit)
        return decode_many(recs)

    async def mark_synced(self, checkpoint_ids: Sequence[str]) -> None:
        """Mark rows shipped (idempotent; empty is a no-op)."""
        if not checkpoint_ids:
            return
        pool = await self._ready()
        with self._lost():
            await pool.execute(self._sql["mark_synced"], list(checkpoint_ids))

    async def mark_quarantined(self, reasons: dict[str, str]) -> None:
        """Mark poison rows synced with their reason, in one statement (last reason wins)."""
        if not reasons:
            return
        pool = await self._ready()
        with self._lost():
            await pool.execute(self._sql["mark_quarantined"], list(reasons), list(reasons.values()))

    async def sync_state(self, checkpoint_id: str) -> tuple[bool, str | None] | None:
        """``(synced, sync_error)`` of a row, or ``None``."""
        pool = await self._ready()
        with self._lost():
            rec = await pool.fetchrow(self._sql["sync_state"], checkpoint_id)
        return None if rec is None else (rec["synced"], rec["sync_error"])

    async def import_rows(self, rows: Sequence[Checkpoint]) -> int:
        """Insert restored rows as synced, skipping existing ids, in one transaction."""
        if not rows:
            return 0
        pool = await self._ready()
        runs = {row.execution_id for row in rows}
        inserted = 0
        try:
            with self._lost():
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
