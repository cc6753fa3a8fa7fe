"""SQLite row statements and the helpers that run inside a transaction on a database thread.

Reads materialise rows with their message prefix (:class:`Ctx` loads each log once per hop); the
delete helpers move the messages of deleted rows onto the remaining rows that need them; the outbox
is a low-water mark (``outbox.low``) instead of an index every append would write.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from .._codec import StoredRow, decode_row, rechunk, replay_log, split_chunk
from .._json import decode
from .._model import BOOKKEEPING_STEPS, Checkpoint, PendingInterrupt
from .._prune import PruneRow, doomed
from .._reentry import RowAt

__all__ = [
    "INSERT_ROW",
    "LOG_LENGTH",
    "PENDING_COLUMNS",
    "ROW_COLUMNS",
    "Ctx",
    "delete_rows",
    "dt",
    "load_log",
    "lower_outbox_mark",
    "pending_of",
    "pending_query",
    "prune",
    "raise_outbox_mark",
    "rechunk_rows",
    "row_where",
    "rows_where",
    "ts",
    "walkers",
]

ROW_COLUMNS: Final = (
    "checkpoint_id, execution_id, seq, runner, node_id, step_index, step_type, status, state_snapshot, "
    "log_id, message_count, node_input, node_output, interrupt_reason, interrupt_context, agent_path, "
    "parent_checkpoint_id, created_at"
)
INSERT_ROW: Final = (
    f"INSERT INTO checkpoints ({ROW_COLUMNS}, new_messages, synced) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
# How many messages a log holds: the count of its newest row that added some.
LOG_LENGTH: Final = (
    "SELECT message_count FROM checkpoints WHERE execution_id = ? AND log_id = ? "
    "AND new_messages IS NOT NULL ORDER BY seq DESC LIMIT 1"
)
_LOG_CHUNKS: Final = (
    "SELECT message_count, new_messages FROM checkpoints WHERE execution_id = ? AND log_id = ? "
    "AND new_messages IS NOT NULL ORDER BY seq"
)
PENDING_COLUMNS: Final = "execution_id, reason, context, node_id, agent_path, created_at, expires_at"
_PRUNE_CANDIDATES: Final = (
    "SELECT DISTINCT execution_id FROM checkpoints WHERE created_at < ? "
    "UNION SELECT DISTINCT execution_id FROM idempotency_cache WHERE created_at < ?"
)
#: A row or cache entry prune may delete: sent, or the store was never attached to a replicator.
SENT: Final = "(synced = 1 OR NOT EXISTS (SELECT 1 FROM replica))"
_PRUNE_SKELETON: Final = (
    f"SELECT seq, step_type, status, created_at < ? AND {SENT}, CASE WHEN step_type IN ("
    + ", ".join(f"'{step}'" for step in sorted(BOOKKEEPING_STEPS))
    + ") THEN node_input END, agent_path FROM checkpoints WHERE execution_id = ? ORDER BY seq"
)


# Two and three digits of a number, zero-padded: a timestamp is built from these by indexing, where
# formatting its seven numbers (``isoformat`` or ``%``) costs ~1.3K instructions each.
_DIGITS2: Final = tuple(f"{i:02d}" for i in range(100))
_DIGITS3: Final = tuple(f"{i:03d}" for i in range(1000))


def ts(value: datetime) -> str:
    """A fixed-width, sortable UTC timestamp (naive datetimes are taken as UTC): the
    ``isoformat`` of the UTC time with microseconds, ``YYYY-MM-DDTHH:MM:SS.ffffff+00:00``."""
    if value.tzinfo is not UTC:  # the common case (utcnow()) needs no conversion
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        value = value.astimezone(UTC)
    d2, year, micro = _DIGITS2, value.year, value.microsecond
    return (
        f"{d2[year // 100]}{d2[year % 100]}-{d2[value.month]}-{d2[value.day]}T{d2[value.hour]}:"
        f"{d2[value.minute]}:{d2[value.second]}.{_DIGITS3[micro // 1000]}{_DIGITS3[micro % 1000]}+00:00"
    )


def dt(value: str) -> datetime:
    """The datetime of a stored :func:`ts` timestamp."""
    return datetime.fromisoformat(value).astimezone(UTC)


class Ctx:
    """What one read hop loaded: full message logs by ``log_id``, each row's log, the seqs visited."""

    __slots__ = ("logs", "row_logs", "visited")

    def __init__(self) -> None:
        self.logs: dict[str, list[Any]] = {}
        self.row_logs: dict[str, str] = {}
        self.visited: set[int] = set()


