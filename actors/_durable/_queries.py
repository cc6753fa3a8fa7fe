"""How runs stand, for any process: :class:`RunSummary`, :func:`run_status` and :func:`list_runs`.

One module read by ``ActorSystem.status``/``runs``, the ``tether`` command line and the inspector (as
DBOS's commands module serves both its CLI and its admin server). A summary joins what the rows say
(:meth:`stores.Store.heads`: completed, failed, paused, unfinished) with who owns an unfinished run
(:meth:`stores.Store.owned`, read without taking a lock): owned by a live process it is
``running``; handed to the fleet at its first row and not yet taken (``enqueue``) it is ``queued``;
its newest row a claimed pause (a ``resume`` row) that nobody drives yet, ``approved``; else
``orphaned`` (it crashed or it was stopped mid-step). The owners and the queue are read in one read
(:meth:`stores.OwnedStore.ownership`), after the rows; a run read as ``orphaned`` has its newest
row read again, so one that moved on between the reads is never reported ``orphaned``.
Nothing here writes or locks.

No ``from __future__ import annotations`` here: ``actors`` reports :class:`RunSummary` as
``actors.RunSummary``, and msgspec resolves string annotations in the module ``__module__`` names.
"""

from datetime import datetime
from typing import Final, Literal, get_args

import msgspec

from stores import RESUME, WAKE_AT, PendingInterrupt, RunHead, Store

from ..models import Usage
from ._errors import not_in_store
from ._owned import owned
from ._runlog import usage_of
from ._versions import VERSION

__all__ = ["RUN_STATUSES", "RunStatusName", "RunSummary", "list_runs", "run_status", "summarise"]

#: How a run stands (see :class:`RunSummary`).
RunStatusName = Literal[
    "completed", "failed", "paused", "waiting", "running", "orphaned", "approved", "queued"
]
#: Every status a run can have (not a row's: ``stores.STATUSES``).
RUN_STATUSES: Final[tuple[str, ...]] = get_args(RunStatusName)

#: How many times a run read as ``orphaned`` has its newest row read again when it moved (``_summaries``).
_RECHECKS: Final = 3
#: How many heads one page of a filtered listing reads (running, orphaned, approved and queued are
#: told apart after the read, so a filter on them may need several pages).
_PAGE: Final = 200


class RunSummary(msgspec.Struct, kw_only=True, frozen=True):
    """How one run stands, from the store and the ownership locks.

    ``status``: ``completed``, ``failed``, ``paused`` (``pending`` says for what), ``running`` (its
    newest row is not a resting row and a live process owns it), ``orphaned`` (the same row and no
    live owner), ``approved`` (its newest row is a claimed pause, the ``resume`` row of
    ``system.claim``, and no live process drives it yet: a worker's sweep or ``resume`` with the
    runner finishes it), ``queued`` (enqueued, not yet taken), ``waiting`` (a tool rests at a
    ``wait_signal`` or a ``sleep``: ``wake_at`` is when it is woken, if it has a time). ``node_id`` and ``agent_path`` are those of
    the newest row, ``rows`` the stored rows, ``updated_at`` the newest row's time; ``output`` and
    ``error`` are a finished run's; ``version`` the runner version the run was recorded under
    (``None``: an unversioned run), which a resume must find registered (``docs/versions.md``);
    ``queue`` and ``key`` those it was enqueued with (``None``: it was not enqueued); ``usage`` the
    tokens its model calls were billed for so far, as its newest row records them.
    """

    execution_id: str
    runner: str
    status: RunStatusName
    node_id: str
    agent_path: str | None
    rows: int
    updated_at: datetime
    output: str | None = None
    error: str | None = None
    pending: PendingInterrupt | None = None
    version: str | None = None
    queue: str | None = None
    key: str | None = None
    usage: Usage = Usage()
    wake_at: datetime | None = None


def summarise(
    head: RunHead,
    owned: bool,
    pending: PendingInterrupt | None = None,
    *,
    queued: bool = False,
    queue: tuple[str, str | None] | None = None,
) -> RunSummary:
    """The summary of a run from its head, whether a live process owns it, its pending row, and
    whether it waits in the fleet's queue (``queued``: handed to the fleet at its first row), and
    the queue and key it was enqueued with."""
    state = head.state
    status: RunStatusName
    if state == "unfinished":
        if owned:
            status = "running"
        elif queued:
            status = "queued"
        else:
            status = "approved" if head.step_type == RESUME else "orphaned"
    else:
        status = state
    output = head.snapshot.get("output") if status == "completed" else None
    version = head.snapshot.get(VERSION)
    error = (
        (head.snapshot.get("run_error") or head.snapshot.get("run_reason")) if status == "failed" else None
    )
    return RunSummary(
        execution_id=head.execution_id,
        runner=head.runner,
        status=status,
        node_id=head.node_id,
        agent_path=head.agent_path,
        rows=head.rows,
        updated_at=head.updated_at,
        output=output if isinstance(output, str) else None,
        error=str(error) if error is not None else None,
        pending=pending,
        version=version if isinstance(version, str) else None,
        queue=queue[0] if queue is not None else None,
        key=queue[1] if queue is not None else None,
        usage=usage_of(head.snapshot),
        wake_at=_wake_at(head) if status == "waiting" else None,
    )


