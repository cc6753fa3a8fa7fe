"""Group commit for PostgreSQL appends: concurrent appends of many runs, one statement, one commit.

Each caller still gets its own outcome; a row the multi-row statement refused is retried alone,
through the single-row statement and the re-plan loop, for its exact error. A caller that finds
fewer than ``max_flushers`` batches in flight writes the queue itself; the others wait and are
handed the lead when a flusher finishes. A lone appender writes its row at once. Flushers keep
their pool connection between flushes (at most one each), so an append costs no pool
acquire/release (asyncpg's release alone schedules a task), and run a single row's statement
prepared once on that connection (no statement-cache lookup per append).

A run's ownership rides on its rows where it can: a new run's take is written with its first row
(checked there, gating it) and a ``run_end`` deletes the run's ``run_owners`` row, in that row's
statement, so taking and releasing a run cost no round trip of their own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any, Final, cast

import anyio
import anyio.lowlevel
import asyncpg

from .._base import Plan
from .._codec import MessageLogs
from .._errors import RunExists, StoreUnavailable
from .._model import LLM_CALL, RUN_END, SIGNAL, WAKE, Checkpoint
from .._owners import Ownership
from .._signals import SignalsWaiting
from ._half import StoreHalf
from ._inbox import consumes_of
from ._locks import owner_key
from ._rows import args, usable
from ._sql import BATCH_COLUMNS

__all__ = ["GroupAppends", "Queued"]

_MAX_BATCH: Final = 256
_CLOSE_TIMEOUT: Final = 5.0


class Queued:
    """One caller's append waiting in the group-commit queue."""

    __slots__ = ("_done", "_wake", "error", "finished", "lead", "own", "plan", "row")

    def __init__(self, row: Checkpoint, plan: Plan, own: tuple[str | None, int | None, str | None]) -> None:
        self.row = row
        self.plan = plan
        self.own = own  # the owner taking the run with this row, its key, the owner releasing it
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


_NO_OWNERSHIP: Final = (None, None, None)


def _batch_args(batch: Sequence[Queued]) -> list[list[Any]]:
    """Column arrays for the ``batch`` statement: the arguments of each row's ``append_own``."""
    columns: list[list[Any]] = [[] for _ in range(BATCH_COLUMNS)]
    for item in batch:
        for column, value in zip(columns, (*args(item.plan), *item.own), strict=True):
            column.append(value)
    return columns


