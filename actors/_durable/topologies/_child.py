"""The machine each level's actor runs (the root's too), and the child actor of a topology level.

A level's actor holds a :class:`LevelMachine`: what its level has in flight. Each step (a model turn,
a tool call) runs as a task of the actor (``ctx.start_task``) whose result comes back to the mailbox
as :class:`~actors._durable._messages.Stepped`; the actor then takes the next transition
(:meth:`LevelMachine.advance`): the next step's task, a :class:`ChildLevel` actor for a
:class:`~actors._durable._level.Delegation` (whose :class:`Reported` comes back the same way), or
the level's outcome. The actor never loops on its own, so between two transitions it handles
whatever else its mailbox holds. A child is stopped when its parent's activation ends for any
reason, so no level outlives the activation that started it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio

from ..._core import Actor, ActorContext, ActorRef, ActorStopped, Restart, cancel_scope, loop_time
from .._level import Delegation, Level, Next
from .._messages import Answered, Failed, HandedOff, Outcome, Paused, Stepped, Waiting
from ._protocol import Begin, Reported

__all__ = ["ChildLevel", "LevelMachine", "is_step"]

_OUTCOMES = (Answered, Paused, Waiting, Failed, HandedOff)


def is_step(found: Next) -> bool:
    """Whether ``found`` (what a level's work gave) is a step of the level itself."""
    return not isinstance(found, (Delegation, *_OUTCOMES))


class LevelMachine:
    """What one level's actor has in flight: the task of a step (``scope``) or a child level's actor
    (``child``), never both. The actor feeds it the reports that come back to its mailbox."""

    __slots__ = ("child", "ctx", "level", "scope")

    def __init__(self, ctx: ActorContext, level: Level) -> None:
        self.ctx = ctx
        self.level = level
        self.scope: anyio.CancelScope | None = None
        self.child: ChildLevel | None = None

    def run(self, work: Callable[[], Awaitable[Next | None]]) -> None:
        """Start ``work`` as a task of the actor; it reports :class:`Stepped` to the mailbox."""
        # Made here, entered in the task: a cut before the task runs still cancels it.
        scope = self.scope = cancel_scope()
        self.ctx.start_task(self._work, scope, work)

    async def _work(self, scope: anyio.CancelScope, work: Callable[[], Awaitable[Next | None]]) -> None:
        report: Stepped
        with scope:
            try:
                report = Stepped(next=await work())
            except Exception as error:
                report = Stepped(error=error)
        if scope.cancelled_caught:
            report = Stepped(cut=True)
        try:
            await self.ctx.self.send(report)
        except ActorStopped:
            pass  # the actor stops: its clean-up answers for the run

    async def advance(self, found: Next) -> Outcome | None:
        """The transition after the level's work gave ``found``: a step starts its task, a
        delegation its child actor (``None`` while either is in flight); an outcome ends the level.
        A caller that stops before a step checks :func:`is_step` first."""
        if isinstance(found, Delegation):
            await self._start_child(found)
            return None
        if isinstance(found, _OUTCOMES):
            return found
        level = self.level
        self.run(lambda: level.step(found))
        return None

    def reported(self, report: Reported) -> Stepped | None:
        """Take a child's report: its outcome goes back to the level (a task of
        :meth:`~actors._durable._level.Level.after_child`: ``None``); an error or a cut becomes the
        :class:`Stepped` to handle. A report from no child in flight (a late one) is dropped: ``None``."""
        if self.child is None:
            return None
        self.child = None
        if report.cut:
            return Stepped(cut=True)
        if report.error is not None:
            return Stepped(error=report.error)
        outcome: Outcome = report.outcome
        level = self.level
        self.run(lambda: level.after_child(outcome))
        return None

    def cut(self) -> None:
        """Cancel what is in flight: the step's task, or the child's (which then reports the cut)."""
        if self.scope is not None:
            self.scope.cancel()
        elif self.child is not None:
            self.child.cut()

    def bound(self, seconds: float) -> None:
        """Cut what is in flight in ``seconds`` at the latest."""
        if self.scope is not None:
            self.scope.deadline = min(self.scope.deadline, loop_time() + seconds)
        elif self.child is not None:
            self.child.bound(seconds)

    async def _start_child(self, delegation: Delegation) -> None:
        child = ChildLevel(delegation, self.ctx.self)
        ref: ActorRef = await self.ctx.start_child(
            child,
            restart=Restart.TEMPORARY,
            bindings={"execution_id": delegation.level.execution_id, "agent_path": delegation.level.path},
        )
        self.child = child
        await ref.send(Begin())


class ChildLevel(Actor):
    """The actor of one working level of a topology (a worker, the active swarm member): it takes
    its level from ``Begin`` to an outcome and reports it to its parent, then stops."""

    runs_tasks = True

    def __init__(self, delegation: Delegation, parent: ActorRef) -> None:
        self.delegation = delegation
        self.parent = parent
        self.machine: LevelMachine | None = None

    def cut(self) -> None:
        """The parent gives up on this level: cancel what it has in flight (it reports the cut)."""
        if self.machine is not None:
            self.machine.cut()

    def bound(self, seconds: float) -> None:
        if self.machine is not None:
            self.machine.bound(seconds)

    async def receive(self, ctx: ActorContext, message: object) -> None:
        try:
            match message:
                case Begin():
                    self.machine = LevelMachine(ctx, self.delegation.level)
                    self.machine.run(self.delegation.begin)
                case Stepped():
                    await self._stepped(ctx, message)
                case Reported():
                    assert self.machine is not None
                    stepped = self.machine.reported(message)
                    if stepped is not None:
                        await self._stepped(ctx, stepped)
                case _:
                    raise TypeError(
                        f"a topology level takes Begin and its children's reports, not {type(message).__name__}"
                    )
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as error:
            await self._report(ctx, Reported(error=error))

    async def _stepped(self, ctx: ActorContext, stepped: Stepped) -> None:
        machine = self.machine
        assert machine is not None
        machine.scope = None
        if stepped.cut:
            await self._report(ctx, Reported(cut=True))
        elif stepped.error is not None:
            await self._report(ctx, Reported(error=stepped.error))
        else:
            outcome = await machine.advance(stepped.next)
            if outcome is not None:
                await self._report(ctx, Reported(outcome=outcome))

    async def _report(self, ctx: ActorContext, report: Reported) -> None:
        try:
            await self.parent.send(report)
        finally:
            ctx.stop()
