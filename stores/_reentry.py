"""Reading a run's log backwards to where a resume, a recovery or a fork starts.

Shared by every backend so that they agree: the backend supplies two reads, this module walks.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ._errors import AlreadyResumed, CheckpointError, RunNotFound
from ._model import (
    BOOKKEEPING_STEPS,
    COMPLETED,
    REENTRY_SEQ,
    RESUME_KEY,
    RUN_END,
    Checkpoint,
    ReEntry,
)

__all__ = ["resolve_forkable", "resolve_reentry"]

RowAt = Callable[[int], Awaitable[Checkpoint | None]]


async def resolve_reentry(
    execution_id: str, newest: Checkpoint | None, row_at: RowAt, row_before: RowAt
) -> ReEntry:
    """Where a resume re-enters the run whose newest row is ``newest``.

    ``row_at(seq)`` reads the row at ``seq``; ``row_before(seq)`` the newest row below ``seq``.
    """
    if newest is None:
        raise RunNotFound(f"run {execution_id!r} has no checkpoints")
    if newest.step_type == RUN_END and newest.status == COMPLETED:
        raise AlreadyResumed(
            f"run {execution_id!r} already finished (completed): there is nothing to resume; "
            "fork it to branch under a new id"
        )
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
            raise RunNotFound(f"run {execution_id!r} has no checkpoint {checkpoint_id!r}")
        if named.step_type == RUN_END:
            raise CheckpointError(
                f"checkpoint {checkpoint_id!r} of run {execution_id!r} is the run-end marker, not a step "
                "of the run; fork from a step (or omit checkpoint_id for the newest step)"
            )
        start = named
    elif newest is None:
        raise RunNotFound(f"run {execution_id!r} has no checkpoints")
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
    raise RunNotFound(f"run {execution_id!r} has no step to re-enter (only markers and bookkeeping rows)")
