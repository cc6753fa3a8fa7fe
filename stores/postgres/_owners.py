"""The ownership dialect of :class:`~stores.PostgresStore` (the shared half is ``stores._owners``): the
statements of :mod:`stores.postgres._locks` on the pool, the liveness lock on its own connection.

A run's take and release ride on its rows where they can (``append_own`` and ``batch`` in
:mod:`stores.postgres._sql`, written by :mod:`stores.postgres._appends`): a new run's first row
records the take, checked in that row's statement, and its ``run_end`` deletes the ``run_owners``
row (a pause its own), so :meth:`~stores._owners.BaseOwnedStore.unlock` writes nothing. A write whose
statement cannot carry its take (:meth:`LockOwners.ride`) writes it first, in one transaction.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import Final, TypeVar

import anyio
import asyncpg

from .._errors import owned_elsewhere
from .._owners import Ownership
from .._queues import Admission, Queue, Work, stricter
from ._bridge import Bridge
from ._connection import advisory_key, connect_lock_connection
from ._locks import OWNER_SQL, LivenessLock, owner_key
from ._queue_sql import QUEUE_SQL

__all__ = ["LockOwners", "PoolConnection"]

_CLOSE_TIMEOUT: Final = 5.0
T = TypeVar("T")
#: A connection taken from the pool, in a transaction a write joins.
PoolConnection = asyncpg.pool.PoolConnectionProxy


class LockOwners:
    """Ownership on PostgreSQL (an :class:`~stores._owners.OwnerRows`): the liveness lock on its
    connection, the ``run_owners`` statements on the store's pool, and the take a write carries.

    ``ready`` is the store's pool (opened on first use), ``lost`` its outage guard, ``refuse_closed``
    its refusal once closed; the rest are the store's settings.
    """

    def __init__(
        self,
        own: Ownership,
        *,
        schema: str,
        dsn: str,
        bridge: Bridge,
        ready: Callable[[], Awaitable[asyncpg.Pool]],
        lost: Callable[[], AbstractContextManager[None]],
        refuse_closed: Callable[[], None],
        connect_timeout: float,
        keepalive_idle: int,
    ) -> None:
        self.schema = schema
        self._dsn = dsn
        self._bridge = bridge
        self._ready = ready
        self._lost = lost
        self._refuse_closed = refuse_closed
        self._connect_timeout = connect_timeout
        self._keepalive_idle = keepalive_idle
        self._sql = {k: v.replace("{s}", f'"{schema}"') for k, v in {**OWNER_SQL, **QUEUE_SQL}.items()}
        #: The LISTEN/NOTIFY channel that tells workers a run was handed to the fleet.
        self.work_channel = f"tether_work_{advisory_key(schema, 'work') & 0xFFFF_FFFF_FFFF:x}"
        self.liveness = LivenessLock(schema, own, self._lock_connection, lost, connect_timeout)

    async def ride(
        self,
        execution_id: str,
        take: str | None,
        write: Callable[[PoolConnection | None], Awaitable[T]],
        *,
        take_last: bool = False,
    ) -> T:
        """``write(None)``; or, with a take to write that the write's own statement cannot carry (a
        pause, a claim, a wait, a run's first row that is also its ``run_end``), the take then
        ``write(conn)`` in one transaction: the take checked first (:func:`~stores._errors.owned_elsewhere`
        if a live owner holds the run; after the write with ``take_last``, so that the write's own
        refusal comes first, as where the take is read first), both undone if either fails."""
        if take is None:
            return await write(None)
        pool = await self._ready()
        key = owner_key(self.schema, take)
        with self._lost():
            async with pool.acquire() as conn, conn.transaction():
                if not take_last and not await conn.fetchval(self._sql["take"], execution_id, take, key):
                    raise owned_elsewhere(execution_id)
                value = await write(conn)
                if take_last and not await conn.fetchval(self._sql["take"], execution_id, take, key):
                    raise owned_elsewhere(execution_id)
                return value

    async def hold(self) -> str:
        self._refuse_closed()
        await self._ready()
        return await self.liveness.hold()

    def probe(self) -> None:
        """Nothing to look at: a lost lock connection reports itself (its termination listener)."""

    async def take_row(self, execution_id: str, owner: str) -> bool:
        pool = await self._ready()
        with self._lost():
            key = owner_key(self.schema, owner)
            return bool(await pool.fetchval(self._sql["take"], execution_id, owner, key))

    async def release_row(self, execution_id: str, owner: str) -> None:
        pool = await self._ready()
        with self._lost():
            await pool.execute(self._sql["release"], execution_id, owner, self.work_channel)

    async def owned_rows(self, execution_ids: Sequence[str]) -> set[str]:
        pool = await self._ready()
        with self._lost():
            return {r[0] for r in await pool.fetch(self._sql["owned"], list(execution_ids))}

    async def expired_rows(self, limit: int) -> list[str]:
        pool = await self._ready()
        with self._lost():
            return [r[0] for r in await pool.fetch(self._sql["expired"], limit)]

    async def work_rows(
        self, limit: int, full: Sequence[str], full_keys: Sequence[tuple[str, str]]
    ) -> list[Work]:
        pool = await self._ready()
        queues, keys = [q for q, _ in full_keys], [k for _, k in full_keys]
        with self._lost():
            return [Work(*r) for r in await pool.fetch(self._sql["work"], limit, list(full), queues, keys)]

    async def take_queued_row(self, execution_id: str, owner: str) -> Admission:
        pool = await self._ready()
        with self._lost():
            key = owner_key(self.schema, owner)
            found = await pool.fetchrow(self._sql["take_queued"], execution_id, owner, key)
        assert found is not None
        limited = found[1] is not None  # refused by a limit: the run's queue and key say which
        return Admission(bool(found[0]), found[1], found[2], *((found[3], found[4]) if limited else ()))

    async def hand_off_row(
        self, execution_id: str, owner: str, queue: str, key: str | None, priority: int
    ) -> None:
        pool = await self._ready()
        with self._lost():
            await pool.execute(
                self._sql["hand_off"], execution_id, owner, queue, key, priority, self.work_channel
            )

    async def declare_row(self, queue: Queue, owner: str) -> tuple[Queue | None, Queue]:
        pool = await self._ready()
        sql = self._sql
        with self._lost():
            async with pool.acquire() as conn, conn.transaction():
                await conn.execute(sql["declare_lock"], queue.name)
                found = await conn.fetchrow(sql["declared"], queue.name, owner)
                assert found is not None
                other = None
                if found["other_live"]:
                    count, window = found["rate_count"], found["rate_window"]
                    rate = (
                        (count, timedelta(seconds=window))
                        if count is not None and window is not None
                        else None
                    )
                    other = Queue(
                        queue.name, concurrency=found["concurrency"], per_key=found["per_key"], rate=rate
                    )
                held = queue if other is None else stricter(other, queue)
                await conn.execute(
                    sql["declare"],
                    held.name,
                    held.concurrency,
                    held.per_key,
                    held.rate[0] if held.rate is not None else None,
                    held.window,
                    owner,
                    owner_key(self.schema, owner),
                )
                if held.rate is not None:
                    await conn.execute(sql["trim_starts"], held.name, held.rate[0])
        return other, held

    async def queue_rows(self, execution_ids: Sequence[str]) -> dict[str, tuple[str, str | None]]:
        pool = await self._ready()
        with self._lost():
            found = await pool.fetch(self._sql["queues_of"], list(execution_ids))
        return {r[0]: (r[1], r[2]) for r in found}

    async def unowned_rows(self, execution_ids: Sequence[str]) -> set[str]:
        pool = await self._ready()
        with self._lost():
            return {r[0] for r in await pool.fetch(self._sql["unowned"], list(execution_ids))}

    async def ownership_rows(self, execution_ids: Sequence[str]) -> tuple[set[str], set[str]]:
        pool = await self._ready()
        with self._lost():
            found = await pool.fetch(self._sql["ownership"], list(execution_ids))
        return {r[0] for r in found if r[2]}, {r[0] for r in found if r[1]}

    async def listen_for_work(self, wake: Callable[[], object]) -> Callable[[], Awaitable[None]]:
        """Call ``wake()`` whenever a run is handed to the fleet (``LISTEN`` on a connection of its
        own); returns the coroutine function that stops listening."""
        conn = await self._lock_connection()

        def notified(*_: object) -> None:
            wake()

        with self._lost():
            await conn.add_listener(self.work_channel, notified)

        async def stop() -> None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT):
                await conn.close()
                return
            conn.terminate()

        return stop

    async def owner_pid(self, execution_id: str) -> int | None:
        """The server pid of the session holding the liveness lock of the run's owner, if it is alive
        (what ``tether recover --force`` terminates)."""
        pool = await self._ready()
        with self._lost():
            pid = await pool.fetchval(self._sql["owner_pid"], execution_id)
        return None if pid is None else int(pid)

    async def terminate_owner(self, execution_id: str) -> int | None:
        """End the lock session of the run's live owner (an operator's ``tether recover --force``
        for a frozen process): every run that owner holds is then an orphan. The pid ended, or
        ``None`` when no live owner holds the run."""
        pid = await self.owner_pid(execution_id)
        if pid is None:
            return None
        pool = await self._ready()
        with self._lost():
            await pool.fetchval("SELECT pg_terminate_backend($1)", pid)
        return pid

    async def _lock_connection(self) -> asyncpg.Connection:
        """A new connection with the lock connection's settings (on the store's loop under trio)."""
        self._refuse_closed()
        return await self._bridge.open(
            functools.partial(
                connect_lock_connection,
                self._dsn,
                timeout=self._connect_timeout,
                keepalive_idle=self._keepalive_idle,
            )
        )
