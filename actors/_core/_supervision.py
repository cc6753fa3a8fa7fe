"""OTP-style restart machinery: strategies, restart types, intensity and escalation.

Named ``Supervision`` (not ``Supervisor``, which is the agent topology). Every actor owns one
:class:`SupervisionNode` per incarnation for the children it starts; the system owns the root node.
Restart decisions are plain synchronous calls made by the exiting child's own task, so a restart
costs no message hop and cannot be stuck behind a mailbox.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import anyio

from ._errors import RestartIntensityExceeded
from ._log import tether_logger
from ._mailbox import ExitReason

if TYPE_CHECKING:
    from ._actor import Actor
    from ._cell import Cell

__all__ = ["ChildSpec", "Restart", "RestartStrategy", "Supervision", "SupervisionNode"]

_log = tether_logger()


class RestartStrategy(enum.Enum):
    """Which children restart when one of them fails."""

    ONE_FOR_ONE = "one_for_one"
    """Only the failed child."""
    ONE_FOR_ALL = "one_for_all"
    """Every child of the same node."""
    REST_FOR_ONE = "rest_for_one"
    """The failed child and every child started after it."""


class Restart(enum.Enum):
    """When a child is restarted (an explicit ``ref.stop()`` never restarts it)."""

    PERMANENT = "permanent"
    """Always: after a crash and after ``ctx.stop()``."""
    TRANSIENT = "transient"
    """Only after a crash."""
    TEMPORARY = "temporary"
    """Never (durable run actors: recovery is explicit)."""


@dataclass(frozen=True, slots=True)
class Supervision:
    """How a node supervises its children: the strategy and the restart intensity.

    More than ``max_restarts`` restarts within ``within`` seconds make the node stop its children and
    fail to its parent (at the root: the system reports the escalation and shuts down).
    """

    strategy: RestartStrategy = RestartStrategy.ONE_FOR_ONE
    max_restarts: int = 3
    within: float = 5.0


@dataclass(frozen=True, slots=True)
class ChildSpec:
    """What the runtime needs to start (and restart) one actor.

    ``factory`` builds the actor; a restart calls it again (an actor *instance* given to ``start``
    becomes ``lambda: instance``, so its ``on_start`` must reset its state).
    """

    factory: Callable[[], Actor]
    restart: Restart = Restart.PERMANENT
    name: str | None = None
    mailbox_size: int = 1024
    stop_timeout: float = 2.0
    idle_timeout: float | None = None
    bindings: Mapping[str, object] = field(default_factory=dict)


class _EscalationSink(Protocol):
    def escalate(self, error: RestartIntensityExceeded) -> None: ...


class SupervisionNode:
    """The children of one supervising actor incarnation (or of the system root)."""

    __slots__ = ("_restarts", "children", "closing", "failed", "owner", "sink", "supervision")

    def __init__(self, supervision: Supervision, owner: Cell | None, sink: _EscalationSink) -> None:
        self.supervision = supervision
        self.owner = owner
        self.sink = sink
        self.children: list[Cell] = []
        self.closing = False
        self.failed = False
        self._restarts: deque[float] = deque()

    def attach(self, cell: Cell) -> None:
        self.children.append(cell)

    def detach(self, cell: Cell) -> None:
        try:
            self.children.remove(cell)
        except ValueError:
            pass

    def decide(self, cell: Cell, reason: ExitReason, error: BaseException | None) -> bool:
        """Return whether ``cell`` restarts; restart affected siblings or escalate as the strategy says."""
        if self.closing or self.failed:
            return False
        restart = cell.spec.restart
        abnormal = reason is ExitReason.CRASH or reason is ExitReason.ESCALATE
        if restart is Restart.TEMPORARY or not (
            abnormal or (reason is ExitReason.NORMAL and restart is Restart.PERMANENT)
        ):
            return False
        now = anyio.current_time()
        restarts = self._restarts
        restarts.append(now)
        while restarts and restarts[0] < now - self.supervision.within:
            restarts.popleft()
        if len(restarts) > self.supervision.max_restarts:
            self.failed = True
            failure = RestartIntensityExceeded(
                f"{cell.id} restarted more than {self.supervision.max_restarts} times "
                f"within {self.supervision.within}s",
                actor_id=cell.id,
            )
            failure.__cause__ = error
            if self.owner is None:
                self.sink.escalate(failure)
            else:
                _log.error("actor.escalate", actor_id=self.owner.id, child=cell.id)
                self.owner.request(ExitReason.ESCALATE, error=failure, timeout=self.owner.spec.stop_timeout)
            return False
        _log.warning("actor.restart", actor_id=cell.id, reason=reason.value, error=repr(error))
        strategy = self.supervision.strategy
        if strategy is not RestartStrategy.ONE_FOR_ONE and cell in self.children:
            index = self.children.index(cell)
            affected = self.children if strategy is RestartStrategy.ONE_FOR_ALL else self.children[index:]
            for sibling in reversed(affected):
                if sibling is not cell:
                    sibling.request(ExitReason.RESTART, timeout=sibling.spec.stop_timeout)
        return True

    async def shutdown(self) -> None:
        """Stop every child (newest first) and wait until they all exited.

        Call it shielded. Each wait is bounded: a child's loop is cancelled at its ``stop_timeout``
        deadline and its own clean-up (children, ``on_stop``) is time-bounded the same way.
        """
        self.closing = True
        children = list(self.children)
        for child in reversed(children):
            child.request(ExitReason.SHUTDOWN, timeout=child.spec.stop_timeout)
        for child in children:
            await child.exited.wait()