class GroupAppends(StoreHalf):
    """The append half of :class:`~stores.PostgresStore` (the store sets these attributes)."""

    _logs: MessageLogs
    _own: Ownership
    schema: str
    _pool: asyncpg.Pool | None
    _sql: dict[str, str]
    _connect_timeout: float
    _queue: list[Queued]
    _flushers: int
    _max_flushers: int
    _writers: list[asyncpg.pool.PoolConnectionProxy]
    #: The statements prepared on each writer taken from the pool, by kind (dropped with the writer).
    _prepared: dict[object, dict[str, asyncpg.prepared_stmt.PreparedStatement]]

    async def append(self, row: Checkpoint) -> None:
        """Append ``row``; a ``run_end`` also deletes the pending row (group commit, see the module)."""
        eid = row.execution_id
        self._own.check(eid)  # a run abandoned with a lost lock writes nothing more
        consumes = consumes_of(row)
        if consumes is None and row.step_type in (SIGNAL, WAKE):
            consumes = []
        if consumes is not None:  # a row that consumes signals: its own statement (rare), never resting
            return await self._owning(
                eid,
                False,
                lambda take, _: self._owner_rows.ride(
                    eid,
                    take,
                    lambda via: self._write_planned("append_consume", row, None, (consumes,), via=via),
                ),
            )
        await self._owning(
            eid, row.step_type == RUN_END, lambda take, release: self._append_owned(row, take, release)
        )

    async def _append_owned(self, row: Checkpoint, take: str | None, release: str | None) -> None:
        """Append ``row`` carrying the run's ``take`` and ``release`` (group commit when its statement
        can carry them: all but a run whose first row is its ``run_end``)."""
        if take is None and release is None:
            return await self._append(row, _NO_OWNERSHIP)
        if take is not None and release is not None:
            # One statement cannot insert a run_owners row and delete it: a run whose first
            # row is its run_end takes it first, in the row's transaction.
            own, plan = (None, None, release), self._first_plan(row)
            return await self._owner_rows.ride(
                row.execution_id, take, lambda via: self._write_planned("append_own", row, plan, own, via=via)
            )
        key = None if take is None else owner_key(self.schema, take)
        await self._append(row, (take, key, release))

    async def append_copy(self, row: Checkpoint) -> None:
        """Append a row written in another store (see :meth:`ReplicatedStore.append_copy`), with no
        ownership. A row that touched its own store's inbox (rare) is written by a statement that
        does not touch this one's; any other goes through group commit like an append, and so does
        a model turn's row, unless ``"message"`` copies wait unconsumed here (then that statement)."""
        if consumes_of(row) is None and row.step_type not in (SIGNAL, WAKE):
            try:
                return await self._append(row, _NO_OWNERSHIP)
            except SignalsWaiting:
                pass
            except RunExists:  # a first turn refused for such copies reads as a taken run
                if row.step_type != LLM_CALL:
                    raise
        await self._write_planned("append_copy", row, None, ())

    def _first_plan(self, row: Checkpoint) -> Plan:
        """The row's plan (validating it); a refused row leaves no memory of its log."""
        try:
            return self._logs.plan(row)
        except BaseException:
            self._logs.forget(row.execution_id)
            raise

    async def _append(self, row: Checkpoint, own: tuple[str | None, int | None, str | None]) -> None:
        item = Queued(row, self._first_plan(row), own)
        try:
            pool = await self._ready()
        except BaseException:
            self._logs.forget(row.execution_id)
            raise
        self._queue.append(item)
        if self._flushers < self._max_flushers:
            self._flushers += 1
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
                self._flushers -= 1
                self._hand_off()
        if item.error is not None:
            raise item.error

    async def _flush_until(self, pool: asyncpg.Pool, item: Queued) -> None:
        """Write queued batches until ``item`` is done (it may be in another flusher's batch)."""
        # Under load (another flusher busy, or rows already queued), let appenders that are ready to
        # run queue their rows first, so they share this commit. A lone appender writes at once.
        if self._flushers > 1 or len(self._queue) > 1:
            await anyio.lowlevel.cancel_shielded_checkpoint()
        writer: asyncpg.pool.PoolConnectionProxy | None = None
        broken = False
        try:
            while not item.finished:
                if not self._queue:
                    await item.wait_done()
                    return
                batch, self._queue = self._queue[:_MAX_BATCH], self._queue[_MAX_BATCH:]
                with anyio.CancelScope(shield=True):  # the batch is other callers' writes too
                    if writer is None:
                        writer = self._idle_writer() or await self._take_writer(pool)
                    broken = await self._flush(writer, batch) or broken
        finally:
            if writer is not None:
                await self._give_back(pool, writer, broken)

    def _idle_writer(self) -> asyncpg.pool.PoolConnectionProxy | None:
        """A kept writer connection that is still usable, if any."""
        while self._writers:
            writer = self._writers.pop()
            if usable(writer):
                return writer
            self._prepared.pop(writer, None)  # lost: the pool has taken it back
        return None

    async def _take_writer(self, pool: asyncpg.Pool) -> asyncpg.pool.PoolConnectionProxy:
        with self._lost():
            conn: asyncpg.pool.PoolConnectionProxy = await pool.acquire(timeout=self._connect_timeout)
        self._prepared[conn] = {}
        return conn

    async def _statement(self, runner: object, kind: str) -> asyncpg.prepared_stmt.PreparedStatement | None:
        """The statement ``kind`` prepared on ``runner`` if it is a kept writer (prepared there on
        first use, so later writes of that kind skip the driver's statement-cache lookup); ``None``
        for any other runner."""
        prepared = self._prepared.get(runner)
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
        if not broken and self._pool is pool and usable(writer):
            self._writers.append(writer)
            return
        self._prepared.pop(writer, None)
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
                with self._lost():
                    recs = await writer.fetch(self._sql["batch"], *_batch_args(batch))
                written = {rec[0] for rec in recs}
            except (asyncpg.PostgresError, StoreUnavailable):
                written = set()  # e.g. two stale writers of one log in the batch: go one by one
        for item in batch:
            if item.row.checkpoint_id in written:
                item.finish(None)
                continue
            try:  # refused (or a batch of one): the single statement gives the exact outcome
                if item.own is _NO_OWNERSHIP:
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
        for waiting in self._queue:
            if self._flushers >= self._max_flushers:
                return
            if not waiting.lead:
                self._flushers += 1
                waiting.hand_lead()
                return

    def _abandon(self, item: Queued) -> None:
        """A waiting appender was cancelled: drop its row if not yet taken, pass on its lead."""
        if item in self._queue:
            self._queue.remove(item)
        self._logs.forget(item.row.execution_id)
        if item.lead:  # the slot reserved for it was never used
            self._flushers -= 1
            self._hand_off()
