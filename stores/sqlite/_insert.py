"""The one insert of a planned row on SQLite, inside the caller's write transaction: the refusals of
a taken run, ``seq`` or id, the log guard (:class:`~stores._base.LogMoved`), and the inbox guard a
row runs when it reads or consumes the run's inbox."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable
from typing import Final, Protocol, TypeVar

from .._base import LogMoved, Plan
from .._errors import checkpoint_id_taken, run_exists, seq_taken, signals_taken
from .._model import LLM_CALL, RUN_END, Checkpoint
from .._signals import MESSAGE, SignalsWaiting, consumed_ids, guards_steering
from ._rows import INSERT_ROW, LOG_LENGTH, ts

__all__ = ["INBOX_STEPS", "RowOp", "WriteRow", "inbox_guard", "insert_row"]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class RowOp(Protocol[T_co]):
    """What a planned row's write runs in its transaction: called as ``op(conn, plan=plan)`` (the
    plan bound by keyword, so the writer thread calls it with no frame of Python between)."""

    def __call__(self, conn: sqlite3.Connection, plan: Plan) -> T_co: ...


class WriteRow(Protocol):
    """Plan ``row`` and run ``op(conn, plan)`` in one write transaction with the run's ownership
    riding in it (``resting``: the row rests the run, so its release rides too)."""

    def __call__(self, row: Checkpoint, resting: bool, op: RowOp[T]) -> Awaitable[T]: ...


#: Rows whose write reads or consumes the inbox: a model turn's (steering), a tool's consuming one.
INBOX_STEPS: Final = frozenset({"llm_call", "signal", "wake"})


def inbox_guard(conn: sqlite3.Connection, eid: str, seq: int, step_type: str, node_input: bytes) -> None:
    """Inside a row's transaction: a wait's ``signal``/``wake`` row ends the run's recorded wait
    and marks the signals it consumes (all of them unconsumed, else ``WriteConflict``); refuse a model turn's row while steering messages wait
    (:class:`~stores._signals.SignalsWaiting`, one probe of the inbox's partial index)."""
    consumes = consumed_ids(node_input)
    if step_type != LLM_CALL:  # a wait's end: the run no longer rests at it
        conn.execute("DELETE FROM run_waits WHERE execution_id = ? AND seq < ?", (eid, seq))
    if consumes:
        marks = ", ".join("?" * len(consumes))
        done = conn.execute(  # the consumption is the entry's new state: to send (synced = 0)
            f"UPDATE signals SET consumed_seq = ?, synced = 0 WHERE execution_id = ? AND consumed_seq IS NULL "
            f"AND id IN ({marks})",
            (seq, eid, *consumes),
        ).rowcount
        if done != len(consumes):
            raise signals_taken(eid, seq)
    elif (
        guards_steering(step_type, consumes)
        and conn.execute(
            "SELECT 1 FROM signals WHERE execution_id = ? AND name = ? AND consumed_seq IS NULL LIMIT 1",
            (eid, MESSAGE),
        ).fetchone()
    ):
        raise SignalsWaiting(eid)


def insert_row(conn: sqlite3.Connection, plan: Plan, synced: int = 0, *, copied: bool = False) -> None:
    """Insert a planned row with the messages it adds (inside the caller's transaction). A row
    imported (``synced``) or copied from another store does nothing to the inbox here."""
    stored, log = plan
    eid = stored.execution_id
    if (
        stored.seq == 0
        and conn.execute("SELECT 1 FROM checkpoints WHERE execution_id = ? LIMIT 1", (eid,)).fetchone()
    ):
        raise run_exists(eid)
    need = log.start if log is not None else stored.message_count
    if stored.log_id is not None and need:
        last = conn.execute(LOG_LENGTH, (eid, stored.log_id)).fetchone()
        have = 0 if last is None else last[0]
        if (log is not None and have != need) or have < need:
            raise LogMoved
    # JSON columns go as bytearray: the driver binds it as the same BLOB as bytes, without the
    # adapter lookup it makes for every bytes value.
    blob = bytearray
    (cid, eid, seq, runner, node, index, step, status, state, log_id, count, node_input, node_output,
     reason, context, path, parent, created) = stored  # fmt: skip
    args = (
        cid, eid, seq, runner, node, index, step, status, blob(state), log_id, count, blob(node_input),
        blob(node_output), reason, blob(context), path, parent, ts(created),
        None if log is None else blob(log.chunk), synced,
    )  # fmt: skip
    if stored.step_type in INBOX_STEPS and not synced and not copied:  # else rows as they were
        inbox_guard(conn, eid, seq, stored.step_type, node_input)
    try:
        conn.execute(INSERT_ROW, args)
    except sqlite3.IntegrityError as exc:
        if "checkpoint_id" in str(exc):
            raise checkpoint_id_taken(eid, stored.checkpoint_id) from exc
        raise seq_taken(eid, stored.seq, stored.node_id) from exc
    if stored.step_type == RUN_END:
        conn.execute("DELETE FROM pending_interrupts WHERE execution_id = ?", (eid,))
