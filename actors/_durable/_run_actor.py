"""The run actor: one actor per ``execution_id``, advanced by the messages in its mailbox.

A control message (spawn, fork, resume, recover) starts an activation; the activation is the run's
own step messages (take a turn, run a tool: :data:`~._messages.Step`), which the actor hands to the
engine in order, in its own task (no mailbox hop per step). Between two steps it reads its mailbox:
a ``Cancel`` queued there ends the run before the next step; other requests wait, in order, for the
activation to end. Its messages (``actors._durable._messages``) are ``msgspec`` tagged unions with stable tags; a
:class:`~actors.Resume` sent to a run claims its pause. Each message that activates the run first
takes the run's ownership lock, a lock the operating system or the database frees when the owning
process dies, and releases it when the run pauses, ends or fails. After each message the actor
passivates itself (``ActorContext.passivate()``): the next message activates it again from the store.
"""

from __future__ import annotations

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

from .._core import Actor, ActorContext, ActorStopped, cancel_scope, loop_time, shielded, tether_logger
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
)
from ._owned import owned
from ._result import RunResult
from ._runlog import DEFAULT_OUTAGE_GRACE, RunLog, StepLog
from ._sources import activation_sources, uses_sources
from ._tool_watch import ToolWatch
from ._trace import RunTrace, active_tracer
from .topologies import drive

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
        self._scope: anyio.CancelScope | None = None
        self._cancel_reason: str | None = None
        self._abandoned = False
        self._released = False
        self._deferred: deque[Request] = deque()
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
        """Cancel the step in flight, if any; the run then writes its failed marker."""
        if self._scope is None:
            return
        self._cancel_reason = reason
        self._scope.cancel()

    def abandon(self) -> None:
        """This process lost the run with its liveness lock: stop the activation and write nothing
        (another process may be recovering the run; this is not a cancel). At once, unless an
        ``@idempotent`` body of the run is in flight: it finishes and stores its result first
        (bounded by :data:`_BODY_BOUND`), so its recovery does not run it again; no other starts."""
        self._abandoned = True
        scope = self._scope
        if scope is None:
            return
        if after_bodies(self.store, self.execution_id, scope.cancel):
            scope.deadline = min(scope.deadline, loop_time() + _BODY_BOUND)
        else:
            scope.cancel()

    def release(self, *, now: bool = False) -> None:
        """Hand the run to the fleet: the activation stops once its step in flight has written its
        next row (``now``: at once, mid-step), writing nothing more, and its ownership is released
        for any sweep to take (a worker that shuts down)."""
        self._released = True
        if now and self._scope is not None:
            self._scope.cancel()

    def _stop_if_released(self) -> bool:
        """After a row: a run handed to the fleet stops here (its step in flight has its row);
        whether it did (the writer then checkpoints, so the cancel lands before the step)."""
        if self._released and self._scope is not None:
            self._scope.cancel()
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

    async def receive(self, ctx: ActorContext, message: Any) -> None:
        if not isinstance(message, Request):
            raise TypeError(f"run {self.execution_id!r} takes run requests, not {type(message).__name__}")
        # The runtime's registry is this process's one record of the run's actor (``Runs`` asks it);
        # ``busy`` says whether it is driving. No on_stop hook: an actor without one stops with no
        # shielded clean-up step.
        await self._answer(ctx, message)
        # Requests taken from the mailbox between two steps and left for after this one, in order.
        while self._deferred:
            await self._answer(ctx, self._deferred.popleft())
        ctx.passivate()

    async def _answer(self, ctx: ActorContext, request: Request) -> None:
        reply = request.reply
        try:
            result = await self._handle(ctx, request)
        except anyio.get_cancelled_exc_class():
            stopped = ActorStopped(
                f"the actor of run {self.execution_id!r} stopped before the run paused or ended; "
                "the run stays recoverable: resume it"
            )
            reply.settle(None, stopped)
            self._warn_stopped()
            raise
        except Exception as error:
            reply.settle(None, error)
        else:
            reply.settle(result, None)
            if result.status == "waiting" and self._on_rest is not None:
                self._on_rest(result.wake_at)

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

    async def _handle(self, ctx: ActorContext, request: Request) -> RunResult:
        opening = self._opening
        if opening is not None and opening.reply is request.reply:
            self._opening = None
            return await self._adopt(ctx, opening)
        engine = level_of(self.runner, self._rows(request.reply), self.runner.label, self.runner)
        message: RunMessage = request.message
        match message:
            case Cancel(reason=reason):
                # No lock: the marker takes the next seq, and a live owner elsewhere then loses its
                # next write (WriteConflict) and stops. The log is the lock.
                return await engine.cancel(reason)
            case GiveUp(error=error):
                return await engine.cancel("max_recoveries", error=error)
            case Spawn():  # a spawn's caller opens the run itself (``open``): it comes only so
                raise TypeError(f"run {self.execution_id!r}: a spawn comes with its opening")
            case SpawnFork(base=base, appended=appended):
                extra = Message.from_dict(appended) if appended is not None else None
                return await self._owned(
                    ctx, engine, lambda: engine.fork(base, extra), refuse=RunExists, new=True
                )
            case ResumeRun(resume=resume):
                return await self._owned(ctx, engine, lambda: engine.resume(resume), refuse=AlreadyResumed)
            case Recover():
                return await self._owned(ctx, engine, lambda: engine.resume(None), refuse=AlreadyResumed)
            case Wake():
                return await self._owned(ctx, engine, engine.wake, refuse=AlreadyResumed)
        raise TypeError(f"unknown run message {message!r}")  # pragma: no cover

    async def _steps(
        self, ctx: ActorContext, engine: Level, first: Callable[[], Awaitable[Next | None]]
    ) -> RunResult:
        """The activation: its entry point, then its steps in order (its children's outcomes between
        them), the mailbox read between two steps; its tool sources' connections live as long. An
        entry point with nothing to do (a wake of a run no longer waiting) gives ``None``: how the
        run stands."""
        async with activation_sources(uses_sources(self.runner)) as connections:
            engine.rows.sources = connections
            begin = await first()
            if begin is None:
                return await engine.standing()
            outcome = await drive(ctx, engine, begin, between=self._between_steps, take=self._take)
            if outcome is None:
                assert self._cancel_reason is not None
                return await engine.cancel(self._cancel_reason)
            if isinstance(outcome, HandedOff):
                raise TypeError(f"run {self.execution_id!r}: the root runner cannot hand off")
            return await engine.conclude(outcome)

    def _between_steps(self, ctx: ActorContext) -> bool:
        """Handle what is queued; whether to stop (a Cancel came) before the next step. A run this
        process lost (its liveness lock) stops here, writing nothing."""
        self._refuse_abandoned()
        while (item := ctx.receive_nowait()) is not None:
            self._take(item)
        return self._cancel_reason is not None

    def _take(self, item: object) -> None:
        """A request that came during an activation: a Cancel stops the run before its next step;
        other requests wait for the end of this activation (one activation at a time)."""
        if not isinstance(item, Request):
            raise TypeError(f"run {self.execution_id!r} takes run requests, not {type(item).__name__}")
        if isinstance(item.message, Cancel) and self._cancel_reason is None:
            self._cancel_reason = item.message.reason
        self._deferred.append(item)

    async def _adopt(self, ctx: ActorContext, opening: Opening) -> RunResult:
        """Drive a spawn whose caller took the run and wrote its first row (:meth:`open`)."""
        engine, step, messages = opening.engine, opening.next, opening.messages
        assert engine is not None

        async def first() -> Next:
            return step if step is not None else await engine.start(messages)

        return await self._owned(ctx, engine, first, refuse=RunExists, taken=True)

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

    async def _owned(
        self,
        ctx: ActorContext,
        engine: Level,
        first: Callable[[], Awaitable[Next | None]],
        *,
        refuse: type[TetherError],
        new: bool = False,
        taken: bool = False,
    ) -> RunResult:
        """:meth:`_activation`, in its ``invoke_agent`` span when the run is traced."""
        trace = self._traced(engine.rows, new=new)
        if trace is None:
            return await self._activation(ctx, engine, first, refuse=refuse, new=new, taken=taken)
        return await trace.activation(
            lambda: self._activation(ctx, engine, first, refuse=refuse, new=new, taken=taken)
        )

    async def _activation(
        self,
        ctx: ActorContext,
        engine: Level,
        first: Callable[[], Awaitable[Next | None]],
        *,
        refuse: type[TetherError],
        new: bool = False,
        taken: bool = False,
    ) -> RunResult:
        """Run the activation holding the run's ownership lock (``taken``: held already, else taken
        by :meth:`_take_lock`); a cancel of it writes the failed marker. The lock is released last,
        shielded and bounded: by the activation's own scope when nothing cancelled the steps (one
        scope less per activation), else by :meth:`_unlock`."""
        if not taken:
            await self._take_lock(refuse=refuse, new=new)
        self._active = True
        try:
            self._cancel_reason = None
            self._abandoned = False
            released = False
            with cancel_scope() as scope:
                self._scope = scope
                result = await self._steps(ctx, engine, first)
                self._scope = None
                if not scope.cancel_called:
                    self._refuse_abandoned()
                    self._refuse_released()
                    # Nothing can cancel this scope any more (no step in flight): from here it is
                    # the release's, shielded and bounded as in _unlock; a cut release stays quiet.
                    released = True
                    scope.shield = True
                    scope.deadline = loop_time() + _UNLOCK_TIMEOUT
                    await self._release()
            if released:
                return result
            self._scope = None
            self._refuse_abandoned()
            self._refuse_released()
            if scope.cancelled_caught:
                return await engine.cancel(self._cancel_reason or "cancelled")
            return result
        finally:
            self._scope = None
            if self._active:
                await self._unlock()

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
        # One shielded scope with a deadline (not a shield plus a move_on_after): bounded, quiet.
        with shielded(_UNLOCK_TIMEOUT):
            await self._release()

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
