"""The rows half of a run: the ``seq`` allocator and the writes (append, pause, claim, run_end).

A :class:`RunLog` belongs to one activation of one run and is shared by every writer of that run in
this process, so all of them draw ``seq`` from one allocator ("the log is the lock" in
``docs/durability.md``): the unique ``(execution_id, seq)`` key makes a stale writer lose with
``WriteConflict``. It builds rows from what a writer hands it and knows nothing of agents, models
or transcripts, so the agent engine and the topologies write through the same code.

A store outage is a pause, not a failure (:func:`outlast`): a write the store could not make, or
whose outcome is unknown, is retried with the same row (same ``seq`` and ``checkpoint_id``; a retry
that finds that row committed is done), with backoff, for up to the system's ``store_outage_grace``.
If the store is still unusable then, the run is abandoned as on lock loss (``OwnershipLost``): it
stops and writes nothing more, no failed marker, no gap in ``seq``, for a sweep to recover.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar, cast

import anyio
import anyio.lowlevel
import msgspec

from stores import (
    HITL_PAUSE,
    INTERRUPTED,
    REENTRY_SEQ,
    RESUME_KEY,
    RUN_END,
    WAIT,
    WAKE_AT,
    AlreadyResumed,
    Checkpoint,
    OwnershipLost,
    PendingInterrupt,
    RunExists,
    Store,
    StoreError,
    StoreUnavailable,
    WriteConflict,
    decode_json,
    encode_json,
    new_id,
    utcnow,
)

from .._core import LOGGER, shielded, tether_logger
from ..models import Usage
from ._versions import FINGERPRINT, FINGERPRINTS, VERSION

if TYPE_CHECKING:
    from ..models._stream import TextSink
    from ._follow import EventHub
    from ._sources import Connections
    from ._tool_watch import ToolWatch
    from ._trace import RunTrace

__all__ = [
    "DEFAULT_OUTAGE_GRACE",
    "MARKER_TIMEOUT",
    "SHARED",
    "TOOL_SEQ",
    "TRACE",
    "USAGE",
    "RunLog",
    "StepAbandoned",
    "StepLog",
    "cancelled_elsewhere",
    "outage_abandoned",
    "outlast",
    "refusal_abandoned",
    "step_seq",
    "usage_of",
]

T = TypeVar("T")

#: The snapshot key of the run's ``shared`` dict.
SHARED = "shared"
#: The snapshot key of the tokens the run's model calls were billed for so far: every row written
#: after a model reply that reported usage carries the run's running total (``input_tokens``,
#: ``output_tokens``), so the row right after a call's reply is the first to count it, and the
#: newest row (a ``run_end`` too) holds the run's total.
USAGE = "usage"
_TOKENS = frozenset({"input_tokens", "output_tokens"})
#: The snapshot key of the run's trace (``actors._durable._trace``): a W3C ``traceparent``.
TRACE = "trace"

#: Bound on one attempt at writing the run_end marker (shielded, so its outcome is known; an
#: attempt cut short is retried like any write whose outcome is unknown).
MARKER_TIMEOUT = 10.0
#: How long a run rides out a store it cannot write to before it is abandoned (seconds; the
#: default of ``ActorSystem(store_outage_grace=...)``).
DEFAULT_OUTAGE_GRACE = 60.0
#: The first pause between two attempts at a write the store could not make, and the longest.
_FIRST_PAUSE = 0.05
_LONGEST_PAUSE = 0.25

_log = tether_logger()
#: A ``hitl_pause`` row's snapshot key holding the ``seq`` of the tool row it paused (the step
#: ``@idempotent`` keys by, so a resumed tool finds what its first pass cached).
TOOL_SEQ = "tool_seq"


def step_seq(row: Checkpoint) -> int:
    """The ``seq`` of the step ``row`` runs: its own, or for a pause the original tool row's."""
    if row.step_type in (HITL_PAUSE, WAIT):
        seq = row.state_snapshot.get(TOOL_SEQ)
        if isinstance(seq, int) and not isinstance(seq, bool):
            return seq
    return row.seq


