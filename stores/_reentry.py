"""Reading a run's log backwards to where a resume, a recovery or a fork starts.

Shared by every backend so that they agree: the backend supplies two reads, this module walks.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from ._errors import already_finished, marker_not_step, no_checkpoint, no_checkpoints, no_step
from ._model import (
    BOOKKEEPING_STEPS,
    COMPLETED,
    REENTRY_SEQ,
    RESUME_KEY,
    RUN_END,
    Checkpoint,
    ReEntry,
)

__all__ = ["RowAt", "resolve_forkable", "resolve_reentry", "run_sync"]

T = TypeVar("T")
#: Reads one row of the run by ``seq`` (the row at it, or the newest row below it).
RowAt = Callable[[int], Awaitable[Checkpoint | None]]


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Drive a walk whose row readers never suspend (their awaits are plain functions) to its result.

    This is how a backend that reads on a database thread, or from rows already in memory, runs
    the same walk as one that awaits a round trip per row.
    """
    try:
        coro.send(None)
    except StopIteration as stop:
        result: T = stop.value
        return result
    coro.close()
    raise RuntimeError("a store read suspended inside a synchronous re-entry walk")


async def resolve_reentry(
    execution_id: str, newest: Checkpoint | None, row_at: RowAt, row_before: RowAt
) -> ReEntry:
    """Where a resume re-enters the run whose newest row is ``newest``.

    ``row_at(seq)`` reads the row at ``seq``; ``row_before(seq)`` the newest row below ``seq``.
    """
    if newest is None:
        raise no_checkpoints(execution_id)
    if newest.step_type == RUN_END and newest.status == COMPLETED:
        raise already_finished(execution_id)
    step, resume = await _read_through(execution_id, newest, row_at, row_before)
    return ReEntry(step=step, newest=newest, resume=resume)


async def resolve_forkable(
    execution_id: str,
    newest: Checkpoint | None,
    named: Checkpoint | None,
    checkpoint_id: str | None,
    row_at: RowAt,
    row_before: RowAt,
) -> Checkpoint:
    """The step a fork starts from: ``named`` when a ``checkpoint_id`` was given, else the newest step."""
    if checkpoint_id is not None:
        if named is None:
            raise no_checkpoint(execution_id, checkpoint_id)
        if named.step_type == RUN_END:
            raise marker_not_step(execution_id, checkpoint_id)
        start = named
    elif newest is None:
        raise no_checkpoints(execution_id)
    else:
        start = newest
    step, _ = await _read_through(execution_id, start, row_at, row_before)
    return step


async def _read_through(
    execution_id: str, row: Checkpoint, row_at: RowAt, row_before: RowAt
) -> tuple[Checkpoint, dict[str, Any] | None]:
    resume: dict[str, Any] | None = None
    current: Checkpoint | None = row
    while current is not None:
        if current.step_type == RUN_END:
            current = await row_before(current.seq)
            continue
        if current.step_type not in BOOKKEEPING_STEPS:
            return current, resume
        decision = current.node_input.get(RESUME_KEY)
        if resume is None and isinstance(decision, dict):
            resume = decision
        target = current.node_input.get(REENTRY_SEQ)
        if isinstance(target, int) and not isinstance(target, bool) and target < current.seq:
            current = await row_at(target)
        else:
            current = await row_before(current.seq)
    raise no_step(execution_id)
