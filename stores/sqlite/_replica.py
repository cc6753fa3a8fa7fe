"""The SQLite half of replication beyond rows: the cache entries' outbox, the memory of having been
attached to a replicator, a run's cache entries (the plane's reads), and importing a restored run
(rows, cache entries, pending row) in one write transaction."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from .._base import Plan
from .._codec import MessageLogs, StoredRow, encode_cache_value, encode_pending
from .._errors import run_exists
from .._json import decode
from .._model import CacheEntry, Checkpoint, PendingInterrupt, utcnow
from ._rows import PENDING_COLUMNS, ROW_COLUMNS, dt, ts

__all__ = ["Replica"]

T = TypeVar("T")


class Replica:
    """Mixed into :class:`~stores.SQLiteStore` (which provides the hooks below)."""

    _logs: MessageLogs
    _read: Callable[..., Awaitable[object]]
    _write: Callable[..., Awaitable[object]]

    def _insert(self, conn: sqlite3.Connection, plan: Plan, synced: int = 0) -> None:
        raise NotImplementedError

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

        found = await self._read(run)
        assert isinstance(found, list)
        return found

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

        found = await self._read(run)
        assert isinstance(found, list)
        return found

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

        found = await self._read(run)
        assert isinstance(found, list)
        return found

    async def mark_cache_synced(self, keys: Sequence[tuple[str, str]]) -> None:
        """Mark cache entries ``(execution_id, key)`` shipped (idempotent; empty is a no-op)."""
        if not keys:
            return
        pairs = list(keys)
        await self._write(
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

        await self._write(run)

    async def import_run(
        self,
        execution_id: str,
        rows: Sequence[Checkpoint],
        cache: Sequence[CacheEntry],
        pending: PendingInterrupt | None,
    ) -> int:
        """Import a restored run in one transaction (see :meth:`ReplicatedStore.import_run`)."""
        ordered = sorted(rows, key=lambda r: r.seq)
        values = [(e.key, encode_cache_value(execution_id, e.key, e.value), ts(e.created_at)) for e in cache]
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
                    self._insert(conn, plan, synced=1)
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
                return len(plans)

            count = await self._write(run)
            assert isinstance(count, int)
            return count
        finally:
            self._logs.forget(execution_id)
