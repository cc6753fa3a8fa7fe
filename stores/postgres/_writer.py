"""The one owner of a PostgreSQL store's pool: opening and migrating it, its kept writer connections
and their prepared statements, and group commit for appends.

Group commit: concurrent appends of many runs, one statement, one commit. Each append is a message
(:class:`Queued`: the planned row, the ownership it carries, and the event its caller waits on);
each caller still gets its own outcome, and a row the multi-row statement refused is retried alone,
through the single-row statement and the store's re-plan loop, for its exact error. A caller that
finds fewer than ``max_flushers`` batches in flight writes the queue itself; the others wait and are
handed the lead when a flusher finishes. A lone appender writes its row at once. Flushers keep
their pool connection between flushes (at most one each), so an append costs no pool
acquire/release (asyncpg's release alone schedules a task), and run a single row's statement
prepared once on that connection (no statement-cache lookup per append).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Final, Protocol, cast

import anyio
import anyio.lowlevel
import asyncpg

from .._base import Plan
from .._errors import StoreUnavailable
from .._model import Checkpoint
from ._bridge import Bridge
from ._connection import advisory_key, connect_pool
from ._rows import args, usable
from ._schema import migrate
from ._sql import BATCH_COLUMNS

__all__ = ["NO_OWNERSHIP", "Own", "Queued", "WritePlanned", "WriterPool"]

_MAX_BATCH: Final = 256
_CLOSE_TIMEOUT: Final = 5.0
#: What a row carries of its run's ownership: the owner taking the run with it, that owner's lock
#: key, the owner whose ``run_owners`` row it deletes.
Own = tuple[str | None, int | None, str | None]
#: A row that carries no ownership.
NO_OWNERSHIP: Final[Own] = (None, None, None)


class Queued:
    """One caller's append waiting in the group-commit queue."""

    __slots__ = ("_done", "_wake", "error", "finished", "lead", "own", "plan", "row")

    def __init__(self, row: Checkpoint, plan: Plan, own: Own) -> None:
        self.row = row
        self.plan = plan
        self.own = own
        self.lead = False
        self.error: Exception | None = None
        self.finished = False
        # Made by the first wait only: a lone appender, written at once, makes none.
        self._wake: anyio.Event | None = None  # set when done, or when handed the lead
        self._done: anyio.Event | None = None

    def finish(self, error: Exception | None) -> None:
        self.error = error
        self.finished = True
        if self._done is not None:
            self._done.set()
        if self._wake is not None:
            self._wake.set()

    def hand_lead(self) -> None:
        """Make this waiting appender a flusher."""
        self.lead = True
        if self._wake is not None:
            self._wake.set()

    async def wait_turn(self) -> None:
        """Wait until done, or handed the lead."""
        if not (self.finished or self.lead):
            self._wake = self._wake or anyio.Event()
            await self._wake.wait()

    async def wait_done(self) -> None:
        """Wait until another flusher wrote this row."""
        if not self.finished:
            self._done = self._done or anyio.Event()
            await self._done.wait()


class WritePlanned(Protocol):
    """The store's write of one planned row with its single-row statement ``kind`` (its re-plan loop
    and its exact refusals), on ``via``."""

    def __call__(
        self,
        kind: str,
        row: Checkpoint,
        plan: Plan | None,
        extra: tuple[Any, ...],
        via: asyncpg.pool.PoolConnectionProxy | None = None,
    ) -> Awaitable[None]: ...


def _batch_args(batch: Sequence[Queued]) -> list[list[Any]]:
    """Column arrays for the ``batch`` statement: the arguments of each row's ``append_own``."""
    columns: list[list[Any]] = [[] for _ in range(BATCH_COLUMNS)]
    for item in batch:
        for column, value in zip(columns, (*args(item.plan), *item.own), strict=True):
            column.append(value)
    return columns


