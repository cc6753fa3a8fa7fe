"""The appends of :class:`~stores.PostgresStore`: which statement writes a row, and what of its
run's ownership the row carries. The rows themselves are written by the pool's group commit
(:class:`stores.postgres._writer.WriterPool`), or by the row's own statement where it must be.

A run's ownership rides on its rows where it can: a new run's take is written with its first row
(checked there, gating it) and a ``run_end`` deletes the run's ``run_owners`` row, in that row's
statement, so taking and releasing a run cost no round trip of their own.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable

from .._base import Plan
from .._codec import MessageLogs
from .._errors import RunExists
from .._model import LLM_CALL, RUN_END, SIGNAL, WAKE, Checkpoint
from .._owners import Ownership
from .._signals import SignalsWaiting
from ._inbox import consumes_of
from ._locks import owner_key
from ._owners import LockOwners
from ._writer import NO_OWNERSHIP, Own, Queued, WritePlanned, WriterPool

__all__ = ["Appends"]


class Appends:
    """The appends of :class:`~stores.PostgresStore`: which statement writes a row and what of its
    run's ownership it carries (``own``, and ``owner_rows``' ride); the rows go to the group commit
    of ``db`` or, one by one, to ``write_planned``, the store's single-row write. ``logs`` is the
    store's memory of the message logs, which plans each row."""

    def __init__(
        self,
        db: WriterPool,
        *,
        schema: str,
        logs: MessageLogs,
        own: Ownership,
        owner_rows: LockOwners,
        write_planned: WritePlanned,
    ) -> None:
        self._db = db
        self._schema = schema
        self._logs = logs
        self._own = own
        self._owner_rows = owner_rows
        self._write_planned = write_planned

    async def append(self, row: Checkpoint) -> None:
        """Append ``row``; a ``run_end`` also deletes the pending row (group commit, see the module)."""
        eid = row.execution_id
        self._own.check(eid)  # a run abandoned with a lost lock writes nothing more
        consumes = consumes_of(row)
        if consumes is None and row.step_type in (SIGNAL, WAKE):
            consumes = []
        if consumes is not None:  # a row that consumes signals: its own statement (rare), never resting
            return await self._own.carrying(
                eid,
                False,
                lambda take, _: self._owner_rows.ride(
                    eid,
                    take,
                    lambda via: self._write_planned("append_consume", row, None, (consumes,), via=via),
                ),
            )
        await self._own.carrying(eid, row.step_type == RUN_END, functools.partial(self._append_owned, row))

    def _append_owned(self, row: Checkpoint, take: str | None, release: str | None) -> Awaitable[None]:
        """Append ``row`` carrying the run's ``take`` and ``release`` (group commit when its statement
        can carry them: all but a run whose first row is its ``run_end``)."""
        if take is None and release is None:
            return self._append(row, NO_OWNERSHIP)
        if take is not None and release is not None:
            # One statement cannot insert a run_owners row and delete it: a run whose first
            # row is its run_end takes it first, in the row's transaction.
            own, plan = (None, None, release), self.first_plan(row)
            return self._owner_rows.ride(
                row.execution_id, take, lambda via: self._write_planned("append_own", row, plan, own, via=via)
            )
        key = None if take is None else owner_key(self._schema, take)
        return self._append(row, (take, key, release))

    async def append_copy(self, row: Checkpoint) -> None:
        """Append a row written in another store (see :meth:`ReplicatedStore.append_copy`), with no
        ownership. A row that touched its own store's inbox (rare) is written by a statement that
        does not touch this one's; any other goes through group commit like an append, and so does
        a model turn's row, unless ``"message"`` copies wait unconsumed here (then that statement)."""
        if consumes_of(row) is None and row.step_type not in (SIGNAL, WAKE):
            try:
                return await self._append(row, NO_OWNERSHIP)
            except SignalsWaiting:
                pass
            except RunExists:  # a first turn refused for such copies reads as a taken run
                if row.step_type != LLM_CALL:
                    raise
        await self._write_planned("append_copy", row, None, ())

    def first_plan(self, row: Checkpoint) -> Plan:
        """The row's plan (validating it); a refused row leaves no memory of its log."""
        try:
            return self._logs.plan(row)
        except BaseException:
            self._logs.forget(row.execution_id)
            raise

    def _append(self, row: Checkpoint, own: Own) -> Awaitable[None]:
        """Plan ``row`` and hand it to the pool's group commit (see :mod:`stores.postgres._writer`)."""
        return self._db.append(Queued(row, self.first_plan(row), own))
