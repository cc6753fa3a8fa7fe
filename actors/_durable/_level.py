"""A level of a run: one runner's part of an activation at one ``agent_path``, and the run's entry points.

:class:`Level` is what the run actor and a topology's child actors drive: an entry point (at the
root: start, fork, resume, recovery) writes the activation's first row and returns its first step;
:meth:`Level.step` takes one step and returns the next, a :class:`Delegation` (a child level to run)
or an outcome; :meth:`Level.after_child` takes a child's outcome; the root concludes with
:meth:`Level.conclude` (its ``run_end``). :class:`ReentryRoute` says where a resume or a recovery re-enters,
level by level, from each level's newest row. The agent's level is ``_engine.AgentLevel``; the
topologies' are in ``topologies``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeAlias

import msgspec

from stores import (
    BOOKKEEPING_STEPS,
    COMPLETED,
    FAILED,
    FORK_ORIGIN,
    HANDOFF,
    HITL_PAUSE,
    INTERRUPTED,
    LLM_CALL,
    RECOVER,
    RESUME,
    RUN_END,
    TOOL_CALL,
    WAIT,
    AlreadyResumed,
    Checkpoint,
    CheckpointError,
    PendingInterrupt,
    ReEntry,
    RunExists,
    SerializationError,
    Store,
    StoreError,
    WriteConflict,
    conversation_of,
    new_id,
    tool_path,
    utcnow,
)

from .._core import tether_logger
from ..models import Message
from ..models._types import Transcript
from ._errors import ResumeRequired, RunnerVersionMismatch, not_in_store, nothing_to_claim, storable_text
from ._messages import Answered, Failed, Outcome, Paused, Resume, Step, Waiting
from ._output import OUTPUT_TYPE
from ._result import RunResult, resting_result
from ._runlog import SHARED, TRACE, USAGE, RunLog, usage_of
from ._versions import VERSION, Drift, check_step, drift, version_of
from ._waits import RestedSignal, is_due

__all__ = ["Delegation", "Level", "Next", "PausedSignal", "ReentryRoute"]

_log = tether_logger()

#: Snapshot keys a fork's origin does not take from its base: the conversation (its own), and the
#: base run's usage total and trace (a fork is a new run: it counts its own, in its own trace).
_NOT_FORKED = frozenset({"messages", "turn", USAGE, TRACE})
#: How often a cancel re-reads the newest row when a step's write races it.
_CANCEL_ATTEMPTS = 5


class PausedSignal(Exception):
    """Internal: the run paused at a tool; carries its pending row."""

    def __init__(self, pending: PendingInterrupt) -> None:
        super().__init__(pending.execution_id)
        self.pending = pending


class ReentryRoute:
    """Where a resume or a recovery re-enters: the deepest step (``step``, read through the
    bookkeeping rows), the claimed ``decision``, and ``after``, the ``seq`` of the row that began the
    level re-entering (a delegation's tool row, a hop's ``handoff`` row; -1 at the root): that
    level's own rows are those after it. ``rows()`` reads the run's history once, for every level."""

    __slots__ = ("_history", "after", "after_pause", "decision", "step", "store")

    def __init__(
        self,
        store: Store,
        step: Checkpoint,
        decision: dict[str, Any] | None,
        *,
        after_pause: bool,
        after: int = -1,
        history: list[Checkpoint] | None = None,
    ) -> None:
        self.store = store
        self.step = step
        self.decision = decision
        self.after_pause = after_pause
        self.after = after
        self._history = history

    def below(self, after: int) -> ReentryRoute:
        """The same re-entry, for the level begun by the row at ``after``."""
        route = ReentryRoute(
            self.store,
            self.step,
            self.decision,
            after_pause=self.after_pause,
            after=after,
            history=self._history,
        )
        return route

    async def rows(self) -> list[Checkpoint]:
        """The run's rows up to the re-entered step, read once."""
        if self._history is None:
            rows = await self.store.history(self.step.execution_id)
            self._history = [row for row in rows if row.seq <= self.step.seq]
        return self._history

    async def own_rows(self, path: str) -> list[Checkpoint]:
        """The step rows a level at ``path`` wrote after ``after`` (its tools' rows included)."""
        return [
            row
            for row in await self.rows()
            if row.seq > self.after
            and conversation_of(row.agent_path) == path
            and row.step_type not in BOOKKEEPING_STEPS
            and row.step_type not in (RUN_END, FORK_ORIGIN)
        ]


