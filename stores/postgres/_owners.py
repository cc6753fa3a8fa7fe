"""The ownership hooks of :class:`~stores.PostgresStore` (the shared half is ``stores._owners``): the
statements of :mod:`stores.postgres._locks` on the pool, the liveness lock on its own connection.

A run's take and release ride on its rows where they can (``append_own`` and ``batch`` in
:mod:`stores.postgres._sql`, written by :mod:`stores.postgres._appends`): a new run's first row
records the take, checked in that row's statement, and its ``run_end`` deletes the ``run_owners``
row (a pause its own), so :meth:`~stores._owners.BaseOwnedStore.unlock` writes nothing. A write whose
statement cannot carry its take (:meth:`LockOwners._taking`) writes it first, in one transaction.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Final, TypeVar

import anyio
import asyncpg

from .._base import StoreState
from .._errors import owned_elsewhere, store_closed
from .._owners import Ownership
from .._queues import Admission, Queue, Work, stricter
from ._bridge import Bridge
from ._connection import connect_lock_connection
from ._half import StoreHalf
from ._locks import LivenessLock, owner_key

__all__ = ["LockOwners"]

_CLOSE_TIMEOUT: Final = 5.0
T = TypeVar("T")


class LockOwners(StoreHalf):
    """The dialect of ownership on PostgreSQL (a mixin of the store, before ``BaseStore``)."""

    _own: Ownership
    _bridge: Bridge
    _liveness: LivenessLock
    _owner_sql: dict[str, str]
    _state: StoreState
    _connect_timeout: float
    _keepalive_idle: int
    schema: str
    dsn: str
    work_channel: str

    if TYPE_CHECKING:

        def _refuse_closed(self) -> None: ...

    #: The take and the release ride on the run's rows (in their statements, not through ``_ride``).
    _rides = True

    async def _taking(
        self,
        execution_id: str,
        take: str | None,
        write: Callable[[asyncpg.pool.PoolConnectionProxy | None], Awaitable[T]],
        *,
        take_last: bool = False,
    ) -> T:
        """``write(None)``; or, with a take to write that the write's own statement cannot carry (a
        pause, a claim, a run's first row that is also its ``run_end``), the take then
        ``write(conn)`` in one transaction: the take checked first (:func:`~stores._owners.taken`
        if a live owner holds the run; after the write with ``take_last``, so that the write's own
        refusal comes first, as where the take is read first), both undone if either fails."""
        if take is None:
            return await write(None)
        pool = await self._ready()
        key = owner_key(self.schema, take)
        with self._lost():
            async with pool.acquire() as conn, conn.transaction():
                if not take_last and not await conn.fetchval(
                    self._owner_sql["take"], execution_id, take, key
                ):
                    raise owned_elsewhere(execution_id)
                value = await write(conn)
                if take_last and not await conn.fetchval(self._owner_sql["take"], execution_id, take, key):
                    raise owned_elsewhere(execution_id)
                return value

    @property
    def _lock_conn(self) -> asyncpg.Connection | None:
        """The lock connection holding this store's liveness lock, if open."""
        return self._liveness.connection

    async def _hold(self) -> str:
        self._refuse_closed()
        await self._ready()
        return await self._liveness.hold()

    async def _take_row(self, execution_id: str, owner: str) -> bool:
        pool = await self._ready()
        with self._lost():
            key = owner_key(self.schema, owner)
            return bool(await pool.fetchval(self._owner_sql["take"], execution_id, owner, key))

    async def _release_row(self, execution_id: str, owner: str) -> None:
        pool = await self._ready()
        with self._lost():
            await pool.execute(self._owner_sql["release"], execution_id, owner, self.work_channel)

    async def _owned_rows(self, execution_ids: Sequence[str]) -> set[str]:
        pool = await self._ready()
        with self._lost():
            return {r[0] for r in await pool.fetch(self._owner_sql["owned"], list(execution_ids))}

    async def _expired_rows(self, limit: int) -> list[str]:
        pool = await self._ready()
        with self._lost():
            return [r[0] for r in await pool.fetch(self._owner_sql["expired"], limit)]

    async def _work_rows(
        self, limit: int, full: Sequence[str], full_keys: Sequence[tuple[str, str]]
    ) -> list[Work]:
        pool = await self._ready()
        queues, keys = [q for q, _ in full_keys], [k for _, k in full_keys]
        with self._lost():
            return [
                Work(*r) for r in await pool.fetch(self._owner_sql["work"], limit, list(full), queues, keys)
            ]

    async def _take_queued_row(self, execution_id: str, owner: str) -> Admission:
        pool = await self._ready()
        with self._lost():
            key = owner_key(self.schema, owner)
            found = await pool.fetchrow(self._owner_sql["take_queued"], execution_id, owner, key)
        assert found is not None
        limited = found[1] is not None  # refused by a limit: the run's queue and key say which
        return Admission(bool(found[0]), found[1], found[2], *((found[3], found[4]) if limited else ()))

    async def _hand_off_row(
        self, execution_id: str, owner: str, queue: str, key: str | None, priority: int
    ) -> None:
        pool = await self._ready()
        with self._lost():
            await pool.execute(
                self._owner_sql["hand_off"], execution_id, owner, queue, key, priority, self.work_channel
            )

    async def _declare_row(self, queue: Queue, owner: str) -> tuple[Queue | None, Queue]:
        pool = await self._ready()
        sql = self._owner_sql
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

    async def _queue_rows(self, execution_ids: Sequence[str]) -> dict[str, tuple[str, str | None]]:
        pool = await self._ready()
        with self._lost():
            found = await pool.fetch(self._owner_sql["queues_of"], list(execution_ids))
        return {r[0]: (r[1], r[2]) for r in found}

    async def _unowned_rows(self, execution_ids: Sequence[str]) -> set[str]:
        pool = await self._ready()
        with self._lost():
            return {r[0] for r in await pool.fetch(self._owner_sql["unowned"], list(execution_ids))}

    async def _ownership_rows(self, execution_ids: Sequence[str]) -> tuple[set[str], set[str]]:
        pool = await self._ready()
        with self._lost():
            found = await pool.fetch(self._owner_sql["ownership"], list(execution_ids))
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
            pid = await pool.fetchval(self._owner_sql["owner_pid"], execution_id)
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
        if self._state is StoreState.CLOSED:
            raise store_closed(self)
        return await self._bridge.open(
            functools.partial(
                connect_lock_connection,
                self.dsn,
                timeout=self._connect_timeout,
                keepalive_idle=self._keepalive_idle,
            )
        )
