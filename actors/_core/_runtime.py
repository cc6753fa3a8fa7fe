"""``ActorRuntime``: the task group, the root of the supervision tree, the registry and shutdown.

Every actor task belongs to the runtime (the supervision tree is logical, so a start costs one task
and no nested task group): on asyncio a plain task of the loop in a cancel scope of its own
(:class:`LoopTasks`), elsewhere a task of the runtime's task group. Leaving the runtime stops the
actors (children first, ``on_stop`` shielded and time-bounded), then cancels whatever is left; when
its block is cancelled it cancels them first, and a failure that escalates to the root stops them
and fails the block.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Coroutine, Hashable
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio

from ._cell import Cell
from ._deadlines import AskDeadlines
from ._errors import ActorCrashed, ActorStopped, RestartIntensityExceeded
from ._log import tether_logger
from ._primitives import LoopTasks, running_asyncio_loop
from ._registry import Registry
from ._supervision import ChildSpec, Supervision, SupervisionNode

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from ._actor import Actor
    from ._ref import ActorRef

__all__ = ["ActorRuntime"]

_log = tether_logger()


class ActorRuntime:
    """The actor runtime core that an :class:`ActorSystem` owns and delegates to."""

    def __init__(
        self,
        system: object,
        *,
        supervision: Supervision | None = None,
        shutdown_timeout: float = 3.0,
    ) -> None:
        self.system = system
        self.root = SupervisionNode(supervision or Supervision(), None, self)
        self.registry = Registry(self)
        self.deadlines = AskDeadlines()
        self.escalations: list[RestartIntensityExceeded] = []
        self.shutdown_timeout = shutdown_timeout
        self._tg: TaskGroup | None = None
        #: Where the actors' tasks and the background tasks run on asyncio (else in ``_tg``).
        self._loop_tasks: LoopTasks | None = None
        self._cells: set[Cell] = set()
        self._idle: set[Cell] = set()
        self._sweeper: anyio.CancelScope | None = None
        self._ids = itertools.count(1)
        self._closing = False
        self._failing = False

    @property
    def live_actors(self) -> int:
        """How many actor tasks are running (restarting actors included)."""
        return len(self._cells)

    # -- lifecycle --------------------------------------------------------------------------------

    async def __aenter__(self) -> ActorRuntime:
        if self._tg is not None:
            raise RuntimeError("an ActorRuntime can be entered only once")
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        loop = running_asyncio_loop()
        if loop is not None:
            self._loop_tasks = LoopTasks(loop, failed=self._actor_task_failed)
        self.deadlines.attach(tg)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        tg = self._tg
        assert tg is not None, "the runtime was not entered"
        tasks = self._loop_tasks
        if (
            tasks is not None
            and exc_type is not None
            and issubclass(exc_type, anyio.get_cancelled_exc_class())
        ):
            tasks.cancel()  # the block was cancelled: so are the actors, as in a task group
        with anyio.CancelScope(shield=True):
            await self._stop_all()
        tg.cancel_scope.cancel()  # what outlived the graceful stop; clean-ups stay shielded
        if tasks is not None and tasks.cancel():
            with anyio.CancelScope(shield=True):
                await tasks.wait()  # what is left runs only shielded, time-bounded clean-up
        try:
            return await tg.__aexit__(exc_type, exc, tb)
        except BaseExceptionGroup as group:
            rest = group.split(RestartIntensityExceeded)[1]
            if rest is None and self.escalations:
                raise self.escalations[0] from self.escalations[0].__cause__
            if rest is not None and len(rest.exceptions) == 1 and rest.exceptions[0] is exc:
                return None  # the block's own exception: let it propagate unwrapped
            raise

    async def _stop_all(self) -> None:
        """Stop every actor gracefully within ``shutdown_timeout`` (call shielded)."""
        self._closing = True
        if self._sweeper is not None:
            self._sweeper.cancel()
        with anyio.move_on_after(self.shutdown_timeout) as bound:
            await self.root.shutdown()
        self.deadlines.close()
        if bound.cancelled_caught:
            _log.warning("actor_system.shutdown_timeout", live=len(self._cells))

    def background(self, fn: Callable[[], Coroutine[Any, Any, None]]) -> bool:
        """Run ``fn()`` as a task of the runtime until it stops (cancelled then); ``False`` when
        the runtime is not open. It may be called from a plain callback of the loop (a timer's),
        where anyio's task group cannot tell which backend runs unless anyio started the loop: on
        asyncio the task is a plain task of the loop, as an actor's is."""
        if self._tg is None or self._closing:
            return False
        tasks = self._loop_tasks
        if tasks is not None:
            tasks.start(fn())
        else:
            self._tg.start_soon(fn)
        return True

    def _actor_task_failed(self, error: Exception) -> None:
        """An actor's task let an exception out (``Cell.run`` lets out none but a cancel): the
        block fails with it, as through a task group."""
        if self._tg is not None:
            self._tg.start_soon(_raise, error)

    def escalate(self, error: RestartIntensityExceeded) -> None:
        """A failure reached the root: report it and shut the system down (the block raises it)."""
        self.escalations.append(error)
        _log.error("actor_system.escalation", actor_id=error.actor_id, error=repr(error.__cause__))
        if self._failing or self._tg is None:
            return
        self._failing = True
        self._tg.start_soon(self._fail, error)

    async def _fail(self, error: RestartIntensityExceeded) -> None:
        with anyio.CancelScope(shield=True):
            await self._stop_all()
        raise error  # the task group cancels the block and re-raises it on exit

    # -- starting actors --------------------------------------------------------------------------

    async def start(self, spec: ChildSpec) -> ActorRef:
        """Start a top-level actor under the root supervision; return after its ``on_start`` ran."""
        return await self.spawn(spec, self.root)

    async def spawn(
        self, spec: ChildSpec, parent: SupervisionNode, *, key: Hashable | None = None, first: object = None
    ) -> ActorRef:
        """Start ``spec`` under ``parent``; raise :class:`ActorCrashed` if its first ``on_start`` fails.
        ``first``: as for :meth:`launch`.

        The wait is bounded by the actor's own ``on_start``.
        """
        cell = self.launch(spec, parent, key=key, first=first)
        await cell.started.wait()
        if cell.start_error is not None:
            crashed = ActorCrashed(f"{cell.id} failed in on_start: {cell.start_error!r}", actor_id=cell.id)
            crashed.__cause__ = cell.start_error
            raise crashed
        return cell.ref

    def launch(
        self, spec: ChildSpec, parent: SupervisionNode, *, key: Hashable | None = None, first: object = None
    ) -> Cell:
        """Start ``spec`` under ``parent`` without waiting: its task runs from the next turn of the
        event loop (``ActorStopped`` if the system is not running); ``first``, if given, is its first
        message (see ``Cell.first``). Its mailbox takes messages at once."""
        tg = self._tg
        if tg is None or self._closing or parent.closing:
            raise ActorStopped("the actor system is not running")
        actor_id = spec.name if spec.name is not None else f"actor-{next(self._ids)}"
        cell = Cell(self, spec, parent, actor_id, key)
        cell.first = first
        if key is not None:
            self.registry.bind(key, cell)
        parent.attach(cell)
        self._cells.add(cell)
        if spec.idle_timeout is not None:
            self._watch_idle(cell, spec.idle_timeout)
        tasks = self._loop_tasks
        if tasks is not None:
            tasks.start(cell.run())
        else:
            tg.start_soon(cell.run)
        return cell

    def cell_exited(self, cell: Cell) -> None:
        self._cells.discard(cell)
        self._idle.discard(cell)
        if cell.key is not None:
            self.registry.forget(cell.key, cell)

    # -- registry ---------------------------------------------------------------------------------

    async def get_or_activate(self, key: Hashable, factory: Callable[[], Actor], **options: Any) -> ActorRef:
        """The live actor for ``key``, created with ``factory`` on first use (see :class:`Registry`)."""
        return await self.registry.get_or_activate(key, factory, **options)

    async def deliver(
        self, key: Hashable, factory: Callable[[], Actor], message: object, **options: Any
    ) -> ActorRef:
        """Send ``message`` to the actor for ``key``, activating it if needed (see :class:`Registry`)."""
        return await self.registry.deliver(key, factory, message, **options)

    def lookup(self, key: Hashable) -> ActorRef | None:
        """The live, accepting actor for ``key``, if any (never activates)."""
        return self.registry.lookup(key)

    def live(self, key: Hashable) -> Actor | None:
        """The actor for ``key`` whose task has not exited yet, if any (see :meth:`Registry.live`)."""
        return self.registry.live(key)

    def live_keyed(self) -> list[tuple[Hashable, Actor]]:
        """Each key with its live actor (see :meth:`Registry.live_keyed`)."""
        return self.registry.live_keyed()

    def passivate(self, key: Hashable) -> bool:
        """Retire the actor for ``key`` as soon as its mailbox is empty."""
        return self.registry.passivate(key)

    def _watch_idle(self, cell: Cell, idle_timeout: float) -> None:
        cell.idle_since = anyio.current_time()
        self._idle.add(cell)
        if self._sweeper is None and self._tg is not None:
            self._sweeper = anyio.CancelScope()
            self._tg.start_soon(self._sweep, self._sweeper)

    async def _sweep(self, scope: anyio.CancelScope) -> None:
        """Passivate actors that took no message for their ``idle_timeout`` (one task for all)."""
        with scope:
            while True:
                interval = min((c.spec.idle_timeout or 1.0 for c in self._idle), default=1.0) / 2
                await anyio.sleep(interval)
                now = anyio.current_time()
                for cell in list(self._idle):
                    if cell.processed != cell.idle_seen:
                        cell.idle_seen = cell.processed
                        cell.idle_since = now
                    elif now - cell.idle_since >= (cell.spec.idle_timeout or 0.0):
                        self._idle.discard(cell)
                        cell.passivate()


async def _raise(error: Exception) -> None:
    raise error
