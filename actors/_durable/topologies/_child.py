"""The machine each level's actor runs (the root's too), and the child actor of a topology level.

A level's actor holds a :class:`LevelMachine`. The level's work (its steps: model turns, tool
calls) runs as one task of the actor (``ctx.start_task``), which takes the steps in order and
reports the end of the work to the mailbox as :class:`~actors._durable._messages.WorkDone`; the
actor's own task stays free, so it takes every message meanwhile (a cancel cuts the work at once).
For a :class:`~actors._durable._level.Delegation` the work starts a :class:`ChildLevel` actor and
waits for its :class:`Reported`, which comes to the parent's mailbox and is handed on. A child is
stopped when the work that waits for it ends for any reason, so no level outlives the activation
that started it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio

from ..._core import (
    Actor,
    ActorContext,
    ActorRef,
    ActorStopped,
    LazyEvent,
    Restart,
    cancel_scope,
    loop_time,
    shielded,
)
from .._level import Delegation, Level, Next
from .._messages import Answered, Failed, HandedOff, Outcome, Paused, Waiting, WorkDone
from ._protocol import Begin, Reported

__all__ = ["ChildLevel", "LevelMachine"]

#: Bound on stopping a child actor once its parent no longer waits for it (shielded).
_STOP_TIMEOUT = 5.0
_OUTCOMES = (Answered, Paused, Waiting, Failed, HandedOff)


class LevelMachine:
    """What one level's actor has in flight: the level's work, run as one task of the actor
    (:meth:`start`) that takes its steps in order (:meth:`drive`) and reports :class:`WorkDone` to
    the mailbox; a child level's actor it waits for; and the scope that cuts it all."""

    __slots__ = ("_arrived", "ctx", "level", "report", "scope")

    def __init__(self, ctx: ActorContext, level: Level) -> None:
        self.ctx = ctx
        self.level = level
        self.scope: anyio.CancelScope | None = None
        #: How the work ended, once it has (also when its message never reached the actor: a stop
        #: closed the mailbox with it queued).
        self.report: WorkDone | None = None
        self._arrived: _Arrival | None = None

    def start(
        self,
        work: Callable[[], Awaitable[object]],
        orphaned: Callable[[WorkDone], Awaitable[None]] | None = None,
    ) -> None:
        """Run ``work`` as a task of the actor; it reports :class:`WorkDone` to the mailbox, or,
        when the actor's loop has ended (a stop lets the work run to its bound), to ``orphaned``."""
        # Made here, entered in the task: a cut before the task runs still cancels it.
        scope = self.scope = cancel_scope()
        self.ctx.start_task(self._work, scope, work, orphaned)

    async def _work(
        self,
        scope: anyio.CancelScope,
        work: Callable[[], Awaitable[object]],
        orphaned: Callable[[WorkDone], Awaitable[None]] | None,
    ) -> None:
        report: WorkDone
        with scope:
            try:
                report = WorkDone(value=await work())
            except Exception as error:
                report = WorkDone(error=error)
        if scope.cancelled_caught:
            report = WorkDone(cut=True)
        self.report = report
        try:
            await self.ctx.self.send(report)
        except ActorStopped:
            if orphaned is not None:
                await orphaned(report)

    async def drive(self, found: Next, stop: Callable[[], bool]) -> Outcome | None:
        """Take the level's steps from ``found`` to its outcome; ``None`` when ``stop`` (asked
        before each step) says to stop."""
        level = self.level
        while True:
            if isinstance(found, Delegation):
                found = await level.after_child(await self._run_child(found))
            elif isinstance(found, _OUTCOMES):
                return found
            else:
                if stop():
                    return None
                found = await level.step(found)

    async def _run_child(self, delegation: Delegation) -> Outcome:
        """Run ``delegation`` as a child actor and wait for its report (as long as the child's
        steps take, as ``RunRef.result()`` does); a cut of this level stops the child with it."""
        ref = await self.ctx.start_child(
            ChildLevel(delegation, self.ctx.self),
            restart=Restart.TEMPORARY,
            bindings={"execution_id": delegation.level.execution_id, "agent_path": delegation.level.path},
        )
        arrived = self._arrived = _Arrival()
        try:
            await ref.send(Begin())
            await arrived.event.wait()
            report = arrived.report
            assert report is not None
            if report.error is not None:
                raise report.error
            outcome: Outcome = report.outcome
            return outcome
        finally:
            self._arrived = None
            with shielded(_STOP_TIMEOUT):
                await ref.stop(timeout=0)

    def reported(self, report: Reported) -> None:
        """A child's report came to the actor's mailbox: hand it to the work waiting for it."""
        arrived = self._arrived
        if arrived is not None and arrived.report is None:
            arrived.report = report
            arrived.event.set()

    def cut(self) -> None:
        """Cancel the work in flight (a child it waits for is stopped with it)."""
        if self.scope is not None:
            self.scope.cancel()

    def bound(self, seconds: float) -> None:
        """Cut the work in flight in ``seconds`` at the latest."""
        if self.scope is not None:
            self.scope.deadline = min(self.scope.deadline, loop_time() + seconds)


class _Arrival:
    __slots__ = ("event", "report")

    def __init__(self) -> None:
        self.event = LazyEvent()
        self.report: Reported | None = None


def _never() -> bool:
    return False


class ChildLevel(Actor):
    """The actor of one working level of a topology (a worker, the active swarm member): it takes
    its level from ``Begin`` to an outcome and reports it to its parent, then stops."""

    runs_tasks = True

    def __init__(self, delegation: Delegation, parent: ActorRef) -> None:
        self.delegation = delegation
        self.parent = parent
        self.machine: LevelMachine | None = None

    async def receive(self, ctx: ActorContext, message: object) -> None:
        match message:
            case Begin():
                machine = self.machine = LevelMachine(ctx, self.delegation.level)
                begin = self.delegation.begin
                machine.start(lambda: self._work(machine, begin))
            case WorkDone(value=outcome, error=error):
                try:
                    await self.parent.send(Reported(outcome=outcome, error=error))
                finally:
                    ctx.stop()
            case Reported() if self.machine is not None:
                self.machine.reported(message)
            case _:
                raise TypeError(
                    f"a topology level takes Begin and its children's reports, not {type(message).__name__}"
                )

    @staticmethod
    async def _work(machine: LevelMachine, begin: Callable[[], Awaitable[Next]]) -> Outcome | None:
        return await machine.drive(await begin(), _never)
