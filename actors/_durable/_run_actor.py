"""The run actor: one actor per ``execution_id``, advanced by the messages in its mailbox.

Its state is a small value: resting (no activation), or one activation in flight
(:class:`_Activation`: the level's :class:`~.topologies.LevelMachine`, the reply, a cancel's reason).
A request (spawn, fork, resume, recover, wake) starts an activation, whose work (the entry point,
the steps: model turns and tool calls, the conclusion) runs as one task of the actor and reports its
end to the mailbox (:class:`~._messages.WorkDone`). The actor's own task never waits on a step, so
it takes every message while one runs: a ``Cancel`` cuts the step in flight at once (the run then
writes its failed marker), a child level's report is handed to the work waiting for it, and other
requests are held, in order, until the activation ends (one activation at a time).

The messages (``actors._durable._messages``) are ``msgspec`` tagged unions with stable tags; a
:class:`~actors.Resume` sent to a run claims its pause. Each activation first takes the run's
ownership lock, a lock the operating system or the database frees when the owning process dies,
and releases it when the run pauses, ends or fails. Once no activation is in flight the actor
passivates itself (``ActorContext.passivate()``): the next message activates it again from the store.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

import anyio

from stores import (
    HITL_PAUSE,
    RUN_END,
    WAIT,
    AlreadyResumed,
    OwnershipLost,
    RunExists,
    Store,
    StoreError,
    TetherError,
)

from .._core import (
    Actor,
    ActorContext,
    ActorStopped,
    cancel_scope,
    loop_time,
    shielded,
    tether_logger,
    within,
)
from ..models import Message
from ._engine import level_of
from ._errors import held_elsewhere
from ._idempotent import after_bodies
from ._level import Level, Next
from ._messages import (
    Cancel,
    GiveUp,
    HandedOff,
    Recover,
    Reply,
    Request,
    ResumeRun,
    RunMessage,
    Spawn,
    SpawnFork,
    Wake,
    WorkDone,
)
from ._owned import owned
from ._result import RunResult
from ._runlog import DEFAULT_OUTAGE_GRACE, RunLog, StepLog
from ._sources import activation_sources, uses_sources
from ._tool_watch import ToolWatch
from ._trace import RunTrace, active_tracer
from .topologies import LevelMachine
from .topologies._protocol import Reported

if TYPE_CHECKING:
    from ._follow import EventHub
    from .topologies import Runner

__all__ = ["Opening", "RunActor"]

_log = tether_logger()
#: Bound on releasing the ownership lock after an activation (shielded).
_UNLOCK_TIMEOUT = 5.0
#: Bound on writing a spawn's first row from its caller's task (shielded, so its outcome is known).
_OPEN_TIMEOUT = 30.0
#: How long a run abandoned on a lost lock waits for an ``@idempotent`` body in flight (seconds).
_BODY_BOUND = 30.0


class _Activation:
    """The run actor's state while an activation is in flight: its level's machine (what is in
    flight), the reply it answers, its span, and the reason of a cancel that came meanwhile."""

    __slots__ = ("cancel_reason", "entering", "machine", "reply", "stray", "trace")

    def __init__(self, machine: LevelMachine, reply: Reply, trace: RunTrace | None) -> None:
        self.machine = machine
        self.reply = reply
        self.trace = trace
        self.cancel_reason: str | None = None
        #: Whether the work is at the activation's entry point (a cancel does not cut it).
        self.entering = False
        #: A message the run cannot take that came meanwhile: the activation fails with it.
        self.stray: TypeError | None = None


class Opening:
    """A spawn whose ownership take and first row are written by the caller of ``spawn``, in its own
    task (:meth:`RunActor.open`), before the run's actor starts and drives the rest.

    So the row is queued in the turn of the event loop that ``spawn`` is called in (no task start,
    no mailbox hop before it), and the caller wakes as it commits: an awaited ``spawn`` costs one
    commit, shared with whatever else is queued then.
    """

    __slots__ = ("engine", "messages", "next", "reply")

    def __init__(self, messages: list[Message], reply: Reply) -> None:
        self.messages = messages
        self.reply = reply
        self.engine: Level | None = None
        self.next: Next | None = None  # the step after the first row; None: a step writes it


class RunActor(Actor):
    """The supervised actor of one run. Never restarted automatically (rule 12 of
    ``docs/durability.md``): recovery is explicit."""

    runs_tasks = True

    def __init__(
        self,
        *,
        store: Store,
        runner: Runner,
        execution_id: str,
        hub: EventHub | None = None,
        opening: Opening | None = None,
        grace: float = DEFAULT_OUTAGE_GRACE,
        let_go: set[str] | None = None,
        on_rest: Callable[[datetime | None], None] | None = None,
        tool_watch: ToolWatch | None = None,
    ) -> None:
        self._on_rest = on_rest
        self._tool_watch = tool_watch
        self.store = store
        self._grace = grace
        self._let_go = let_go if let_go is not None else set()
        self.runner = runner
        self.execution_id = execution_id
        self._log = StepLog(hub=hub, execution_id=execution_id, runner=runner.name)
        self._now: _Activation | None = None
        self._abandoned = False
        self._released = False
        self._held: deque[Request] = deque()
        self._opening = opening
        # From the take of the ownership lock to its release (the release included, so a run handed
        # to the fleet is never read as held by this process once it is no longer busy).
        self._active = False

    async def open(self, launch: Callable[[], object]) -> None:
        """The part of a spawn its caller runs (see :class:`Opening`): take the run, write its first
        row (shielded and bounded, so its outcome is known: the run goes on if the caller is
        cancelled meanwhile), then ``launch()`` this actor, which drives the rest and releases the
        take. ``RunExists`` if the run is owned or has rows; whatever failed releases the take."""
        opening = self._opening
        assert opening is not None, "open() is for an actor made with an opening"
        rows = self._rows(opening.reply)
        engine = opening.engine = level_of(self.runner, rows, self.runner.label, self.runner)
        trace = self._traced(rows, new=True)
        try:
            await self._take_lock(refuse=RunExists, new=True)
        except BaseException as error:
            if trace is not None:
                trace.abandon(error)
            raise
        try:
            token = trace.enter() if trace is not None else None
            try:
                with shielded(_OPEN_TIMEOUT) as scope:
                    opening.next = await engine.opening(opening.messages)
            finally:
                if trace is not None:
                    trace.leave(token)
            if scope.cancelled_caught:
                raise TimeoutError(f"the first row of run {self.execution_id!r} took over {_OPEN_TIMEOUT} s")
            launch()
        except BaseException as error:
            self._opening = None
            if trace is not None:
                trace.abandon(error)
            await self._unlock()
            raise

    def _rows(self, reply: Reply) -> RunLog:
        """The rows of an activation answered to ``reply`` (whose ``started`` its first row sets):
        a new run's carry its runner's version and fingerprint; an entry point that reads the run's
        rows (resume, recover, cancel, fork) sets the version those rows recorded."""
        return RunLog(
            self.store,
            self.execution_id,
            runner=self.runner.name,
            log=self._log,
            on_first_row=reply.started.set,
            after_row=self._stop_if_released,
            grace=self._grace,
            version=self.runner.version,
            fingerprint=self.runner.fingerprint,
            tool_watch=self._tool_watch,
        )

    @property
    def busy(self) -> bool:
        """Whether a start, resume or recovery of the run is in flight in this actor."""
        return self._active

    def cancel_current(self, reason: str) -> None:
        """Cancel the work in flight, if any (a step's task, a child level's); the run then writes
        its failed marker with ``reason``."""
        now = self._now
        if now is None:
            return
        if now.cancel_reason is None:
            now.cancel_reason = reason
        if not now.entering:  # an entry point writes its row; the run stops before its first step
            now.machine.cut()

    def abandon(self) -> None:
        """This process lost the run with its liveness lock: stop the activation and write nothing
        (another process may be recovering the run; this is not a cancel). At once, unless an
        ``@idempotent`` body of the run is in flight: it finishes and stores its result first
        (bounded by :data:`_BODY_BOUND`), so its recovery does not run it again; no other starts."""
        self._abandoned = True
        now = self._now
        if now is None:
            return
        if after_bodies(self.store, self.execution_id, now.machine.cut):
            now.machine.bound(_BODY_BOUND)
        else:
            now.machine.cut()

    def release(self, *, now: bool = False) -> None:
        """Hand the run to the fleet: the activation stops once its step in flight has written its
        next row (``now``: at once, mid-step), writing nothing more, and its ownership is released
        for any sweep to take (a worker that shuts down)."""
        self._released = True
        if now and self._now is not None:
            self._now.machine.cut()

    def _stop_if_released(self) -> bool:
        """After a row: a run handed to the fleet stops here (its step in flight has its row);
        whether it did (the writer then checkpoints, so the cancel lands before the step)."""
        if self._released and self._now is not None:
            self._now.machine.cut()
            return True
        return False

    def _refuse_released(self) -> None:
        if self._released:
            raise ActorStopped(
                f"run {self.execution_id!r} was handed to the fleet (its worker stopped serving); a "
                "sweep of any worker goes on with it from its newest row"
            )

    def _refuse_abandoned(self) -> None:
        if self._abandoned:
            raise OwnershipLost(
                f"run {self.execution_id!r} was abandoned: this process lost its liveness lock, so "
                "it stopped the run without writing (another process may be recovering it)"
            )

    # -- the transitions ----------------------------------------------------------------------------

    async def receive(self, ctx: ActorContext, message: Any) -> None:
        match message:
            case WorkDone():
                await self._work_done(message)
            case Reported():
                if self._now is not None:
                    self._now.machine.reported(message)
            case Request() if self._now is not None:
                self._hold(message)
            case Request():
                await self._begin(ctx, message)
            case _:
                stray = TypeError(
                    f"run {self.execution_id!r} takes run requests, not {type(message).__name__}"
                )
                if self._now is None:
                    raise stray
                self._now.stray = stray  # the activation ends with it before its next step
        # Requests held while an activation was in flight are taken in order once it ended.
        while self._now is None and self._held:
            await self._begin(ctx, self._held.popleft())
        if self._now is None:
            ctx.passivate()

    def _hold(self, request: Request) -> None:
        """A request that came while an activation is in flight: a Cancel cuts the work in flight
        at once (the run then writes its failed marker); every request is answered, in order, once
        the activation ended (one activation at a time: a Cancel then finds the run ended)."""
        message = request.message
        if isinstance(message, Cancel):
            self.cancel_current(message.reason)
        self._held.append(request)

    async def _begin(self, ctx: ActorContext, request: Request) -> None:
        """Take a request while no activation is in flight: start one, or answer at once."""
        reply = request.reply
        try:
            await self._open(ctx, request)
        except anyio.get_cancelled_exc_class():
            if self._now is None:
                reply.settle(None, self._stopped())
            raise
        except Exception as error:
            reply.settle(None, error)

    async def _open(self, ctx: ActorContext, request: Request) -> None:
        opening = self._opening
        if opening is not None and opening.reply is request.reply:
            self._opening = None
            await self._adopt(ctx, opening)
            return
        engine = level_of(self.runner, self._rows(request.reply), self.runner.label, self.runner)
        message: RunMessage = request.message
        match message:
            case Cancel(reason=reason):
                # No lock: the marker takes the next seq, and a live owner elsewhere then loses its
                # next write (WriteConflict) and stops. The log is the lock.
                self._settle(request.reply, await engine.cancel(reason), None)
            case GiveUp(error=error):
                self._settle(request.reply, await engine.cancel("max_recoveries", error=error), None)
            case Spawn():  # a spawn's caller opens the run itself (``open``): it comes only so
                raise TypeError(f"run {self.execution_id!r}: a spawn comes with its opening")
            case SpawnFork(base=base, appended=appended):
                extra = Message.from_dict(appended) if appended is not None else None
                await self._activate(
                    ctx, engine, request.reply, lambda: engine.fork(base, extra), refuse=RunExists, new=True
                )
            case ResumeRun(resume=resume):
                await self._activate(
                    ctx, engine, request.reply, lambda: engine.resume(resume), refuse=AlreadyResumed
                )
            case Recover():
                await self._activate(
                    ctx, engine, request.reply, lambda: engine.resume(None), refuse=AlreadyResumed
                )
            case Wake():
                await self._activate(ctx, engine, request.reply, engine.wake, refuse=AlreadyResumed)
            case _:  # pragma: no cover
                raise TypeError(f"unknown run message {message!r}")

    async def _adopt(self, ctx: ActorContext, opening: Opening) -> None:
        """Drive a spawn whose caller took the run and wrote its first row (:meth:`open`)."""
        engine, step, messages = opening.engine, opening.next, opening.messages
        assert engine is not None
        if step is not None:
            await self._activate(ctx, engine, opening.reply, None, found=step, refuse=RunExists, taken=True)
        else:
            await self._activate(
                ctx, engine, opening.reply, lambda: engine.start(messages), refuse=RunExists, taken=True
            )

    async def _activate(
        self,
        ctx: ActorContext,
        engine: Level,
        reply: Reply,
        entry: Callable[[], Awaitable[Next | None]] | None,
        *,
        found: Next | None = None,
        refuse: type[TetherError],
        new: bool = False,
        taken: bool = False,
    ) -> None:
        """Start an activation holding the run's ownership lock (``taken``: held already, else taken
        here, or ``refuse`` raised): from its ``entry`` point's task, or from the step ``found``."""
        trace = self._traced(engine.rows, new=new)
        if not taken:
            try:
                await self._take_lock(refuse=refuse, new=new)
            except BaseException as error:
                if trace is not None:
                    trace.abandon(error)
                raise
        self._active = True
        self._abandoned = False
        now = self._now = _Activation(LevelMachine(ctx, engine), reply, trace)
        now.entering = entry is not None
        work = self._work if uses_sources(self.runner) else self._steps
        now.machine.start(functools.partial(work, now, entry, found), self._work_done)

    async def _work(
        self, now: _Activation, entry: Callable[[], Awaitable[Next | None]] | None, found: Next | None
    ) -> RunResult:
        """The work of an activation whose runner has tool sources (:meth:`_steps`, in its task):
        their connections live as long."""
        async with activation_sources() as connections:
            now.machine.level.rows.sources = connections
            return await self._steps(now, entry, found)

    async def _steps(
        self, now: _Activation, entry: Callable[[], Awaitable[Next | None]] | None, found: Next | None
    ) -> RunResult:
        """The entry point, the steps in order (a cancel or a message the run cannot take stops
        them before the next), the run's conclusion; under the activation's span."""
        level, trace, token = now.machine.level, now.trace, None
        if trace is not None:
            token = trace.enter()  # the span of a new run: current for the whole activation
        try:
            if entry is not None:
                found = await entry()
                now.entering = False
                if found is None:  # an entry point with nothing to do: how the run stands
                    return await level.standing()
                if trace is not None and token is None:
                    token = trace.enter()  # a resumed run's span began in its entry
            assert found is not None
            outcome = await now.machine.drive(found, functools.partial(self._stops, now))
            if outcome is None:
                if now.stray is not None:
                    raise now.stray
                assert now.cancel_reason is not None
                return await level.cancel(now.cancel_reason)
            if isinstance(outcome, HandedOff):
                raise TypeError(f"run {self.execution_id!r}: the root runner cannot hand off")
            return await level.conclude(outcome)
        finally:
            if trace is not None:
                trace.leave(token)

    def _stops(self, now: _Activation) -> bool:
        """Before each step: a run this process lost stops here (``OwnershipLost``, nothing
        written); a cancel or a message the run cannot take stops it."""
        self._refuse_abandoned()
        return now.cancel_reason is not None or now.stray is not None

    async def _work_done(self, done: WorkDone) -> None:
        """The activation's work ended: finish it (after a cut: with the cancel's marker, or, for
        a lost lock or a hand-off to the fleet, with nothing written)."""
        now = self._now
        if now is None:
            return  # pragma: no cover (one activation's work at a time)
        now.machine.scope = None
        try:
            if done.error is not None:
                raise done.error
            self._refuse_abandoned()
            self._refuse_released()
            if done.cut:
                result = await now.machine.level.cancel(now.cancel_reason or "cancelled")
            else:
                result = done.value
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as error:
            await self._finish(now, None, error)
        else:
            await self._finish(now, result, None)

    async def _finish(self, now: _Activation, result: RunResult | None, error: BaseException | None) -> None:
        """End the activation: release the lock (shielded, bounded), end its span, answer its reply."""
        self._now = None
        await self._unlock()
        trace = now.trace
        if trace is not None:
            if result is not None:
                trace.ended(result)
            elif error is not None:
                trace.abandon(error)
        self._settle(now.reply, result, error)

    def _settle(self, reply: Reply, result: RunResult | None, error: BaseException | None) -> None:
        reply.settle(result, error)
        if result is not None and result.status == "waiting" and self._on_rest is not None:
            self._on_rest(result.wake_at)

    async def on_stop(self, ctx: ActorContext) -> None:
        """The actor stops (a shutdown, a stop past its bound) with an activation in flight or
        requests held: work that ended is finished as its unread report says; a Cancel it took is
        carried out (the failed marker), so no recovery resumes a step the Cancel cut; else the
        reply and held requests hear ``ActorStopped`` (the run stays recoverable). The lock goes."""
        held, self._held = list(self._held), deque()
        try:
            now = self._now
            if now is not None:
                await self._stop_activation(now)
            for request in held:
                if isinstance(request.message, Cancel):
                    await self._begin(ctx, request)  # answers how the run stands, or ends it
        finally:
            now = self._now
            if now is not None:  # the stop's bound ran out first: the run stays recoverable
                await self._finish(now, None, self._stopped())
            for request in held:
                request.fail(self._unhandled())  # every request not answered above

    async def _stop_activation(self, now: _Activation) -> None:
        """End the activation in flight as the actor stops (within the stop's bound): as its work's
        report says, which the stop may have left unread in the mailbox, or, when the work a Cancel
        cut outlasted the stop, as that cut's report would have said."""
        report = now.machine.report
        if report is None and now.cancel_reason is not None:
            report = WorkDone(cut=True)
        if report is not None:
            await self._work_done(report)
        else:
            self._warn_stopped()
            await self._finish(now, None, self._stopped())

    def _unhandled(self) -> ActorStopped:
        return ActorStopped(f"the actor of run {self.execution_id!r} stopped before handling the request")

    def _stopped(self) -> ActorStopped:
        return ActorStopped(
            f"the actor of run {self.execution_id!r} stopped before the run paused or ended; "
            "the run stays recoverable: resume it"
        )

    def _warn_stopped(self) -> None:
        """A WARNING for a run left mid-step (its newest row is a step): how to resume it."""
        last = self._log.last
        if last is None or last.step_type in (HITL_PAUSE, RUN_END, WAIT):
            return
        eid, runner = self.execution_id, self.runner.name
        _log.warning(
            "run stopped mid-step",
            execution_id=eid,
            agent_path=last.agent_path,
            node_id=last.node_id,
            step_type=last.step_type,
            resume=(
                f"await system.resume({eid!r}) in a process whose ActorSystem has runner {runner!r}, "
                f"or: tether resume {eid} --runner module:attr"
            ),
        )

    def _traced(self, rows: RunLog, *, new: bool) -> RunTrace | None:
        """The spans of an activation writing ``rows``, when a tracer provider is configured (a
        ``new`` run's span starts now, a resumed run's where its newest row is read)."""
        trace = rows.trace
        if trace is None:
            tracer = active_tracer()
            if tracer is None:
                return None
            label = self.runner.label
            trace = rows.trace = RunTrace(
                tracer, execution_id=self.execution_id, runner=self.runner.name, path=label
            )
            if new:
                rows.traceparent = trace.begin(None, seq=0)
        return trace

    async def _take_lock(self, *, refuse: type[TetherError], new: bool) -> None:
        """Take the run's ownership lock, or raise ``refuse``. A ``new`` run's take is written with
        its first row where the store can (one transaction less)."""
        take = self.store.try_lock
        found = owned(self.store) if new else None
        if found is not None:
            take = found.try_lock_with_first_row
        if not await take(self.execution_id):
            raise held_elsewhere(self.execution_id, refuse)

    async def _unlock(self) -> None:
        """Release the run's ownership lock, shielded and bounded (no longer active once done)."""
        # One shielded scope (not a shield plus a move_on_after): bounded, quiet; its deadline is
        # armed only if the release waits (a release carried by the run's last row does not).
        deadline = loop_time() + _UNLOCK_TIMEOUT
        with cancel_scope(shield=True) as scope:
            await within(scope, deadline, self._release())

    async def _release(self) -> None:
        """Release the run's ownership lock (call shielded and bounded); no longer active once done.
        A release that does not reach the store (an outage) leaves the run in ``let_go``, for this
        process's sweeps to take again (it may still name this process as its owner): the caller
        hears of how the run stands, not of the release."""
        eid = self.execution_id
        self._let_go.add(eid)
        try:
            await self.store.unlock(eid)
            self._let_go.discard(eid)
        except StoreError as error:
            _log.warning("run release did not reach the store", execution_id=eid, error=repr(error))
        finally:
            self._active = False