def _wake_at(head: RunHead) -> datetime | None:
    """When a waiting run is woken (its ``wait`` row's deadline), if it has a time."""
    found = head.snapshot.get(WAKE_AT)
    return datetime.fromisoformat(found) if isinstance(found, str) else None


async def _ownership(store: Store, heads: list[RunHead]) -> tuple[set[str], set[str]]:
    """Of the unfinished runs, those a live owner holds, and of those still at their first row,
    those handed to the fleet and not yet taken (enqueued). Where the store records ownership the
    two are read at one instant (:meth:`stores.OwnedStore.ownership`): a run taken or handed to the
    fleet between two reads would be read as neither. A store without a fleet's ownership record
    has no queue."""
    unfinished = [h.execution_id for h in heads if h.state == "unfinished"]
    if not unfinished:
        return set(), set()
    found = owned(store)
    if found is None:
        return await store.owned(unfinished), set()
    live, unowned = await found.ownership(unfinished)
    first = {h.execution_id for h in heads if h.state == "unfinished" and h.seq == 0}
    return live, (unowned & first) - live


async def _summarised(store: Store, heads: list[RunHead]) -> list[RunSummary]:
    """The summaries of these heads, with their owners, pending rows and queues read after them."""
    live, queued = await _ownership(store, heads)
    ownership = owned(store)
    queues: dict[str, tuple[str, str | None]] = (
        await ownership.queues_of([h.execution_id for h in heads]) if ownership is not None and heads else {}
    )
    out = []
    for head in heads:
        pending = None
        if head.state == "paused":
            found = await store.pending(head.execution_id)
            pending = found[0] if found else None
        eid = head.execution_id
        out.append(summarise(head, eid in live, pending, queued=eid in queued, queue=queues.get(eid)))
    return out


async def _summaries(store: Store, heads: list[RunHead]) -> list[RunSummary]:
    """The summaries of these heads, each run read as ``orphaned`` confirmed first.

    The heads are read before the owners, so a run that moved on between the two reads (taken and
    driven by a sweep; rested, which deletes its ownership row in its resting row's transaction)
    would pair an old row with an owner that is gone. Such a run's newest row is read again: the
    same row means the run stood so when its owner was read; a newer one is summarised again, at
    most :data:`_RECHECKS` times (a run writes rows only while it is owned, or a cancel's resting
    row, so it is read as running or resting by then)."""
    heads = list(heads)
    out = await _summarised(store, heads)
    confirmed: set[int] = set()
    for _ in range(_RECHECKS):
        moved: dict[int, RunHead] = {}
        for i, summary in enumerate(out):
            if summary.status != "orphaned" or i in confirmed:
                continue
            fresh = await store.heads(execution_id=summary.execution_id, limit=1)
            if fresh and fresh[0].seq != heads[i].seq:
                moved[i] = heads[i] = fresh[0]
            else:
                confirmed.add(i)
        if not moved:
            break
        for i, summary in zip(moved, await _summarised(store, list(moved.values())), strict=True):
            out[i] = summary
    return out


async def run_status(store: Store, execution_id: str) -> RunSummary:
    """How the run stands; ``RunNotFound`` when the store has no row of it."""
    heads = await store.heads(execution_id=execution_id, limit=1)
    if not heads:
        raise not_in_store(execution_id)
    return (await _summaries(store, heads))[0]


async def list_runs(
    store: Store,
    *,
    status: str | None = None,
    runner: str | None = None,
    limit: int = 100,
    queue: str | None = None,
) -> list[RunSummary]:
    """Up to ``limit`` runs, newest first, optionally of one status, one runner's name and one queue.

    An unknown status or a limit below 1 raises ``ValueError`` before anything is read.
    """
    if status is not None and status not in RUN_STATUSES:
        raise ValueError(f"unknown run status {status!r}: use one of {', '.join(RUN_STATUSES)}")
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise ValueError(f"limit must be a positive int, not {limit!r}")
    if queue is not None and not isinstance(queue, str):
        raise ValueError(f"queue must be a queue's name, not {queue!r}")
    state = "unfinished" if status in ("running", "orphaned", "approved", "queued") else status
    if state == status and queue is None:  # the rows alone decide: one read
        return await _summaries(store, await store.heads(runner=runner, state=state, limit=limit))
    found: list[RunSummary] = []
    before = None
    while len(found) < limit:
        heads = await store.heads(runner=runner, state=state, before=before, limit=_PAGE)
        found += [
            s
            for s in await _summaries(store, heads)
            if (status is None or s.status == status) and (queue is None or s.queue == queue)
        ]
        if len(heads) < _PAGE:
            break
        before = (heads[-1].updated_at, heads[-1].execution_id)
    return found[:limit]
