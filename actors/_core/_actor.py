"""``Actor``, the base class users subclass, and ``ActorContext``, what its hooks receive."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from ._log import tether_logger
from ._supervision import ChildSpec, Restart, Supervision

if TYPE_CHECKING:
    import structlog

    from ._cell import Cell
    from ._ref import ActorRef

__all__ = ["Actor", "ActorContext"]


class Actor:
    """An actor: state plus three hooks, run one message at a time by the runtime.

    ``receive``'s return value is the reply to an ``ask``. ``supervision`` says how the children this
    actor starts with ``ctx.start_child`` are supervised. An actor with ``runs_tasks`` may start tasks
    of its own (``ctx.start_task``): its work that waits (a model call, a tool) runs there and reports
    back to the mailbox, so the actor goes on taking messages meanwhile.
    """

    supervision: ClassVar[Supervision] = Supervision()
    runs_tasks: ClassVar[bool] = False

    async def on_start(self, ctx: ActorContext) -> None:
        """Run before the first message (and again on every restart)."""

    async def receive(self, ctx: ActorContext, message: Any) -> Any:
        """Handle one message; the return value answers an ``ask``."""
        return None

    async def on_stop(self, ctx: ActorContext) -> None:
        """Run when an incarnation ends (not after a failed ``on_start``), shielded and time-bounded."""


class ActorContext:
    """What an actor's hooks get: its ref, logger, system and a way to start supervised children.

    One context lives as long as the actor, across restarts.
    """

    __slots__ = ("_cell", "_log")

    def __init__(self, cell: Cell) -> None:
        self._cell = cell
        self._log: structlog.stdlib.BoundLogger | None = None

    @property
    def self(self) -> ActorRef:
        """This actor's own ref."""
        return self._cell.ref

    @property
    def id(self) -> str:
        return self._cell.id

    @property
    def system(self) -> Any:
        """The ``ActorSystem`` this actor runs in (typed loosely: the runtime does not know the
        façade built on it)."""
        return self._cell.runtime.system

    @property
    def bindings(self) -> Mapping[str, object]:
        """Extra log bindings given at start (e.g. ``execution_id``)."""
        return self._cell.spec.bindings

    @property
    def log(self) -> structlog.stdlib.BoundLogger:
        """A logger on the standard-library ``"tether"`` logger, bound with ``actor_id`` and the start
        bindings (built on first use)."""
        if self._log is None:
            self._log = tether_logger(actor_id=self._cell.id, **self._cell.spec.bindings)
        return self._log

    async def start_child(
        self,
        actor: Actor | Callable[[], Actor] | ChildSpec,
        *,
        name: str | None = None,
        restart: Restart = Restart.PERMANENT,
        mailbox_size: int = 1024,
        stop_timeout: float = 2.0,
        bindings: Mapping[str, object] | None = None,
    ) -> ActorRef:
        """Start a child supervised by this actor (see ``Actor.supervision``); return after its ``on_start``.

        Children stop (newest first) before this actor's ``on_stop`` and whenever it restarts.
        """
        spec = make_spec(
            actor,
            name=name,
            restart=restart,
            mailbox_size=mailbox_size,
            stop_timeout=stop_timeout,
            bindings=bindings,
        )
        return await self._cell.start_child(spec)

    def start_task(self, fn: Callable[..., Awaitable[object]], *args: object) -> None:
        """Run ``fn(*args)`` as a task of this actor (an actor with ``runs_tasks``): it lives in the
        actor's incarnation, is cancelled with it, and keeps a passivating actor alive until it ends.
        A task reports back by sending to ``ctx.self``; an exception it lets out crashes the actor."""
        self._cell.start_task(fn, args)

    def stop(self) -> None:
        """End this actor normally after the current message (a ``permanent`` actor is restarted)."""
        self._cell.stop_normally()

    def passivate(self) -> None:
        """Retire this actor as soon as its mailbox is empty (never restarted; no message is lost).

        For an actor activated by key (``ActorRuntime.deliver``), the next message to that key
        activates a fresh one. Called from the actor's own handler it costs no extra mailbox hop.
        """
        self._cell.passivate()


def make_spec(
    actor: Actor | Callable[[], Actor] | ChildSpec,
    *,
    name: str | None = None,
    restart: Restart = Restart.PERMANENT,
    mailbox_size: int = 1024,
    stop_timeout: float = 2.0,
    idle_timeout: float | None = None,
    bindings: Mapping[str, object] | None = None,
) -> ChildSpec:
    """Build a :class:`ChildSpec` from an actor, an actor factory or a ready spec."""
    if isinstance(actor, ChildSpec):
        return actor
    if mailbox_size < 1:
        raise ValueError("mailbox_size must be at least 1")
    factory: Callable[[], Actor]
    if isinstance(actor, Actor):
        instance = actor
        factory = lambda: instance  # noqa: E731
    else:
        factory = actor
    return ChildSpec(
        factory=factory,
        restart=restart,
        name=name,
        mailbox_size=mailbox_size,
        stop_timeout=stop_timeout,
        idle_timeout=idle_timeout,
        bindings=dict(bindings or {}),
    )
