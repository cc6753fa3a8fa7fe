"""PostgreSQL rows: statement arguments from a plan, records back to rows, unique violations to refusals."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import asyncpg

from .._base import Plan
from .._codec import StoredRow, decode_row, replay_log
from .._errors import checkpoint_id_taken, pending_exists, run_exists, seq_taken
from .._json import decode
from .._model import Checkpoint, PendingInterrupt

__all__ = ["args", "conflict", "decode_many", "decode_one", "guarded", "log_of", "pending_of", "usable"]

_NO_LIMIT: Final = 2**31 - 1


def args(plan: Plan) -> tuple[Any, ...]:
    """The statement arguments of a planned row: its columns, its chunk and the log guard ($19-$21).

    The guard: how many messages the row's log must hold (the count of its newest row that added
    some): exactly the row's start when it adds messages, at least its count when it adds none;
    ``$21 = 0`` checks nothing (no log, or a new one).
    """
    stored, append = plan
    if append is not None:
        return (*stored, append.chunk, append.start, append.start)
    if stored.log_id is not None and stored.message_count:
        return (*stored, None, stored.message_count, _NO_LIMIT)
    return (*stored, None, 0, 0)


def guarded(plan: Plan) -> bool:
    """Whether the plan's write checks the stored log (only then can a refusal mean "re-plan")."""
    stored, append = plan
    if append is not None:
        return append.start != 0
    return stored.log_id is not None and stored.message_count != 0


def conflict(row: Checkpoint, exc: asyncpg.UniqueViolationError) -> Exception:
    """The refusal a unique violation stands for."""
    where = exc.constraint_name
    if where == "checkpoints_run_seq_key" and row.seq == 0:
        return run_exists(row.execution_id)
    if where == "pending_interrupts_pkey":
        return pending_exists(row.execution_id)
    if where == "checkpoints_checkpoint_id_key":
        return checkpoint_id_taken(row.execution_id, row.checkpoint_id)
    return seq_taken(row.execution_id, row.seq, row.node_id)


def pending_of(rec: asyncpg.Record) -> PendingInterrupt:
    """A pending row from its record."""
    return PendingInterrupt(
        execution_id=rec["execution_id"],
        reason=rec["reason"],
        context=decode(rec["context"]),
        node_id=rec["node_id"],
        agent_path=rec["agent_path"],
        created_at=rec["created_at"],
        expires_at=rec["expires_at"],
    )


def usable(writer: asyncpg.pool.PoolConnectionProxy) -> bool:
    """Whether a kept writer connection can run a statement (open, idle, still lent by the pool)."""
    try:
        return not writer.is_closed() and not writer.is_in_transaction()
    except asyncpg.InterfaceError:
        return False  # lost: the pool has already taken it back


def log_of(chunks: bytes | None) -> list[Any]:
    """The messages of a log from its ``_FULL_LOG`` value (``None``: no chunks)."""
    return [] if chunks is None else replay_log(decode(chunks), list)


def decode_one(rec: asyncpg.Record) -> Checkpoint:
    """A row whose record carries its full log (``_FULL_LOG``)."""
    return decode_row(StoredRow(*rec[:18]), log_of(rec[18])[: rec["message_count"]])


def decode_many(recs: Sequence[asyncpg.Record]) -> list[Checkpoint]:
    """Rows whose newest user of each log carries the full log (see ``_LOG_ONCE``)."""
    logs: dict[tuple[str, str], list[Any]] = {}
    for rec in recs:
        if rec[18] is not None:
            logs[(rec["execution_id"], rec["log_id"])] = log_of(rec[18])
    out = []
    for rec in recs:
        log_id = rec["log_id"]
        messages = logs.get((rec["execution_id"], log_id), []) if log_id is not None else []
        out.append(decode_row(StoredRow(*rec[:18]), messages[: rec["message_count"]]))
    return out
