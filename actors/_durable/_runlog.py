"""The rows half of a run: the ``seq`` allocator and the writes (append, pause, claim, run_end).

A :class:`RunLog` belongs to one activation of one run and is shared by every writer of that run in
this process, so all of them draw ``seq`` from one allocator ("the log is the lock" in
``docs/durability.md``): the unique ``(execution_id, seq)`` key makes a stale writer lose with
``WriteConflict``. It builds rows from what a writer hands it and knows nothing of agents, models
or transcripts, so the agent engine and the topologies write through the same code.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from stores import (
    HITL_PAUSE,
    INTERRUPTED,
    REENTRY_SEQ,
    RESUME_KEY,
    RUN_END,
    Checkpoint,
    PendingInterrupt,
    Store,
    decode_json,
    encode_json,
    new_id,
    utcnow,
)

from .._core import LOGGER, tether_logger

if TYPE_CHECKING:
    from ..models._stream import TextSink
    from ._follow import EventHub

__all__ = ["MARKER_TIMEOUT", "SHARED", "TOOL_SEQ", "RunLog", "StepLog", "step_seq"]

#: The snapshot key of the run's ``shared`` dict.
SHARED = "shared"

#: Bound on writing the run_end marker after a cancel or a failure (shielded).
MARKER_TIMEOUT = 10.0
#: A ``hitl_pause`` row's snapshot key holding the ``seq`` of the tool row it paused (the step
#: ``@idempotent`` keys by, so a resumed tool finds what its first pass cached).
TOOL_SEQ = "tool_seq"


def step_seq(row: Checkpoint) -> int:
    """The ``seq`` of the step ``row`` runs: its own, or for a pause the original tool row's."""
    if row.step_type == HITL_PAUSE:
        seq = row.state_snapshot.get(TOOL_SEQ)
        if isinstance(seq, int) and not isinstance(seq, bool):
            return seq
    return row.seq


class StepLog:
    """What a committed row tells the world: one INFO event per row written (``execution_id``,
    ``agent_path``, ``node_id``, ``step_type``), built only when the ``"tether"`` logger has INFO
    enabled, and the row itself to this process's event hub (``RunRef.events()``), with the text a
    model streams. A row is written before its step, so the event says what starts: ``step
    started``, ``run paused`` or ``run ended`` (with its status). ``last`` is the newest row
    written, for the warning of a run stopped mid-step."""

    __slots__ = ("_bindings", "_hub", "_logger", "last")

    def __init__(self, *, hub: EventHub | None = None, **bindings: object) -> None:
        self._bindings = bindings
        self._hub = hub
        self._logger: Any = None
        self.last: Checkpoint | None = None

    def text_sink(self, row: Checkpoint) -> TextSink | None:
        """Where the model call of ``row`` streams its text (None: nobody can listen)."""
        return self._hub.text_sink(row) if self._hub is not None else None

    def step(self, row: Checkpoint) -> None:
        """``row`` was committed: publish it, and log it with the step it starts."""
        self.last = row
        if self._hub is not None:
            self._hub.publish(row)
        if not LOGGER.isEnabledFor(logging.INFO):
            return
        if self._logger is None:
            self._logger = tether_logger(**self._bindings)
        extra: dict[str, object] = {}
        if row.step_type == HITL_PAUSE:
            event = "run paused"
        elif row.step_type == RUN_END:
            event, extra = "run ended", {"status": row.status}
        else:
            event = "step started"
        self._logger.info(
            event,
            execution_id=row.execution_id,
            agent_path=row.agent_path,
            node_id=row.node_id,
            step_type=row.step_type,
            seq=row.seq,
            **extra,
        )


