"""The prune rule, once for every backend (rule 10 of docs/durability.md).

Older than the cutoff, prune deletes every row and cache entry of a run that completed (its newest
row is a completed ``run_end``), and of any other run only the completed rows that re-entry does not
read: the re-entry walk from the newest row (through ``run_end`` markers and the ``resume``/``recover``
rows, to the rows they name) is run over the run's skeleton, and every row it visits stays, with the
newest step row of each level of a topology (where that level re-enters), so the run resumes exactly
as before. A pause, a pending row or a cache entry of a run that has not
completed is never deleted, nor any row of a run resting at a wait, nor a signal. A backend reads the skeleton (:class:`PruneRow`), asks :func:`doomed`,
and deletes what it says in one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from ._errors import RunNotFound
from ._model import BOOKKEEPING_STEPS, COMPLETED, FORK_ORIGIN, RUN_END, SIGNAL, WAIT, WAKE, Checkpoint
from ._paths import conversation_of
from ._reentry import resolve_forkable, run_sync

__all__ = ["PruneRow", "doomed"]


class PruneRow(NamedTuple):
    """What prune needs of a row: ``old`` is ``created_at < cutoff``; ``node_input`` matters only
    for bookkeeping rows (a backend may leave it empty for the others); ``agent_path`` names the
    level of a topology the row belongs to."""

    seq: int
    step_type: str
    status: str
    old: bool
    node_input: dict[str, Any]
    agent_path: str | None = None


def doomed(execution_id: str, rows: Sequence[PruneRow]) -> tuple[bool, list[int]]:
    """``(completed, seqs)`` for one run whose rows are ``rows`` in ``seq`` order: the seqs prune
    deletes, and whether the run completed (then its old cache entries go too)."""
    if not rows:
        return False, []
    newest = rows[-1]
    if newest.step_type == RUN_END and newest.status == COMPLETED:
        return True, [row.seq for row in rows if row.old]
    if newest.step_type == WAIT:
        return False, []  # a waiting run's rows all stay: it is woken from them
    keep, path = _walked(execution_id, rows)
    keep |= _levels_above(rows, path)
    # A run's waits and what they consumed stay until it completes: a tool re-run from the top gets
    # back what its earlier passes consumed (a waiting run's rows are all kept so).
    keep |= {row.seq for row in rows if row.step_type in (WAIT, SIGNAL, WAKE)}
    return False, [row.seq for row in rows if row.old and row.status == COMPLETED and row.seq not in keep]


def _levels_above(rows: Sequence[PruneRow], path: str | None) -> set[int]:
    """In a topology, the newest step row of each level above the re-entered step at ``path``: where
    that level re-enters (a manager's delegation row, a swarm's newest hop), so a nested run resumes
    after a prune. A plain agent's run has no level above its own."""
    segments = conversation_of(path).split("/")
    above = {"/".join(segments[:depth]) for depth in range(1, len(segments))}
    newest: dict[str, int] = {}
    for row in rows:
        if row.step_type in (RUN_END, FORK_ORIGIN) or row.step_type in BOOKKEEPING_STEPS:
            continue
        level = conversation_of(row.agent_path)
        if level in above:
            newest[level] = row.seq
    return set(newest.values())


def _walked(execution_id: str, rows: Sequence[PruneRow]) -> tuple[set[int], str | None]:
    """The seqs the re-entry walk reads, starting from the newest row, and the path of the step it
    re-enters (``None`` when there is none)."""
    by_seq = {
        row.seq: Checkpoint(
            execution_id=execution_id,
            seq=row.seq,
            runner="",
            node_id="",
            step_type=row.step_type,
            status=row.status,
            node_input=row.node_input,
            agent_path=row.agent_path,
        )
        for row in rows
    }
    order = [row.seq for row in rows]
    visited = {order[-1]}

    async def row_at(seq: int) -> Checkpoint | None:
        found = by_seq.get(seq)
        if found is not None:
            visited.add(seq)
        return found

    async def row_before(seq: int) -> Checkpoint | None:
        below = [s for s in order if s < seq]
        if not below:
            return None
        visited.add(below[-1])
        return by_seq[below[-1]]

    try:
        step = run_sync(resolve_forkable(execution_id, by_seq[order[-1]], None, None, row_at, row_before))
    except RunNotFound:
        return visited, None  # only markers and bookkeeping: keep what the walk touched
    return visited, step.agent_path
