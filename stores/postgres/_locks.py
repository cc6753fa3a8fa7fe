"""Run ownership locks on PostgreSQL: session advisory locks, many runs per round trip.

All of a store's locks live on one dedicated connection, and one connection runs one statement at
a time. Taking or releasing each lock in its own round trip would queue every run of the process
behind one socket (two round trips per run). Here every request waiting while a round trip is in
flight goes out in the next one: a single ``SELECT`` over two arrays that takes or releases each key
in the order asked. A process with many runs starting and ending at once pays one round trip per
batch, and a lone run still pays exactly one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import Final

import anyio
import asyncpg

__all__ = ["AdvisoryLocks"]

#: Pauses between re-checks of a refused lock (seconds); ``None`` ends the attempts. A backend whose
#: client was just killed drops its locks a few ms after the client is gone (measured: ~1 try in 30
#: sees the lock for up to ~8 ms), so a refusal re-checks within a bounded ~75 ms before it says
#: "held by a live owner".
_LOCK_RECHECKS: Final = (0.005, 0.01, 0.02, 0.04, None)
_MAX_BATCH: Final = 1024
# Each row's function runs as the scan reaches it, so the keys are taken and released in order.
_BATCH_SQL: Final = (
    "SELECT CASE WHEN t.take THEN pg_try_advisory_lock(t.k) ELSE pg_advisory_unlock(t.k) END "
    "FROM unnest($1::bigint[], $2::boolean[]) AS t(k, take)"
)


class _Op:
    """One take or release waiting for its batch."""

    __slots__ = ("abandoned", "done", "error", "key", "ok", "take")

    def __init__(self, key: int, take: bool) -> None:
        self.key = key
        self.take = take
        self.ok = False
        self.error: Exception | None = None
        self.abandoned = False  # its caller was cancelled: a lock it took is released at once
        self.done = anyio.Event()


class AdvisoryLocks:
    """Session advisory locks on the connection that ``connect`` returns, batched.

    ``held`` maps each run this store owns to its key; ``round_trips`` counts the batches sent.
    ``lost`` turns a lost connection (and a round trip over ``timeout``) into :class:`StoreUnavailable`.
    """

    def __init__(
        self,
        connect: Callable[[], Awaitable[asyncpg.Connection]],
        lost: Callable[[], AbstractContextManager[None]],
        timeout: float,
    ) -> None:
        self._connect = connect
        self._lost = lost
        self._timeout = timeout
        self.held: dict[str, int] = {}
        self._taking: set[str] = set()
        self._queue: list[_Op] = []
        self._flushing = False
        self.round_trips = 0

    async def try_lock(self, execution_id: str, key: int) -> bool:
        """Take ``key`` for the run; ``False`` if this store or anyone else holds it."""
        if execution_id in self.held or execution_id in self._taking:
            return False  # session locks are re-entrant: refuse a second holder here
        self._taking.add(execution_id)
        try:
            for pause in _LOCK_RECHECKS:
                if await self._submit(_Op(key, take=True)):
                    self.held[execution_id] = key
                    return True
                if pause is None:
                    break
                await anyio.sleep(pause)
        finally:
            self._taking.discard(execution_id)
        return False

    def forget(self, execution_id: str | None = None) -> None:
        """Drop what is held (one run, or every run) without a round trip: its connection is gone."""
        if execution_id is None:
            self.held.clear()
        else:
            self.held.pop(execution_id, None)

    async def unlock(self, execution_id: str) -> None:
        """Release the run's lock if this store holds it (shielded: a release is never half done)."""
        key = self.held.pop(execution_id, None)
        if key is None:
            return
        with anyio.CancelScope(shield=True):
            await self._submit(_Op(key, take=False))

    async def _submit(self, op: _Op) -> bool:
        """Queue ``op``, flush if no one is flushing, and wait for its own outcome."""
        self._queue.append(op)
        try:
            if not self._flushing:
                self._flushing = True
                try:
                    await self._flush()
                finally:
                    self._flushing = False
            await op.done.wait()  # bounded: the flusher answers every op it takes within its timeout
        except BaseException:
            if self._abandon(op):
                with anyio.CancelScope(shield=True):  # bounded by one round trip's timeout
                    await self._submit(_Op(op.key, take=False))
            raise
        if op.error is not None:
            raise op.error
        return op.ok

    def _abandon(self, op: _Op) -> bool:
        """A cancelled caller: drop its queued op; ``True`` if it took a lock that must go back."""
        if op in self._queue:
            self._queue.remove(op)
            return False
        if op.done.is_set():
            return op.take and op.ok
        op.abandoned = True  # in flight: the flusher gives back a lock it takes
        return False

    async def _flush(self) -> None:
        """Send queued ops in batches until the queue is empty (shielded: others wait on it)."""
        with anyio.CancelScope(shield=True):
            while self._queue:
                batch, self._queue = self._queue[:_MAX_BATCH], self._queue[_MAX_BATCH:]
                try:
                    conn = await self._connect()
                    self.round_trips += 1
                    with self._lost():
                        found = await conn.fetch(
                            _BATCH_SQL,
                            [op.key for op in batch],
                            [op.take for op in batch],
                            timeout=self._timeout,
                        )
                except Exception as exc:  # a lost connection or a timeout arrives as StoreUnavailable
                    self._fail(batch, exc)
                    continue
                for op, record in zip(batch, found, strict=True):
                    op.ok = bool(record[0])
                    op.done.set()
                    if op.abandoned and op.take and op.ok:
                        self._queue.append(_Op(op.key, take=False))  # this loop sends it next

    @staticmethod
    def _fail(batch: list[_Op], error: Exception) -> None:
        for op in batch:
            op.error = error
            op.done.set()