class RunLog:
    """The rows of one activation of one run: the next ``seq`` and the four kinds of write.

    ``on_first_row`` is called once, after the first row this activation appended (``spawn`` waits on
    it to know the run owns its id); ``after_row`` is awaited after every step row appended (it may
    cancel the activation there: a run handed to the fleet stops once its step in flight has its row).
    """

    __slots__ = (
        "_after_row",
        "_next_seq",
        "_on_first_row",
        "execution_id",
        "hops",
        "log",
        "runner",
        "shared",
        "store",
    )

    def __init__(
        self,
        store: Store,
        execution_id: str,
        *,
        runner: str,
        log: StepLog,
        on_first_row: Callable[[], object] | None = None,
        after_row: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.store = store
        self.execution_id = execution_id
        self.runner = runner
        self.log = log
        self._next_seq = 0
        self._on_first_row = on_first_row
        self._after_row = after_row
        #: The run's ``shared`` dict (``current_run().shared``): every step row written while it is
        #: not empty carries a copy, so a re-entered step reads it back as it was at its row.
        self.shared: dict[str, Any] = {}
        #: The next ``handoff:N`` number of each swarm path of the run.
        self.hops: dict[str, int] = {}

    # -- seq ----------------------------------------------------------------------------------------

    def start_at(self, seq: int) -> None:
        """The next row takes ``seq`` (0 for a new run, the newest row's ``seq + 1`` on re-entry)."""
        self._next_seq = seq

    def take_seq(self) -> int:
        """Hand out the next ``seq``."""
        seq = self._next_seq
        self._next_seq += 1
        return seq

    # -- building rows ------------------------------------------------------------------------------

    def row(
        self,
        *,
        node_id: str,
        step_type: str,
        step_index: int,
        snapshot: dict[str, Any],
        agent_path: str,
        node_input: dict[str, Any] | None = None,
        parent: str | None = None,
    ) -> Checkpoint:
        """A step row at the next ``seq`` (with a copy of ``shared`` when it is not empty; never on
        a ``run_end`` marker, which must be writable whatever a tool put there)."""
        if self.shared and step_type != RUN_END:
            snapshot[SHARED] = decode_json(encode_json(self.shared, path="$.shared"))
        return Checkpoint(
            execution_id=self.execution_id,
            seq=self.take_seq(),
            runner=self.runner,
            node_id=node_id,
            step_index=step_index,
            step_type=step_type,
            state_snapshot=snapshot,
            node_input=node_input if node_input is not None else {},
            agent_path=agent_path,
            parent_checkpoint_id=parent,
        )

    def bookkeeping(self, step_type: str, step: Checkpoint, decision: dict[str, Any] | None) -> Checkpoint:
        """A ``resume`` or ``recover`` row naming the step it re-enters (and the decision, if any)."""
        node_input: dict[str, Any] = {REENTRY_SEQ: step.seq}
        if decision is not None:
            node_input[RESUME_KEY] = decision
        return Checkpoint(
            execution_id=self.execution_id,
            seq=self.take_seq(),
            runner=self.runner,
            node_id=step.node_id,
            step_index=step.step_index,
            step_type=step_type,
            node_input=node_input,
            agent_path=step.agent_path,
        )

    # -- writes -------------------------------------------------------------------------------------

    async def append(self, row: Checkpoint) -> None:
        """Append ``row`` (``WriteConflict`` / ``RunExists`` if its ``seq`` is taken)."""
        await self.store.append(row)
        self.log.step(row)
        if self._on_first_row is not None:
            notify, self._on_first_row = self._on_first_row, None
            notify()
        if self._after_row is not None:
            await self._after_row()

    async def claim(self, row: Checkpoint) -> None:
        """Append the ``resume`` row ``row`` and delete the pending row, atomically (``AlreadyResumed``
        for every claimer but one)."""
        await self.store.claim(row)
        self.log.step(row)

    async def pause(
        self, row: Checkpoint, reason: str, context: dict[str, Any], expires_in: float | None = None
    ) -> PendingInterrupt:
        """Write the ``hitl_pause`` row of the step ``row`` and its pending row in one transaction
        (the pending row expires ``expires_in`` seconds after the pause, if given)."""
        pause = msgspec.structs.replace(
            row,
            state_snapshot={**row.state_snapshot, TOOL_SEQ: step_seq(row)},
            seq=self.take_seq(),
            step_type=HITL_PAUSE,
            status=INTERRUPTED,
            interrupt_reason=reason,
            interrupt_context=context,
            checkpoint_id=new_id(),
            created_at=utcnow(),
        )
        pending = PendingInterrupt(
            execution_id=self.execution_id,
            reason=reason,
            context=context,
            node_id=row.node_id,
            agent_path=row.agent_path,
            created_at=pause.created_at,
            expires_at=None if expires_in is None else pause.created_at + timedelta(seconds=expires_in),
        )
        await self.store.append_pause(pause, pending)
        self.log.step(pause)
        return pending

    async def end(self, row: Checkpoint) -> None:
        """Append the ``run_end`` marker ``row``, shielded so a cancel cannot lose it and bounded by
        :data:`MARKER_TIMEOUT` (``TimeoutError`` if the write did not finish in time)."""
        # ``fail_after(shield=True)`` without its two generator layers: a shielded scope, then the
        # same TimeoutError if the deadline cut the write short.
        with anyio.CancelScope(deadline=anyio.current_time() + MARKER_TIMEOUT, shield=True) as scope:
            await self.append(row)
        if scope.cancelled_caught:
            raise TimeoutError
