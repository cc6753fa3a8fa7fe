"""The child actor of a topology level, and the loop every level's actor runs (the root's too).

:func:`drive` hands a level its steps in order, in the actor's own task; when a step asks for a child
(:class:`~actors._durable._engine.Delegation`) it starts a :class:`ChildLevel` actor under the
current one, sends it ``Begin`` and reads its own mailbox until the child's ``Reported`` comes; the
outcome goes back to the level. Messages that arrive meanwhile (a run request at the root) go to
``take``. A child is stopped when its parent leaves the wait for any reason (a cancel, a stop), so
no level outlives the activation that started it.
"""

from __future__ import annotations

from collections.abc import Callable

from ..._core import Actor, ActorContext, ActorRef, Restart, shielded
from .._level import Delegation, Level, Next
from .._messages import Answered, Failed, HandedOff, Outcome, Paused, Waiting
from ._protocol import Begin, Reported

__all__ = ["ChildLevel", "drive"]

#: Bound on stopping a child actor once its parent no longer waits for it (shielded).
_STOP_TIMEOUT = 5.0
_OUTCOMES = (Answered, Paused, Waiting, Failed, HandedOff)


def _never(ctx: ActorContext) -> bool:
    return False


def _refuse(item: object) -> None:
    raise TypeError(f"a topology level takes its children's reports, not {type(item).__name__}")


async def drive(
    ctx: ActorContext,
    level: Level,
    first: Next,
    *,
    between: Callable[[ActorContext], bool] = _never,
    take: Callable[[object], None] = _refuse,
) -> Outcome | None:
    """Drive ``level`` from ``first`` to its outcome; ``None`` when ``between`` (asked before each
    step) says to stop."""
    step = first
    while True:
        if isinstance(step, Delegation):
            step = await level.after_child(await _run_child(ctx, step, take))
        elif isinstance(step, _OUTCOMES):
            return step
        else:
            if between(ctx):
                return None
            step = await level.step(step)


async def _run_child(ctx: ActorContext, delegation: Delegation, take: Callable[[object], None]) -> Outcome:
    """Run ``delegation`` as a child actor and wait for its report. The wait is as long as the
    child's steps (model calls, tools), as ``RunRef.result()`` is; a cancel or a stop of this actor
    ends it, and the child with it."""
    ref = await ctx.start_child(
        ChildLevel(delegation, ctx.self),
        restart=Restart.TEMPORARY,
        bindings={"execution_id": delegation.level.execution_id, "agent_path": delegation.level.path},
    )
    try:
        await ref.send(Begin())
        while True:
            item = await ctx.receive()
            if isinstance(item, Reported):
                if item.error is not None:
                    raise item.error
                outcome: Outcome = item.outcome
                return outcome
            take(item)
    finally:
        with shielded(_STOP_TIMEOUT):
            await ref.stop(timeout=0)


class ChildLevel(Actor):
    """The actor of one working level of a topology (a worker, the active swarm member)."""

    def __init__(self, delegation: Delegation, parent: ActorRef) -> None:
        self.delegation = delegation
        self.parent = parent

    async def receive(self, ctx: ActorContext, message: object) -> None:
        match message:
            case Begin():
                try:
                    first = await self.delegation.begin()
                    report = Reported(outcome=await drive(ctx, self.delegation.level, first))
                except Exception as error:
                    report = Reported(error=error)
                await self.parent.send(report)
                ctx.stop()
            case _:
                raise TypeError(f"a topology level takes Begin, not {type(message).__name__}")
