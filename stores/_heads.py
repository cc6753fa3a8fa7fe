"""How runs stand by their rows alone: each run's newest row (its *head*), for listings and status.

A head says what the rows say: a run ``completed`` or ``failed`` (its ``run_end``), ``paused`` (its
newest row is a pause, whose pending row was written with it), ``waiting`` (its newest row is a
``wait``: a tool rests for a signal or a time) or ``unfinished`` (anything else: it is
running, it crashed, or a claimed pause waits for a driver). Telling running from crashed needs the
ownership locks, which :meth:`~stores.Store.owned` reads without taking any; ``actors`` combines the
two into ``RunSummary``. The SQL conditions for each state live here once, for both backends.

No ``from __future__ import annotations`` here: ``stores`` reports :class:`RunHead` as
``stores.RunHead``, and msgspec resolves string annotations in the module ``__module__`` names.
"""

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Final, Literal

import msgspec

from ._errors import SerializationError, check_execution_id
from ._json import decode
from ._model import COMPLETED, FAILED, HITL_PAUSE, RUN_END, WAIT

__all__ = [
    "ROW_STATES",
    "STATE_CONDITIONS",
    "RowState",
    "RunHead",
    "check_heads_arguments",
    "head_of",
    "heads_query",
    "row_state",
]

#: How a run stands by its rows alone.
RowState = Literal["completed", "failed", "paused", "waiting", "unfinished"]
ROW_STATES: Final[tuple[RowState, ...]] = ("completed", "failed", "paused", "waiting", "unfinished")

#: Each state as an SQL condition on the head's ``step_type`` and ``status`` columns (no parameters;
#: both backends put it after ``AND``).
STATE_CONDITIONS: Final[dict[str, str]] = {
    "completed": f"(step_type = '{RUN_END}' AND status = '{COMPLETED}')",
    "failed": f"(step_type = '{RUN_END}' AND status = '{FAILED}')",
    "paused": f"(step_type = '{HITL_PAUSE}')",
    "waiting": f"(step_type = '{WAIT}')",
    "unfinished": f"(step_type NOT IN ('{RUN_END}', '{HITL_PAUSE}', '{WAIT}'))",
}


def row_state(step_type: str, status: str) -> RowState:
    """The state of a run whose newest row has this ``step_type`` and ``status``."""
    if step_type == RUN_END:
        return "completed" if status == COMPLETED else "failed"
    if step_type == HITL_PAUSE:
        return "paused"
    if step_type == WAIT:
        return "waiting"
    return "unfinished"


class RunHead(msgspec.Struct, kw_only=True, frozen=True):
    """A run's newest row, summarised: what a listing of runs shows without reading every row.

    ``rows`` counts the run's stored rows; ``updated_at`` is the newest row's ``created_at``;
    ``snapshot`` its ``state_snapshot`` without the messages (a ``run_end`` holds ``output`` or
    ``run_error`` there).
    """

    execution_id: str
    runner: str
    seq: int
    rows: int
    node_id: str
    agent_path: str | None
    step_type: str
    status: str
    updated_at: datetime
    snapshot: dict[str, Any] = {}

    @property
    def state(self) -> RowState:
        """How the run stands by its rows alone (see :func:`row_state`)."""
        return row_state(self.step_type, self.status)


def heads_query(
    table: str,
    mark: Callable[[int], str],
    *,
    execution_id: str | None,
    runner: str | None,
    state: str | None,
    before: tuple[Any, str] | None,
    limit: int,
) -> tuple[str, list[Any]]:
    """The heads read for both backends: SQL text (``mark(n)`` writes the n-th parameter) and its
    arguments. Newest first, by the head's ``created_at`` then ``execution_id``; ``before`` is the
    ``(created_at, execution_id)`` of the last head of the previous page. An id the stores could
    never hold raises :class:`~stores.InvalidExecutionId` (a runner name UTF-8 cannot encode,
    :class:`~stores.SerializationError`) before any I/O, the same on every backend."""
    if execution_id is not None:
        check_execution_id(execution_id)
    if before is not None:
        check_execution_id(before[1])
    if runner is not None and not _encodable(runner):
        raise SerializationError(
            f"runner {runner!r} contains a lone surrogate, which UTF-8 cannot encode: no run has it",
            path="$.runner",
        )
    args: list[Any] = []

    def arg(value: Any) -> str:
        args.append(value)
        return mark(len(args))

    inner = f"WHERE execution_id = {arg(execution_id)} " if execution_id is not None else ""
    conditions = ["true"]
    if runner is not None:
        conditions.append(f"c.runner = {arg(runner)}")
    if state is not None:
        conditions.append(STATE_CONDITIONS[state])
    if before is not None:
        conditions.append(f"(c.created_at, c.execution_id) < ({arg(before[0])}, {arg(before[1])})")
    sql = (
        "SELECT c.execution_id, c.runner, c.seq, n.row_count, c.node_id, c.agent_path, c.step_type, "
        "c.status, c.created_at, c.state_snapshot "
        f"FROM (SELECT execution_id, max(seq) AS top, count(*) AS row_count FROM {table} {inner}"
        "GROUP BY execution_id) AS n "
        f"JOIN {table} AS c ON c.execution_id = n.execution_id AND c.seq = n.top "
        f"WHERE {' AND '.join(conditions)} "
        f"ORDER BY c.created_at DESC, c.execution_id DESC LIMIT {arg(limit)}"
    )
    return sql, args


def _encodable(text: object) -> bool:
    """Whether a filter value can reach the database (a str UTF-8 can encode)."""
    if not isinstance(text, str):
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_heads_arguments(state: str | None, limit: int) -> None:
    """Refuse a state that is not a row state and a limit below 1 (before any I/O)."""
    if state is not None and state not in STATE_CONDITIONS:
        raise ValueError(f"unknown run state {state!r}: use one of {', '.join(ROW_STATES)}")
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise ValueError(f"limit must be a positive int, not {limit!r}")


def head_of(found: Sequence[Any], updated_at: datetime) -> RunHead:
    """A head from the columns :func:`heads_query` selects (``updated_at`` converted by the backend)."""
    return RunHead(
        execution_id=found[0],
        runner=found[1],
        seq=found[2],
        rows=found[3],
        node_id=found[4],
        agent_path=found[5],
        step_type=found[6],
        status=found[7],
        updated_at=updated_at,
        snapshot=decode(found[9]),
    )