def usage_of(snapshot: dict[str, Any]) -> Usage:
    """The usage total a row's snapshot carries (none: zero tokens)."""
    stored = snapshot.get(USAGE)
    if not isinstance(stored, dict):
        return Usage()
    return Usage(**{k: v for k, v in stored.items() if k in _TOKENS and type(v) is int})


class StepAbandoned(BaseException):
    """Raised out of a tool when an ``@idempotent`` call may not go on: its lookup or put outlasted
    the store's grace, the run's lock is lost, or the run was cancelled from another process. Not an
    ``Exception``, so no tool (nor its ``except Exception``) turns it into a result the model reads;
    the engine re-raises :attr:`lost` and the run stops without writing."""

    def __init__(self, lost: StoreError | WriteConflict) -> None:
        super().__init__(str(lost))
        self.lost = lost


def cancelled_elsewhere(execution_id: str) -> WriteConflict:
    """The error of a run whose step was stopped because another process cancelled the run."""
    return WriteConflict(
        f"run {execution_id!r} was cancelled from another process (its failed run_end marker is "
        "written): the step in flight was stopped, and no @idempotent body or tool starts for it"
    )


def outage_abandoned(execution_id: str, grace: float, error: BaseException) -> OwnershipLost:
    """The error of a run abandoned because its store stayed unusable for ``grace`` seconds."""
    return OwnershipLost(
        f"run {execution_id!r} was abandoned: its store stayed unusable for {grace:g} s "
        f"({type(error).__name__}: {error}); it stopped without writing, and a sweep recovers it "
        "once the store is back"
    )


def refusal_abandoned(execution_id: str, what: str, error: BaseException) -> OwnershipLost:
    """The error of a run abandoned because its store refused ``what`` with an error that is not
    an outage (a corrupt entry, a schema it does not know): no retry would help."""
    return OwnershipLost(
        f"run {execution_id!r} was abandoned: its store refused the {what} ({type(error).__name__}: "
        f"{error}); it stopped without writing"
    )