def pending_query(
    execution_id: str | None, limit: int | None, after: PendingInterrupt | None
) -> tuple[str, tuple[Any, ...]]:
    """The statement of one ``pending()`` page: a keyset range of the ``pending_created`` index
    (newest first), so a page reads ``limit`` index entries however many runs are paused."""
    where: list[str] = []
    args: list[Any] = []
    if execution_id is not None:
        where.append("execution_id = ?")
        args.append(execution_id)
    if after is not None:
        where.append("(created_at, execution_id) < (?, ?)")
        args += [ts(after.created_at), after.execution_id]
    sql = f"SELECT {PENDING_COLUMNS} FROM pending_interrupts"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY created_at DESC, execution_id DESC"
    if limit is not None:
        sql += " LIMIT ?"
        args.append(limit)
    return sql, tuple(args)


def pending_of(found: Sequence[Any]) -> PendingInterrupt:
    """A pending row from its ``PENDING_COLUMNS``."""
    return PendingInterrupt(
        execution_id=found[0],
        reason=found[1],
        context=decode(found[2]),
        node_id=found[3],
        agent_path=found[4],
        created_at=dt(found[5]),
        expires_at=None if found[6] is None else dt(found[6]),
    )


def load_log(
    conn: sqlite3.Connection, execution_id: str, log_id: str, split: Callable[[bytes], list[Any]] = decode
) -> list[Any]:
    """A log's messages (decoded, or as JSON bytes with ``split=split_chunk``)."""
    return replay_log(conn.execute(_LOG_CHUNKS, (execution_id, log_id)).fetchall(), split)


def _materialise(conn: sqlite3.Connection, ctx: Ctx, found: Sequence[Any]) -> Checkpoint:
    stored = StoredRow._make([*found[:17], dt(found[17])])
    messages: list[Any] | None = None
    if stored.log_id is not None:
        full = ctx.logs.get(stored.log_id)
        if full is None:
            full = ctx.logs[stored.log_id] = load_log(conn, stored.execution_id, stored.log_id)
        messages = full[: stored.message_count]
        ctx.row_logs[stored.checkpoint_id] = stored.log_id
    ctx.visited.add(stored.seq)
    return decode_row(stored, messages)


def rows_where(conn: sqlite3.Connection, ctx: Ctx, where: str, args: Sequence[Any]) -> list[Checkpoint]:
    """The rows matching ``where``, materialised."""
    cursor = conn.execute(f"SELECT {ROW_COLUMNS} FROM checkpoints WHERE {where}", args)
    return [_materialise(conn, ctx, found) for found in cursor.fetchall()]


def row_where(conn: sqlite3.Connection, ctx: Ctx, where: str, args: Sequence[Any]) -> Checkpoint | None:
    """The first row matching ``where``, or ``None``."""
    rows = rows_where(conn, ctx, where, args)
    return rows[0] if rows else None


def walkers(conn: sqlite3.Connection, ctx: Ctx, execution_id: str) -> tuple[Checkpoint | None, RowAt, RowAt]:
    """The newest row and the two (never-suspending) row readers the re-entry walk needs."""

    async def row_at(seq: int) -> Checkpoint | None:
        return row_where(conn, ctx, "execution_id = ? AND seq = ?", (execution_id, seq))

    async def row_before(seq: int) -> Checkpoint | None:
        return row_where(
            conn, ctx, "execution_id = ? AND seq < ? ORDER BY seq DESC LIMIT 1", (execution_id, seq)
        )

    newest = row_where(conn, ctx, "execution_id = ? ORDER BY seq DESC LIMIT 1", (execution_id,))
    return newest, row_at, row_before


