"""Flow control on SQLite (the rules are ``stores._queues``): each function runs in a transaction of
the store's writer or reader. The writer's ``BEGIN IMMEDIATE`` serializes every take of the file, so
the counts a take reads are those it commits with.

A limited take is three statements: the run's ``run_owners`` row joined with its queue's row, the
owners of the queue's other runs and its recorded starts (one read), the take, and the start
recorded (with a rate: one slot of ``queue_starts`` written); an unlimited take is the read and the
take, as :func:`~._locks.take_row` is.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Final

from .._json import decode
from .._queues import TRIM_STARTS, Admission, Queue, Work, admit, start_slot, stricter
from ._locks import TAKE_SQL, LivenessFile, dead_owners

__all__ = ["declare_row", "hand_off_row", "queue_rows", "take_queued_row", "work_rows"]

_NOW: Final = "strftime('%Y-%m-%dT%H:%M:%f', 'now')"
# The run's owner, queue and key, its queue's limits; when a count limits the queue, per owner
# recorded with the queue's other runs, how many it holds and how many with the run's key (a JSON
# array: the owners are few, one per process); with a rate, how many starts are
# recorded and the top slot, and the oldest start and its slot (a queue keeps at most rate_count
# starts, so with rate_count of them the oldest is the rate_count-th most recent).
_LOOKUP: Final = """
SELECT o.owner, o.queue, o.key, q.name, q.concurrency, q.per_key, q.rate_count, q.rate_window,
       CASE WHEN q.concurrency IS NOT NULL OR (q.per_key IS NOT NULL AND o.key IS NOT NULL) THEN
           (SELECT json_group_array(json_array(c.owner, c.runs, c.keyed)) FROM (
                SELECT r.owner, count(*) AS runs, coalesce(sum(r.key = o.key), 0) AS keyed
                FROM run_owners r
                WHERE r.queue = o.queue AND r.owner IS NOT NULL AND r.execution_id <> o.execution_id
                GROUP BY r.owner) c)
       END,
       CASE WHEN q.rate_count IS NOT NULL THEN
           (SELECT json_array(count(*), max(s.slot)) FROM queue_starts s WHERE s.queue = o.queue) END,
       CASE WHEN q.rate_count IS NOT NULL THEN
           (SELECT json_array(s.at, s.slot) FROM queue_starts s WHERE s.queue = o.queue ORDER BY s.at LIMIT 1)
       END
FROM run_owners o LEFT JOIN queues q ON q.name = o.queue WHERE o.execution_id = ?"""
_START: Final = (
    "INSERT INTO queue_starts (queue, slot, at) VALUES (?, ?, ?) "
    "ON CONFLICT (queue, slot) DO UPDATE SET at = excluded.at"
)


def _queue(
    name: str, concurrency: int | None, per_key: int | None, count: int | None, window: float | None
) -> Queue:
    rate = (count, timedelta(seconds=window)) if count is not None and window is not None else None
    return Queue(name, concurrency=concurrency, per_key=per_key, rate=rate)


def take_queued_row(conn: sqlite3.Connection, execution_id: str, owner: str, lock: LivenessFile) -> Admission:
    """In a write transaction: take the run for ``owner`` unless a live other owner holds it or its
    queue's limits refuse it; a start is recorded in the queue's row."""
    found = conn.execute(_LOOKUP, (execution_id,)).fetchone()
    queue: Queue | None = None
    key = others = slots = oldest = None
    if found is not None:
        held_by, _, key, name, concurrency, per_key, count, window, others, slots, oldest = found
        if held_by is not None and held_by != owner and lock.alive(held_by):
            return Admission(False)
        if name is not None:
            queue = _queue(name, concurrency, per_key, count, window)
    now = time.time()
    recorded, top = decode(slots) if slots is not None else (0, None)
    first, first_slot = decode(oldest) if oldest is not None else (None, None)
    if queue is not None and queue.limited:
        live = keyed = 0
        for other, runs, with_key in decode(others) if others is not None else ():
            if lock.alive(other):
                live += runs
                keyed += with_key
        nth = first if queue.rate is not None and recorded >= queue.rate[0] else None
        admission = admit(queue, live, keyed if key is not None else None, nth, now)
        if not admission.taken:
            return admission._replace(queue=queue.name, key=key)
    conn.execute(TAKE_SQL, (execution_id, owner))
    if queue is not None and queue.rate is not None:
        slot = start_slot(recorded, top, first_slot, queue.rate[0])
        conn.execute(_START, (queue.name, slot, now))
    return Admission(True)


def hand_off_row(
    conn: sqlite3.Connection, execution_id: str, owner: str, queue: str, key: str | None, priority: int
) -> None:
    """In a write transaction: record the run's queue for good and hand it to the fleet in it."""
    conn.execute(
        "INSERT INTO run_queues (execution_id, queue, key, priority, enqueued_at) "
        f"VALUES (?, ?, ?, ?, {_NOW}) ON CONFLICT (execution_id) DO UPDATE SET queue = excluded.queue, "
        "key = excluded.key, priority = excluded.priority",
        (execution_id, queue, key, priority),
    )
    conn.execute(
        f"UPDATE run_owners SET owner = NULL, since = {_NOW}, queue = ?, key = ?, priority = ? "
        "WHERE execution_id = ? AND owner = ?",
        (queue, key, priority, execution_id, owner),
    )