class WriterPool:
    """The pool of one :class:`~stores.PostgresStore` and the only code that keeps its connections.

    ``lost`` is the store's outage guard, ``refuse_closed`` refuses a closed store, ``opened`` tells the store its pool is ready,
    ``write_planned`` is the store's single-row write (a refused row's exact outcome) and ``forget``
    drops the store's memory of a run whose row was never written.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str,
        sql: dict[str, str],
        bridge: Bridge,
        min_size: int,
        max_size: int,
        connect_timeout: float,
        max_flushers: int,
        lost: Callable[[], AbstractContextManager[None]],
        refuse_closed: Callable[[], None],
        opened: Callable[[], None],
        write_planned: WritePlanned,
        forget: Callable[[str], None],
    ) -> None:
        self._dsn = dsn
        self._schema = schema
        self._sql = sql
        self._bridge = bridge
        self._min_size = min_size
        self._max_size = max_size
        self._connect_timeout = connect_timeout
        self._max_flushers = max_flushers
        self._refuse_closed = refuse_closed
        self._opened = opened
        self._write_planned = write_planned
        self._forget = forget
        self.lost = lost
        self._setup_lock = anyio.Lock()
        self.pool: asyncpg.Pool | None = None
        self.queue: list[Queued] = []
        self.flushers = 0
        self.writers: list[asyncpg.pool.PoolConnectionProxy] = []
        #: The statements prepared on each writer taken from the pool, by kind (dropped with the writer).
        self.prepared: dict[object, dict[str, asyncpg.prepared_stmt.PreparedStatement]] = {}

    # -- opening and closing ----------------------------------------------------------------------

    async def ready(self) -> asyncpg.Pool:
        """The pool, created and the schema migrated on first use (safe when processes race)."""
        pool = self.pool
        if pool is not None:
            return pool
        async with self._setup_lock:
            if self.pool is not None:
                return self.pool
            self._refuse_closed()
            pool = await self._bridge.open(
                functools.partial(
                    connect_pool,
                    self._dsn,
                    min_size=self._min_size,
                    max_size=self._max_size,
                    timeout=self._connect_timeout,
                )
            )
            try:
                async with pool.acquire() as conn:
                    with self.lost():
                        await migrate(conn, self._schema, advisory_key(self._schema, "\x00migrate"))
            except BaseException:
                pool.terminate()
                raise
            self.pool = pool
            self._opened()
            return pool

    def detach(self) -> Callable[[], Awaitable[None]]:
        """Stop handing out the pool (the store is closing). Returns the coroutine function that
        gives the kept writers back and closes the pool (bounded: past the bound the pool is
        terminated); call it shielded."""
        pool, writers = self.pool, self.writers
        self.pool, self.writers = None, []
        self.prepared.clear()

        async def close() -> None:
            closed = False
            with anyio.move_on_after(_CLOSE_TIMEOUT):
                if pool is not None:
                    for writer in writers:
                        await pool.release(writer)
                    await pool.close()
                closed = True
            if not closed and pool is not None:
                pool.terminate()

        return close

    # -- group commit -----------------------------------------------------------------------------

    async def append(self, item: Queued) -> None:
        """Write ``item``'s row in a shared batch (see the module); raises its own error."""
        pool = self.pool
        if pool is None:
            try:
                pool = await self.ready()
            except BaseException:
                self._forget(item.row.execution_id)
                raise
        self.queue.append(item)
        if self.flushers < self._max_flushers:
            self.flushers += 1
            item.lead = True
        else:
            try:
                await item.wait_turn()
            except BaseException:
                self._abandon(item)
                raise
        if item.lead:
            try:
                await self._flush_until(pool, item)
            finally:
                self.flushers -= 1
                self._hand_off()
        if item.error is not None:
            raise item.error

    async def _flush_until(self, pool: asyncpg.Pool, item: Queued) -> None:
        """Write queued batches until ``item`` is done (it may be in another flusher's batch)."""
        # Under load (another flusher busy, or rows already queued), let appenders that are ready to
        # run queue their rows first, so they share this commit. A lone appender writes at once.
        if self.flushers > 1 or len(self.queue) > 1:
            await anyio.lowlevel.cancel_shielded_checkpoint()
        writer: asyncpg.pool.PoolConnectionProxy | None = None
        broken = False
        try:
            while not item.finished:
                if not self.queue:
                    await item.wait_done()
                    return
                batch, self.queue = self.queue[:_MAX_BATCH], self.queue[_MAX_BATCH:]
                with anyio.CancelScope(shield=True):  # the batch is other callers' writes too
                    if writer is None:
                        writer = self._idle_writer() or await self._take_writer(pool)
                    broken = await self._flush(writer, batch) or broken
        finally:
            if writer is not None:
                await self._give_back(pool, writer, broken)

    def _idle_writer(self) -> asyncpg.pool.PoolConnectionProxy | None:
        """A kept writer connection that is still usable, if any."""
        while self.writers:
            writer = self.writers.pop()
            if usable(writer):
                return writer
            self.prepared.pop(writer, None)  # lost: the pool has taken it back
        return None

    async def _take_writer(self, pool: asyncpg.Pool) -> asyncpg.pool.PoolConnectionProxy:
        with self.lost():
            conn: asyncpg.pool.PoolConnectionProxy = await pool.acquire(timeout=self._connect_timeout)
        self.prepared[conn] = {}
        return conn

    async def statement(self, runner: object, kind: str) -> asyncpg.prepared_stmt.PreparedStatement | None:
        """The statement ``kind`` prepared on ``runner`` if it is a kept writer (prepared there on
        first use, so later writes of that kind skip the driver's statement-cache lookup); ``None``
        for any other runner."""
        prepared = self.prepared.get(runner)
        if prepared is None:
            return None
        statement = prepared.get(kind)
        if statement is None:
            writer = cast(asyncpg.pool.PoolConnectionProxy, runner)
            statement = prepared[kind] = await writer.prepare(self._sql[kind])
        return statement

    async def _give_back(
        self, pool: asyncpg.Pool, writer: asyncpg.pool.PoolConnectionProxy, broken: bool
    ) -> None:
        """Keep a healthy writer for the next flush; a broken one (or after close) goes to the pool,
        without the statements prepared on it."""
        if not broken and self.pool is pool and usable(writer):
            self.writers.append(writer)
            return
        self.prepared.pop(writer, None)
        if broken:
            with contextlib.suppress(asyncpg.InterfaceError):  # already taken back by the pool
                writer.terminate()  # its protocol state is unknown: never reuse it
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT):
            await pool.release(writer)  # a no-op for a connection the pool already took back

    async def _flush(self, writer: asyncpg.pool.PoolConnectionProxy, batch: list[Queued]) -> bool:
        """Write ``batch`` on ``writer``, finishing each item; ``True`` if the connection was lost."""
        written: set[str] = set()
        broken = False
        if len(batch) > 1:
            try:
                with self.lost():
                    recs = await writer.fetch(self._sql["batch"], *_batch_args(batch))
                written = {rec[0] for rec in recs}
            except (asyncpg.PostgresError, StoreUnavailable):
                written = set()  # e.g. two stale writers of one log in the batch: go one by one
        for item in batch:
            if item.row.checkpoint_id in written:
                item.finish(None)
                continue
            try:  # refused (or a batch of one): the single statement gives the exact outcome
                if item.own is NO_OWNERSHIP:
                    await self._write_planned("append", item.row, item.plan, (), via=writer)
                else:
                    await self._write_planned("append_own", item.row, item.plan, item.own, via=writer)
                item.finish(None)
            except Exception as exc:
                broken = broken or isinstance(exc, StoreUnavailable)
                item.finish(exc)
        return broken

    def _hand_off(self) -> None:
        """Give a free flusher slot to the oldest waiting appender."""
        for waiting in self.queue:
            if self.flushers >= self._max_flushers:
                return
            if not waiting.lead:
                self.flushers += 1
                waiting.hand_lead()
                return

    def _abandon(self, item: Queued) -> None:
        """A waiting appender was cancelled: drop its row if not yet taken, pass on its lead."""
        if item in self.queue:
            self.queue.remove(item)
        self._forget(item.row.execution_id)
        if item.lead:  # the slot reserved for it was never used
            self.flushers -= 1
            self._hand_off()