class Delegation:
    """A level's request to its actor: run ``level`` as a child actor, from ``begin`` (its first
    step), and hand me its outcome (``Level.after_child``)."""

    __slots__ = ("begin", "level")

    def __init__(self, level: Level, begin: Callable[[], Awaitable[Next]]) -> None:
        self.level = level
        self.begin = begin


Next: TypeAlias = "Step | Delegation | Outcome"
"""What a level's step returns: its next step, a child to run, or how its work ended."""


class Level:
    """One runner's part of one activation of a run, at one ``agent_path``: an agent's turns and tools
    (:class:`AgentLevel`), a swarm's hops, a supervisor's manager. The root level also holds the
    run's entry points (start, fork, resume, cancel) and writes its ``run_end``.

    An entry point writes the activation's first row and returns its first step; the actor then
    hands each step to :meth:`step`, each child's outcome to :meth:`after_child`, and the root concludes
    with :meth:`conclude`. Every row goes through ``rows``, the run's log (and ``seq`` allocator).
    ``runner`` is the root runner, which finds the agent at any path of the run.
    """

    def __init__(self, *, rows: RunLog, path: str, runner: Any) -> None:
        self.rows = rows
        self.store = rows.store
        self.execution_id = rows.execution_id
        self.path = path
        self.runner = runner
        # The newest conversation and turn, for the failed marker if an exception escapes a step.
        self._transcript = Transcript()
        self._turn = 0
        # The messages of the newest row stored for this conversation: what a failed marker carries
        # when the conversation since then is refused by the store (the JSON rule, max_row_bytes).
        self._good: list[dict[str, Any]] = []

    # -- what each kind of level does -------------------------------------------------------------

    async def begin(self, messages: Sequence[Message]) -> Next:
        """This level's first step on ``messages`` (a fresh run, a delegation, a hop)."""
        raise NotImplementedError

    async def reenter(self, route: ReentryRoute) -> Next:
        """This level's first step when a resume or a recovery re-enters it (rule 5 at every depth)."""
        raise NotImplementedError

    def _step(self, step: Step) -> Awaitable[Next]:
        """The work of ``step`` (an awaitable: a level that only picks the work hands it on, one
        coroutine layer less per step)."""
        raise TypeError(f"{type(self).__name__} takes no step {step!r}")

    async def _after_child(self, outcome: Outcome) -> Next:
        raise TypeError(f"{type(self).__name__} started no child; got {outcome!r}")

    async def _prepare(self, step: Checkpoint) -> None:
        """Ready this level to re-enter at ``step`` before the resume or recovery writes; raise to
        refuse it (nothing is written then)."""

    def _reenter_fork(self, origin: Checkpoint) -> Next:
        raise CheckpointError(f"run {self.execution_id!r}: a {type(self).__name__} run cannot fork here")

    # -- entry points: each writes its first row (if any) and returns the first step -----------------

    async def start(self, messages: Sequence[Message]) -> Next:
        """A fresh run from ``messages`` (``seq`` 0 on a used id raises ``RunExists``)."""
        self.rows.start_at(0)
        return await self.begin(messages)

    async def opening(self, messages: Sequence[Message], *, queued: bool = False) -> Next | None:
        """A fresh run from ``messages`` whose first row is written here and now, by the task that
        calls it (``spawn``'s caller, so the row is queued before any other task runs; ``enqueue``'s,
        ``queued``, which hands the run to its queue after); the step that follows the row. ``None``,
        writing nothing, when a step writes the first row (a topology)."""
        return None

    async def fork(self, base: Checkpoint, appended: Message | None) -> Next:
        """A new run from ``base`` (a step of another run): the ``fork_origin`` row, then re-entry.

        With ``appended`` (the next user message) the fork starts a new model turn at the base's
        turn; without, it re-enters the base step itself (a model turn re-issued or a tool re-run).
        """
        self.rows.start_at(0)
        self.rows.version = version_of(base)  # a fork belongs to the code of the run it branches from
        if self.runner.nested:
            return await self._fork_nested(base, appended)
        transcript = Transcript.from_dicts(base.state_snapshot.get("messages", []))
        if appended is not None:
            transcript.append(appended)
        origin = self._row(
            node_id=FORK_ORIGIN,
            step_type=FORK_ORIGIN,
            turn=base.step_index,
            transcript=transcript,
            extra={k: v for k, v in base.state_snapshot.items() if k not in _NOT_FORKED},
            node_input={
                "base_execution_id": base.execution_id,
                "base_node_id": base.node_id,
                "base_step_type": base.step_type,
                "base_node_input": base.node_input,
                "input_appended": appended is not None,
            },
            parent=base.checkpoint_id,
        )
        await self._append(origin)
        return self._reenter_fork(origin)

    async def resume(self, resume: Resume | None) -> Next:
        """Claim the pause with ``resume``, or recover from a crash when ``resume`` is None.

        Validates first (reads the newest row, finds the tool) and only then appends (rule 9).
        """
        entry = await self.store.reentry(self.execution_id)
        step = entry.step
        self.rows.start_at(entry.newest.seq + 1)
        self.rows.carry_on(entry.newest)
        if resume is not None:
            if step.step_type != HITL_PAUSE or step.status != INTERRUPTED:
                raise nothing_to_claim(self.execution_id, step)
            change = await self._against_code(entry)
            self._check_tool(step)
            await self._prepare(step)
            claimed = resume.to_dict()
            await self.rows.claim(self.rows.bookkeeping(RESUME, step, claimed, self._changed(change)))
            return await self._reenter_at(step, claimed, after_pause=True)
        decision = entry.resume
        after_pause = decision is not None
        if step.step_type == HITL_PAUSE and decision is None:
            if await self.store.pending(self.execution_id):
                raise ResumeRequired(self.execution_id, reason=step.interrupt_reason)
            # A cancelled pause has no pending row: the tool runs again and may pause again (rule 7).
        change = await self._against_code(entry)
        self._check_tool(step)
        await self._prepare(step)
        await self.rows.append(self.rows.bookkeeping(RECOVER, step, decision, self._changed(change)))
        if step.step_type == FORK_ORIGIN:
            if self.runner.nested:
                return await self._reenter_nested_origin(step)
            return self._reenter_fork(step)
        return await self._reenter_at(step, decision, after_pause=after_pause)

    async def wake(self) -> Next | None:
        """Wake the run resting at its newest row, a ``wait`` that is due (its signal is in the
        inbox, or its time passed): the tool runs again from the top (no row of its own: the
        wait's ``signal`` or ``wake`` row comes from the tool, and the run's ownership, taken
        before, makes this the only waker). A run no longer resting there, or not due, is left as
        it is: ``None``, writing nothing (:meth:`standing` says how it stands)."""
        entry = await self.store.reentry(self.execution_id)
        newest = entry.newest
        if newest.step_type != WAIT or not await is_due(self.store, newest):
            return None
        self.rows.start_at(newest.seq + 1)
        self.rows.carry_on(newest)  # the run's usage total and trace go on past the wake
        change = await self._against_code(entry)
        self._check_tool(newest)
        self._changed(change)
        return await self._reenter_at(newest, None, after_pause=False)

    async def standing(self) -> RunResult:
        """How the run stands at its newest row, when a wake found nothing to do."""
        newest = await self.store.latest(self.execution_id)
        if newest is None:
            raise not_in_store(self.execution_id)
        result = await resting_result(self.store, newest)
        if result is None:
            raise AlreadyResumed(
                f"run {self.execution_id!r} is not resting (its newest row is {newest.node_id!r})"
            )
        return result

    async def _against_code(self, entry: ReEntry) -> Drift | None:
        """Check the runner against the code the run started with, before anything is written.

        The rows keep the run's version (``RunnerVersionMismatch`` when this runner has another).
        Against the fingerprint on the run's first row: a versioned run whose step to re-enter
        calls a tool that is gone or changed its schema is refused (``RunnerChanged``); any other
        change is returned (``None`` when nothing changed), for :meth:`_changed`."""
        version = (
            version_of(entry.newest) if VERSION in entry.newest.state_snapshot else version_of(entry.step)
        )
        self.rows.version = version
        runner = self.runner
        if version is not None and runner.version != version:
            raise RunnerVersionMismatch(
                runner.name, version, execution_id=self.execution_id, available=[runner.version]
            )
        step = entry.step
        first = step if step.seq == 0 else (await self.store.history(self.execution_id, limit=1) or [step])[0]
        change = drift(first, runner)
        if change is None:
            return None
        if version is not None:
            check_step(step, first, change, version=version, runner=runner)
        return change

    def _changed(self, change: Drift | None) -> dict[str, Any] | None:
        """A re-entry goes on under changed code: a WARNING naming the change, and what the
        ``resume``/``recover`` row records of it (the old and new fingerprints)."""
        if change is None:
            return None
        _log.warning(
            "runner changed under the run",
            execution_id=self.execution_id,
            runner=self.runner.name,
            version=self.rows.version,
            changed="; ".join(change.changed),
            fingerprints=f"{change.old} -> {change.new}",
        )
        return change.record()

    async def _fork_nested(self, base: Checkpoint, appended: Message | None) -> Next:
        """A topology's fork: the base run's rows up to ``base`` are copied (each level re-enters from
        its own rows), then the ``fork_origin`` row, then re-entry at the copy of ``base``."""
        for row in await self.store.history(base.execution_id):
            if row.seq <= base.seq:
                copy = msgspec.structs.replace(
                    row, execution_id=self.execution_id, checkpoint_id=new_id(), created_at=utcnow()
                )
                await self.rows.append(copy)
        self.rows.start_at(base.seq + 1)
        origin = self.rows.row(
            node_id=FORK_ORIGIN,
            step_type=FORK_ORIGIN,
            step_index=base.step_index,
            snapshot={"turn": base.step_index},
            agent_path=self.path,
            node_input={
                "base_execution_id": base.execution_id,
                "base_node_id": base.node_id,
                "base_step_type": base.step_type,
                "base_seq": base.seq,
                "appended": appended.to_dict() if appended is not None else None,
            },
            parent=base.checkpoint_id,
        )
        await self.rows.append(origin)
        return await self._reenter_nested_origin(origin)

    async def _reenter_nested_origin(self, origin: Checkpoint) -> Next:
        """Re-enter a topology's fork at the copy of its base step; an appended message starts a new
        model turn of the level that step belongs to. A base that is itself a fork's origin (a fork
        from a fork's ``fork_origin`` row) is read through to the step that origin names, with the
        message it appended before the one appended now."""
        rows = {row.seq: row for row in await self.store.history(self.execution_id)}
        appended: list[dict[str, Any]] = []
        step = origin
        while step.step_type == FORK_ORIGIN:
            added = step.node_input.get("appended")
            if isinstance(added, dict):
                appended.insert(0, added)
            seq = step.node_input.get("base_seq")
            base = rows.get(seq) if isinstance(seq, int) and seq < step.seq else None
            if base is None:
                raise CheckpointError(f"run {self.execution_id!r}: its fork_origin names no base row {seq!r}")
            step = base
        if appended:
            messages = [*step.state_snapshot.get("messages", []), *appended]
            kind = step.step_type if step.step_type == HANDOFF else LLM_CALL
            snapshot = {**step.state_snapshot, "messages": messages}
            step = msgspec.structs.replace(step, step_type=kind, state_snapshot=snapshot)
        return await self._reenter_at(step, None, after_pause=False)

    async def _reenter_at(
        self, step: Checkpoint, decision: dict[str, Any] | None, *, after_pause: bool
    ) -> Next:
        """Re-enter the run at its deepest step: ``shared`` as that row has it, hop numbers as the
        rows have them, then each level from its own newest row."""
        self.rows.shared = dict(step.state_snapshot.get(SHARED) or {})
        route = ReentryRoute(self.store, step, decision, after_pause=after_pause)
        if self.runner.nested:
            for row in await route.rows():
                if row.step_type == HANDOFF and row.agent_path is not None:
                    hops = self.rows.hops
                    hops[row.agent_path] = max(hops.get(row.agent_path, 0), row.step_index + 1)
        return await self.reenter(route)

    async def cancel(self, reason: str, *, error: str | None = None) -> RunResult:
        """Write the failed ``run_end`` of a cancel (it also drops a pending row, rule 11); its error
        is ``error``, by default ``cancelled: <reason>``.

        A step write racing the marker makes it re-read the newest row and try again.
        """
        error = error if error is not None else f"cancelled: {reason}"
        for _ in range(_CANCEL_ATTEMPTS):
            newest = await self.store.latest(self.execution_id)
            if newest is None:
                return RunResult(execution_id=self.execution_id, status="failed", error=error)
            if newest.step_type == RUN_END and newest.status == COMPLETED:
                raise AlreadyResumed(
                    f"run {self.execution_id!r} already completed; there is nothing to cancel"
                )
            if newest.step_type == RUN_END:
                # Already ended failed (e.g. the step in flight was cancelled and wrote the marker
                # before this Cancel was handled): one marker is enough.
                return RunResult(
                    execution_id=self.execution_id,
                    status="failed",
                    error=newest.state_snapshot.get("run_error"),
                    usage=usage_of(newest.state_snapshot),
                )
            self.rows.start_at(newest.seq + 1)
            self.rows.carry_on(newest)
            self.rows.version = version_of(newest)
            snapshot = newest.state_snapshot
            self._good = list(snapshot.get("messages", []))
            self._transcript = Transcript.from_dicts(self._good)
            self._turn = newest.step_index
            try:
                return await self._end(FAILED, error=error, reason=reason)
            except WriteConflict:
                continue
        raise WriteConflict(f"run {self.execution_id!r} kept writing while being cancelled; try again")

    # -- the steps --------------------------------------------------------------------------------

    async def step(self, step: Step) -> Next:
        """Take one step; return the next one, a child to run, or how this level's work ended.

        A pause is :class:`Paused`; an exception is :class:`Failed` (rule 12), except a lost race, a
        used id or a store error (a lost lock, a store still unusable after its outage grace), which
        propagate: that writer stops and writes nothing more, and a store error is never a failure.
        """
        try:
            return await self._step(step)
        except Exception as error:
            return _ended(error)

    async def after_child(self, outcome: Outcome) -> Next:
        """Take in the outcome of the child this level's last step started (as :meth:`step` does)."""
        try:
            return await self._after_child(outcome)
        except Exception as error:
            return _ended(error)

    async def conclude(self, outcome: Outcome) -> RunResult:
        """The root's end of the run: the ``run_end`` marker of an answer or a failure, or the pause."""
        match outcome:
            case Paused(pending=pending):
                return RunResult(
                    execution_id=self.execution_id, status="paused", pending=pending, usage=self.rows.usage
                )
            case Waiting(wake_at=wake_at):
                return RunResult(
                    execution_id=self.execution_id, status="waiting", wake_at=wake_at, usage=self.rows.usage
                )
            case Answered(output=output):
                try:
                    return await self._end(COMPLETED, output=output, typed=True)
                except (AlreadyResumed, RunExists, StoreError):
                    raise
                except Exception as error:
                    return await self._end(FAILED, error=f"{type(error).__name__}: {error}")
            case Failed(error=error):
                return await self._end(FAILED, error=error)
        raise TypeError(f"unknown outcome {outcome!r}")  # pragma: no cover

    # -- rows -------------------------------------------------------------------------------------

    async def _end(
        self,
        status: str,
        *,
        output: str | None = None,
        error: str | None = None,
        reason: str | None = None,
        typed: bool = False,
    ) -> RunResult:
        """The ``run_end`` marker (only the root writes it), shielded so a cancel cannot lose it.
        ``typed``: the output is the answer of the runner's ``output_type``, if it has one."""
        extra: dict[str, Any] = {"run_status": status}
        if output is not None:
            extra["output"] = output
        spec = getattr(self.runner, "output", None) if typed else None
        if spec is not None:
            extra[OUTPUT_TYPE] = spec.name
        if error is not None:
            error = extra["run_error"] = storable_text(error)
        if reason is not None:
            extra["run_reason"] = storable_text(reason)
        row = self._row(
            node_id=RUN_END, step_type=RUN_END, turn=self._turn + 1, transcript=self._transcript, extra=extra
        )
        row.status = status
        try:
            await self.rows.end(row)
        except SerializationError:
            if status != FAILED:
                raise  # the caller ends the run failed instead
            # The conversation since the newest stored row is what the store refused: the marker
            # carries the conversation up to that row, so the run always ends (never stuck).
            kept = {**row.state_snapshot, "messages": self._good}
            await self.rows.end(msgspec.structs.replace(row, state_snapshot=kept))
        if status == FAILED:
            if reason is None:  # a failure, not a cancel: the developer hears of it
                _log.error("run failed", execution_id=self.execution_id, agent_path=self.path, error=error)
            return RunResult(
                execution_id=self.execution_id, status="failed", error=error, usage=self.rows.usage
            )
        value = spec.decode(output) if spec is not None and output is not None else None
        return RunResult(
            execution_id=self.execution_id,
            status="completed",
            output=output,
            value=value,
            usage=self.rows.usage,
        )

    def _row(
        self,
        *,
        node_id: str,
        step_type: str,
        turn: int,
        transcript: Transcript,
        extra: dict[str, Any] | None = None,
        node_input: dict[str, Any] | None = None,
        tool: str | None = None,
        parent: str | None = None,
    ) -> Checkpoint:
        """A step row of this agent: the transcript and turn as its snapshot, written as the tool
        (``/tool:<name>``) when ``tool`` is given (rule 3)."""
        snapshot: dict[str, Any] = {"messages": transcript.snapshot(), "turn": turn}
        if extra:
            snapshot.update(extra)
        return self.rows.row(
            node_id=node_id,
            step_type=step_type,
            step_index=turn,
            snapshot=snapshot,
            agent_path=tool_path(self.path, tool) if tool else self.path,
            node_input=node_input,
            parent=parent,
        )

    async def _append(self, row: Checkpoint) -> None:
        """Append a row of this conversation and remember its messages as the last stored ones."""
        await self.rows.append(row)
        self._good = row.state_snapshot["messages"]

    def _check_tool(self, step: Checkpoint) -> None:
        """Refuse, before writing, a resume whose tool the agent at the step's path lacks
        (``ToolNotFound``)."""
        name = step.state_snapshot.get("tool_name")
        if step.step_type in (TOOL_CALL, HITL_PAUSE, WAIT) and isinstance(name, str):
            self.runner.check_tool(conversation_of(step.agent_path), self.path, name, self.execution_id)


def _ended(error: Exception) -> Outcome:
    """The outcome a step (or the take-in of a child's outcome) that raised ``error`` leads to: a
    pause or a rest it raised, any other exception as :class:`Failed`; those that stop the writer
    (a lost race, a used id, a store error) are raised again."""
    if isinstance(error, PausedSignal):
        return Paused(error.pending)
    if isinstance(error, RestedSignal):
        return Waiting(error.name, error.wake_at)
    if isinstance(error, AlreadyResumed | RunExists | StoreError):
        raise error
    return Failed(f"{type(error).__name__}: {error}")