async def outlast(
    attempt: Callable[[], Awaitable[T]],
    *,
    execution_id: str,
    grace: float,
    what: str,
    committed: Callable[[], Awaitable[bool]] | None = None,
    failed: StoreUnavailable | None = None,
) -> T:
    """``await attempt()``, again and again while the store is unusable (``StoreUnavailable``,
    which covers a lost connection and a write whose outcome is unknown), with backoff, for up to
    ``grace`` seconds; then ``OwnershipLost`` (see :func:`outage_abandoned`). ``failed`` is the
    error of an attempt the caller made already (its common case tries once, without this loop):
    the loop goes on from there.

    A lost lock (``OwnershipLost``) is never retried. After an outage, a retry refused because its
    row is taken (``AlreadyResumed``, ``WriteConflict``, ``RunExists``) asks ``committed()``: ``True``
    means the row is the one this write made, whose commit the outage hid, and the write is done
    (``committed`` is for writes that return ``None``).
    """
    deadline: float | None = None
    pause = _FIRST_PAUSE
    while True:
        if failed is None:
            try:
                return await attempt()
            except OwnershipLost:
                raise
            except StoreUnavailable as unusable:
                failed = unusable
            except (AlreadyResumed, RunExists):
                if deadline is None or committed is None:
                    raise
                if not await outlast(committed, execution_id=execution_id, grace=grace, what=what):
                    raise
                return cast("T", None)
        elif isinstance(failed, OwnershipLost):
            raise failed
        error, failed = failed, None
        now = anyio.current_time()
        if deadline is None:
            deadline = now + grace
            _log.warning("store unusable: retrying", execution_id=execution_id, write=what, error=repr(error))
        if now >= deadline:
            raise outage_abandoned(execution_id, grace, error) from error
        await anyio.sleep(min(pause, deadline - now))
        pause = min(pause * 2, _LONGEST_PAUSE)


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

    def committed(self, row: Checkpoint) -> None:
        """``row`` was committed: publish it, and log it with the step it starts."""
        self.last = row
        if self._hub is not None and row.execution_id in self._hub.followed:
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
    it to know the run owns its id); ``after_row`` is called after every step row appended and says
    whether it cancelled the activation there (a run handed to the fleet stops once its step in
    flight has its row): the write then checkpoints, so the cancel lands before the step starts.
    """

    __slots__ = (
        "_after_row",
        "_billed",
        "_next_seq",
        "_on_first_row",
        "execution_id",
        "fingerprint",
        "grace",
        "hops",
        "log",
        "runner",
        "shared",
        "sources",
        "store",
        "tool_watch",
        "trace",
        "traceparent",
        "usage",
        "version",
    )

    def __init__(
        self,
        store: Store,
        execution_id: str,
        *,
        runner: str,
        log: StepLog,
        on_first_row: Callable[[], object] | None = None,
        after_row: Callable[[], bool] | None = None,
        grace: float = DEFAULT_OUTAGE_GRACE,
        version: str | None = None,
        fingerprint: dict[str, Any] | None = None,
        tool_watch: ToolWatch | None = None,
    ) -> None:
        self.store = store
        self.execution_id = execution_id
        #: The system's watch on tool calls for a cancel from another process (``None``: this
        #: activation's tools are not watched; rows written outside a system).
        self.tool_watch = tool_watch
        self.runner = runner
        self.log = log
        #: How long a write rides out a store outage before the run is abandoned (:func:`outlast`).
        self.grace = grace
        self._next_seq = 0
        self._on_first_row = on_first_row
        self._after_row = after_row
        #: The run's ``shared`` dict (``current_run().shared``): every step row written while it is
        #: not empty carries a copy, so a re-entered step reads it back as it was at its row.
        self.shared: dict[str, Any] = {}
        #: The next ``handoff:N`` number of each swarm path of the run.
        self.hops: dict[str, int] = {}
        #: The run's version, which every row carries (``None``: an unversioned run), and the
        #: fingerprint of its runner, which a new run's first row (``seq`` 0) carries.
        self.version = version
        self.fingerprint = fingerprint
        #: The activation's connections to its agents' tool sources (``None``: it has none).
        self.sources: Connections | None = None
        #: The tokens the run's model calls were billed for so far, and its stored form (``None``
        #: while nothing was billed: rows then carry no ``usage`` key).
        self.usage = Usage()
        self._billed: dict[str, int] | None = None
        #: The run's ``traceparent``, carried on every row once set; the spans of this activation
        #: when it is traced (``None``: nothing is).
        self.traceparent: str | None = None
        self.trace: RunTrace | None = None

    # -- what a run carries from row to row --------------------------------------------------------

    def bill(self, usage: Usage | None) -> None:
        """Add a model reply's ``usage`` to the run's total (the next row carries it)."""
        if usage:
            total = self.usage = self.usage + usage
            self._billed = {"input_tokens": total.input_tokens, "output_tokens": total.output_tokens}

    def carry_on(self, newest: Checkpoint) -> None:
        """Go on from ``newest``, the run's newest row: its usage total and its trace, unless this
        activation holds them already (a cancel between two of its steps). A traced activation's
        span starts here, as a child of the run's stored trace."""
        snapshot = newest.state_snapshot
        if self._billed is None:
            self.bill(usage_of(snapshot))
        if self.traceparent is None:
            stored = snapshot.get(TRACE)
            self.traceparent = stored if isinstance(stored, str) else None
        if self.trace is not None and self.trace.span is None:
            self.traceparent = self.trace.begin(self.traceparent, seq=newest.seq + 1)

    def _carried(self, snapshot: dict[str, Any]) -> dict[str, Any]:
        """``snapshot`` with what every row carries: the usage total and the trace, when set."""
        if self._billed is not None:
            snapshot[USAGE] = self._billed
        if self.traceparent is not None:
            snapshot[TRACE] = self.traceparent
        return snapshot

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
        a ``run_end`` marker, which must be writable whatever a tool put there), the run's
        version, and on a new run's first row its runner's fingerprint."""
        if self.shared and step_type != RUN_END:
            snapshot[SHARED] = decode_json(encode_json(self.shared, path="$.shared"))
        if self.version is not None:
            snapshot[VERSION] = self.version
        seq = self._next_seq
        self._next_seq = seq + 1
        if seq == 0 and self.fingerprint is not None:
            snapshot[FINGERPRINT] = self.fingerprint
        if self._billed is not None or self.traceparent is not None:
            self._carried(snapshot)
        return Checkpoint(
            execution_id=self.execution_id,
            seq=seq,
            runner=self.runner,
            node_id=node_id,
            step_index=step_index,
            step_type=step_type,
            state_snapshot=snapshot,
            node_input=node_input if node_input is not None else {},
            agent_path=agent_path,
            parent_checkpoint_id=parent,
        )

    def bookkeeping(
        self,
        step_type: str,
        step: Checkpoint,
        decision: dict[str, Any] | None,
        fingerprints: dict[str, Any] | None = None,
    ) -> Checkpoint:
        """A ``resume`` or ``recover`` row naming the step it re-enters (and the decision, if any;
        ``fingerprints``, the old and new ones when the runner changed under the run)."""
        node_input: dict[str, Any] = {REENTRY_SEQ: step.seq}
        if decision is not None:
            node_input[RESUME_KEY] = decision
        if fingerprints is not None:
            node_input[FINGERPRINTS] = fingerprints
        return self._reentry_row(step_type, step, node_input)

    def inbox_row(self, step_type: str, step: Checkpoint, node_input: dict[str, Any]) -> Checkpoint:
        """A ``signal`` or ``wake`` row of the tool step ``step`` (a bookkeeping row: re-entry reads
        through it to the step), with ``node_input`` saying what its wait got."""
        return self._reentry_row(step_type, step, {REENTRY_SEQ: step_seq(step), **node_input})

    def _reentry_row(self, step_type: str, step: Checkpoint, node_input: dict[str, Any]) -> Checkpoint:
        """A bookkeeping row at ``step``: its version, and the usage total and trace every row carries."""
        return Checkpoint(
            execution_id=self.execution_id,
            seq=self.take_seq(),
            runner=self.runner,
            node_id=step.node_id,
            step_index=step.step_index,
            step_type=step_type,
            state_snapshot=self._carried({VERSION: self.version} if self.version is not None else {}),
            node_input=node_input,
            agent_path=step.agent_path,
        )

    # -- writes -------------------------------------------------------------------------------------

    async def _outlast(
        self,
        attempt: Callable[[], Awaitable[object]],
        row: Checkpoint,
        failed: StoreUnavailable | None = None,
    ) -> None:
        """``attempt`` (a write of ``row``) through a store outage (:func:`outlast`; ``failed``: the
        first attempt, made by the caller, met one); a retry that finds ``row`` itself committed is
        done."""

        async def committed() -> bool:
            found = await self.store.get(self.execution_id, row.checkpoint_id)
            return found is not None and found.seq == row.seq

        try:
            await outlast(
                attempt,
                execution_id=self.execution_id,
                grace=self.grace,
                what=row.node_id,
                committed=committed,
                failed=failed,
            )
        except BaseException:
            self._unwritten(row)
            raise

    def _unwritten(self, row: Checkpoint) -> None:
        """``row`` was not written (refused, cut short, abandoned): the next row (a failure's
        marker) takes its seq, so no gap is left. Had it committed after all, that row is refused
        instead."""
        if self._next_seq == row.seq + 1:
            self._next_seq = row.seq

    async def append(self, row: Checkpoint) -> None:
        """Append ``row`` (``WriteConflict`` / ``RunExists`` if its ``seq`` is taken), riding out a
        store outage (:func:`outlast`)."""
        store = self.store
        try:
            await store.append(row)  # the common case, without the retry loop's layers
        except StoreUnavailable as error:
            await self._outlast(lambda: store.append(row), row, error)
        except BaseException:
            self._unwritten(row)
            raise
        if self._written(row):
            await anyio.lowlevel.checkpoint()  # the cancel lands here, before the row's step

    def _written(self, row: Checkpoint) -> bool:
        """``row`` was committed: tell the log, the first row's waiter, and ``after_row``; whether
        ``after_row`` cancelled the activation."""
        self.log.committed(row)
        if self._on_first_row is not None:
            notify, self._on_first_row = self._on_first_row, None
            notify()
        return self._after_row is not None and self._after_row()

    async def claim(self, row: Checkpoint) -> None:
        """Append the ``resume`` row ``row`` and delete the pending row, atomically (``AlreadyResumed``
        for every claimer but one), riding out a store outage."""
        await self._outlast(lambda: self.store.claim(row), row)
        self.log.committed(row)

    async def pause(
        self, row: Checkpoint, reason: str, context: dict[str, Any], expires_in: float | None = None
    ) -> PendingInterrupt:
        """Write the ``hitl_pause`` row of the step ``row`` and its pending row in one transaction
        (the pending row expires ``expires_in`` seconds after the pause, if given)."""
        pause = self._interrupted(row, HITL_PAUSE, reason, context, {})
        pending = PendingInterrupt(
            execution_id=self.execution_id,
            reason=reason,
            context=context,
            node_id=row.node_id,
            agent_path=row.agent_path,
            created_at=pause.created_at,
            expires_at=None if expires_in is None else pause.created_at + timedelta(seconds=expires_in),
        )
        await self._outlast(lambda: self.store.append_pause(pause, pending), pause)
        self.log.committed(pause)
        return pending

    async def rest(
        self, row: Checkpoint, reason: str, context: dict[str, Any], name: str | None, wake_at: Any
    ) -> None:
        """Write the ``wait`` row of the tool step ``row`` (it rests the run; no pending row), woken
        when ``name``'s signal comes or at ``wake_at`` (a datetime, or ``None``)."""
        extra = {} if wake_at is None else {WAKE_AT: wake_at.isoformat()}
        wait = self._interrupted(row, WAIT, reason, context, extra)
        await self._outlast(lambda: self.store.append_wait(wait, name, wake_at), wait)
        self.log.committed(wait)

    def _interrupted(
        self, row: Checkpoint, step_type: str, reason: str, context: dict[str, Any], extra: dict[str, Any]
    ) -> Checkpoint:
        """The interrupted ``step_type`` row (a pause or a wait) that stops the step ``row``: its
        snapshot names the step's ``seq`` (and adds ``extra``)."""
        return msgspec.structs.replace(
            row,
            state_snapshot={**row.state_snapshot, TOOL_SEQ: step_seq(row), **extra},
            seq=self.take_seq(),
            step_type=step_type,
            status=INTERRUPTED,
            interrupt_reason=reason,
            interrupt_context=context,
            checkpoint_id=new_id(),
            created_at=utcnow(),
        )

    async def end(self, row: Checkpoint) -> None:
        """Append the ``run_end`` marker ``row``: each attempt shielded, so a cancel cannot lose it,
        and bounded by :data:`MARKER_TIMEOUT` (an attempt cut short has an unknown outcome, and is
        retried like any other through a store outage). No checkpoint after it: the marker has no
        step for a cancel to land before (one shielded scope less per run)."""

        async def attempt() -> None:
            # ``fail_after(shield=True)`` without its two generator layers.
            with shielded(MARKER_TIMEOUT) as scope:
                await self.store.append(row)
            if scope.cancelled_caught:
                raise StoreUnavailable(f"writing the run_end marker took over {MARKER_TIMEOUT:g} s")

        try:
            await attempt()  # the common case, without the retry loop's layers
        except StoreUnavailable as error:
            await self._outlast(attempt, row, error)
        except BaseException:
            self._unwritten(row)
            raise
        self._written(row)