def declare_row(
    conn: sqlite3.Connection, queue: Queue, owner: str, lock: LivenessFile
) -> tuple[Queue | None, Queue]:
    """In a write transaction: record ``owner``'s limits of the queue, the stricter of them and a
    live other declarer's; that declaration and the limits now in force."""
    found = conn.execute(
        "SELECT concurrency, per_key, rate_count, rate_window, declared_by FROM queues WHERE name = ?",
        (queue.name,),
    ).fetchone()
    other = None
    if found is not None and found[4] is not None and found[4] != owner and lock.alive(found[4]):
        other = _queue(queue.name, *found[:4])
    held = queue if other is None else stricter(other, queue)
    conn.execute(
        "INSERT INTO queues (name, concurrency, per_key, rate_count, rate_window, declared_by, declared_at) "
        f"VALUES (?, ?, ?, ?, ?, ?, {_NOW}) ON CONFLICT (name) DO UPDATE SET concurrency = excluded.concurrency, "
        "per_key = excluded.per_key, rate_count = excluded.rate_count, rate_window = excluded.rate_window, "
        "declared_by = excluded.declared_by, declared_at = excluded.declared_at",
        (
            held.name,
            held.concurrency,
            held.per_key,
            held.rate[0] if held.rate is not None else None,
            held.window,
            owner,
        ),
    )
    if held.rate is not None:
        conn.execute(TRIM_STARTS, (held.name, held.name, held.rate[0]))
    return other, held


def work_rows(
    conn: sqlite3.Connection,
    limit: int,
    lock: LivenessFile,
    full: Sequence[str] = (),
    full_keys: Sequence[tuple[str, str]] = (),
) -> list[Work]:
    """Runs whose owner's byte is unlocked (recovery first), then queued runs, higher priority
    first, then oldest, but for those of the queues ``full`` and the (queue, key) pairs ``full_keys``."""
    dead = dead_owners(conn, lock)
    found: list[Work] = []
    if dead:
        marks = ", ".join("?" for _ in dead)
        found = [
            Work(*row)
            for row in conn.execute(
                f"SELECT execution_id, queue, key FROM run_owners WHERE owner IN ({marks}) ORDER BY since LIMIT ?",
                (*dead, limit),
            )
        ]
    skip = "".join(" AND coalesce(queue <> ?, 1)" for _ in full)
    skip += "".join(" AND NOT coalesce(queue = ? AND key = ?, 0)" for _ in full_keys)
    queued = conn.execute(
        f"SELECT execution_id, queue, key FROM run_owners WHERE owner IS NULL{skip} "
        "ORDER BY priority DESC, since LIMIT ?",
        (*full, *(part for pair in full_keys for part in pair), limit - len(found)),
    )
    return found + [Work(*row) for row in queued]


def queue_rows(conn: sqlite3.Connection, execution_ids: Sequence[str]) -> dict[str, tuple[str, str | None]]:
    """The queue and key each of these runs was enqueued with."""
    found: dict[str, tuple[str, str | None]] = {}
    for start in range(0, len(execution_ids), 500):
        chunk = list(execution_ids[start : start + 500])
        marks = ", ".join("?" for _ in chunk)
        for eid, queue, key in conn.execute(
            f"SELECT execution_id, queue, key FROM run_queues WHERE execution_id IN ({marks})", chunk
        ):
            found[eid] = (queue, key)
    return found