def prune(conn: sqlite3.Connection, cutoff: str) -> tuple[int, set[str]]:
    """The prune rule (:mod:`stores._prune`) in the caller's write transaction.

    Returns the rows deleted and the runs that lost rows.
    """
    candidates = {eid for (eid,) in conn.execute(_PRUNE_CANDIDATES, (cutoff, cutoff))}
    deleted = 0
    touched: set[str] = set()
    for eid in candidates:
        skeleton = [
            PruneRow(
                seq, step_type, status, bool(old), {} if node_input is None else decode(node_input), path
            )
            for seq, step_type, status, old, node_input, path in conn.execute(_PRUNE_SKELETON, (cutoff, eid))
        ]
        if not skeleton:
            continue  # a cache of a run without rows has not completed: keep it
        completed, seqs = doomed(eid, skeleton)
        if completed:
            conn.execute(
                f"DELETE FROM idempotency_cache WHERE execution_id = ? AND created_at < ? AND {SENT}",
                (eid, cutoff),
            )
        if seqs:
            deleted += delete_rows(conn, eid, seqs)
            touched.add(eid)
    if deleted:
        lower_outbox_mark(conn)
    return deleted, touched


def delete_rows(conn: sqlite3.Connection, execution_id: str, seqs: list[int]) -> int:
    """Delete rows of one run; the messages they added move onto the remaining rows that need them."""
    doomed_seqs = set(seqs)
    losing = {
        log_id
        for seq, log_id in conn.execute(
            "SELECT seq, log_id FROM checkpoints WHERE execution_id = ? AND new_messages IS NOT NULL",
            (execution_id,),
        )
        if seq in doomed_seqs
    }
    moved = {log_id: load_log(conn, execution_id, log_id, split_chunk) for log_id in losing}
    conn.executemany(
        "DELETE FROM checkpoints WHERE execution_id = ? AND seq = ?", [(execution_id, s) for s in seqs]
    )
    for log_id, bodies in moved.items():
        rows = conn.execute(
            "SELECT id, message_count, new_messages FROM checkpoints WHERE execution_id = ? AND log_id = ? "
            "ORDER BY seq",
            (execution_id, log_id),
        ).fetchall()
        rechunk_rows(conn, rows, bodies)
    return len(seqs)


def rechunk_rows(conn: sqlite3.Connection, rows: Sequence[Sequence[Any]], bodies: list[bytes]) -> None:
    """Give the rows of one log, ``(id, message_count, new_messages)`` in seq order, the chunks
    :func:`stores._codec.rechunk` assigns them (only rows whose chunk changes are written)."""
    chunks = rechunk([found[1] for found in rows], bodies)
    conn.executemany(
        "UPDATE checkpoints SET new_messages = ? WHERE id = ?",
        [(chunk, found[0]) for found, chunk in zip(rows, chunks, strict=True) if found[2] != chunk],
    )


# The outbox is the rows with ``synced = 0``; ``outbox.low`` is a mark no such row lies below, so
# fetching scans the table from there instead of keeping an index that every append would write.
def raise_outbox_mark(conn: sqlite3.Connection) -> None:
    """Move the mark up to the oldest row still unsynced (after rows were marked synced)."""
    conn.execute(
        "UPDATE outbox SET low = coalesce((SELECT id FROM checkpoints WHERE id >= outbox.low AND synced = 0 "
        "ORDER BY id LIMIT 1), (SELECT coalesce(max(id), 0) + 1 FROM checkpoints))"
    )


def lower_outbox_mark(conn: sqlite3.Connection) -> None:
    """Keep the mark at most one past the newest row (after a delete).

    SQLite gives a new row the id after the largest one left, so deleting the newest rows would
    otherwise let the next row take an id below the mark, and the outbox would never send it.
    """
    conn.execute("UPDATE outbox SET low = min(low, (SELECT coalesce(max(id), 0) + 1 FROM checkpoints))")
