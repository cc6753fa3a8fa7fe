"""Run ownership on PostgreSQL: one session advisory lock per owner id, and the ``run_owners`` rows.

The store's lock connection holds one advisory lock, keyed by its owner id salted with the schema,
for as long as the owner id lives; owning a run is a ``run_owners`` row naming that id (and its key).
Whether an owner is alive is read from ``pg_locks`` in the same statement that takes or lists runs:
an owner id's lock is taken before any row names it and never taken again once freed, so a key
missing from ``pg_locks`` means that owner died or lost its lock, for good. One process owning
15,000 runs therefore holds one lock, not 15,000 (one session holding ~12,000 advisory locks
exhausts the shared lock table, and then no new session can connect to the server at all).

The lock connection runs with ``idle_session_timeout`` and ``idle_in_transaction_session_timeout``
off (they would release a live owner's lock), TCP keepalives on, and a termination listener: when
the server closes it (``pg_terminate_backend``, a restart, a failover, a network loss seen by the
keepalives) the owner id is lost at once, which abandons its runs (:mod:`stores._owners`). It must
reach PostgreSQL directly or through PgBouncer in session mode: transaction pooling cannot carry a
session lock.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import Final

import anyio
import asyncpg

from .._errors import owner_lock_held
from .._heads import STATE_CONDITIONS
from .._owners import Ownership
from ._connection import advisory_key
from ._sql import HELD_KEYS

__all__ = ["OWNER_SQL", "LivenessLock", "owner_key"]

#: The ownership statements, with ``{s}`` for the quoted schema.
OWNER_SQL: Final[dict[str, str]] = {
    # Runs handed to the fleet and not yet taken (a row naming no owner).
    "unowned": "SELECT execution_id FROM {s}.run_owners WHERE owner IS NULL AND execution_id = ANY($1::text[])",
    # Each run's owners row, read once: handed to the fleet (no owner), held by a live owner.
    "ownership": f"""
SELECT execution_id, owner IS NULL, coalesce(owner_key IN ({HELD_KEYS}), false) FROM {{s}}.run_owners
WHERE execution_id = ANY($1::text[])""",
    # Take the run unless a live owner other than us is recorded ($2/$3: our owner id and key).
    "take": f"""
INSERT INTO {{s}}.run_owners AS o (execution_id, owner, owner_key, since) VALUES ($1, $2, $3, now())
ON CONFLICT (execution_id) DO UPDATE
    SET owner = excluded.owner, owner_key = excluded.owner_key, since = excluded.since
    WHERE o.owner IS NULL OR o.owner = excluded.owner OR o.owner_key NOT IN ({HELD_KEYS})
RETURNING true""",
    # Release: the row goes when the run rests (its newest row a run_end, a pause or a wait) or has no rows;
    # a run left mid-step is handed to the fleet instead (no owner), and the workers are told.
    "release": f"""
WITH n AS (SELECT NOT {STATE_CONDITIONS["unfinished"]} AS resting
           FROM {{s}}.checkpoints c WHERE c.execution_id = $1 ORDER BY c.seq DESC LIMIT 1),
d AS (DELETE FROM {{s}}.run_owners WHERE execution_id = $1 AND owner = $2
      AND coalesce((SELECT resting FROM n), true) RETURNING 1),
q AS (UPDATE {{s}}.run_owners SET owner = NULL, owner_key = NULL, since = now()
      WHERE execution_id = $1 AND owner = $2 AND NOT coalesce((SELECT resting FROM n), true)
      RETURNING execution_id)
SELECT pg_notify($3, q.execution_id) FROM q""",
    "owned": f"""
SELECT execution_id FROM {{s}}.run_owners
WHERE execution_id = ANY($1::text[]) AND owner_key IN ({HELD_KEYS})""",
    "expired": """
SELECT execution_id FROM {s}.pending_interrupts WHERE expires_at <= now() ORDER BY expires_at LIMIT $1""",
    "owner_pid": """
SELECT l.pid FROM {s}.run_owners o JOIN pg_locks l
  ON l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
 AND (l.classid::bigint << 32) | l.objid::bigint = o.owner_key
WHERE o.execution_id = $1""",
}


def owner_key(schema: str, owner: str) -> int:
    """The non-negative 63-bit advisory key of an owner id, salted with the schema."""
    return advisory_key(schema, "\x00owner:" + owner) & 0x7FFF_FFFF_FFFF_FFFF


class LivenessLock:
    """The one advisory lock of a store's current owner id, on its dedicated lock connection.

    ``connect`` opens the lock connection; ``lost`` maps a lost connection to ``StoreUnavailable``.
    """

    def __init__(
        self,
        schema: str,
        ownership: Ownership,
        connect: Callable[[], Awaitable[asyncpg.Connection]],
        lost: Callable[[], AbstractContextManager[None]],
        timeout: float,
    ) -> None:
        self._schema = schema
        self._own = ownership
        self._connect = connect
        self._lost = lost
        self._timeout = timeout
        self._conn: asyncpg.Connection | None = None
        self._owner: str | None = None  # the owner id whose lock self._conn holds
        self._guard = anyio.Lock()
        self.closing = False

    @property
    def connection(self) -> asyncpg.Connection | None:
        """The lock connection, if open."""
        return self._conn

    async def hold(self) -> str:
        """The current owner id, its lock held (connecting and locking on first use)."""
        owner = self._own.owner
        conn = self._conn
        if owner == self._owner and conn is not None and not conn.is_closed():
            return owner
        async with self._guard:
            owner = self._own.owner
            if owner == self._owner and self._conn is not None and not self._conn.is_closed():
                return owner
            await self._drop()
            conn = await self._connect()
            try:
                with self._lost():
                    got = await conn.fetchval(
                        "SELECT pg_try_advisory_lock($1)",
                        owner_key(self._schema, owner),
                        timeout=self._timeout,
                    )
            except BaseException:
                conn.terminate()
                raise
            if not got:  # pragma: no cover - a 63-bit collision with a live owner
                conn.terminate()
                raise owner_lock_held(owner)
            self._conn, self._owner = conn, owner
            conn.add_termination_listener(self._terminated)
            return owner

    def _terminated(self, conn: asyncpg.Connection | asyncpg.pool.PoolConnectionProxy) -> None:
        """The server closed the lock connection (or we did, on close): its owner id is lost."""
        if conn is not self._conn or self.closing:
            return
        owner, self._owner, self._conn = self._owner, None, None
        if owner is not None:
            self._own.lose(owner, "its PostgreSQL lock connection was closed")

    async def _drop(self) -> None:
        conn, self._conn, self._owner = self._conn, None, None
        if conn is not None:
            conn.remove_termination_listener(self._terminated)
            conn.terminate()

    async def close(self) -> None:
        """Close the lock connection (its lock goes with it); not a loss."""
        self.closing = True
        conn, self._conn, self._owner = self._conn, None, None
        if conn is None:
            return
        conn.remove_termination_listener(self._terminated)
        with anyio.move_on_after(self._timeout):
            await conn.close()
            return
        conn.terminate()
