"""The cell: one actor's task, mailbox, control flags and incarnation loop.

An actor's mailbox is one bounded anyio memory-object stream: a ``send`` is one hop, an ``ask`` one
hop plus a reply event. Control requests (stop, restart, escalate, passivate) are flags read before
each message, plus a :data:`WAKE_TOKEN` only when the loop is idle, so they never wait behind a full
mailbox. A restart re-runs the hooks inside the same task with the same mailbox and ref.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from typing import TYPE_CHECKING

import anyio
import anyio.abc
import anyio.lowlevel
from anyio import BrokenResourceError, ClosedResourceError, WouldBlock

from ._actor import Actor, ActorContext
from ._errors import ActorCrashed, ActorStopped
from ._event import LazyEvent
from ._log import tether_logger
from ._mailbox import NOTHING, WAKE_TOKEN, ExitReason, Failable, Mailbox
from ._primitives import LoopTasks, cancel_scope, loop_time, running_asyncio_loop, shielded, within
from ._ref import ActorRef, Ask, current_cell
from ._supervision import ChildSpec, Restart, SupervisionNode

if TYPE_CHECKING:
    from ._runtime import ActorRuntime

__all__ = ["Cell"]

_log = tether_logger()

#: How many queued messages an actor takes in a row before it yields a turn of the loop.
_STREAK = 16

# A stronger request replaces a weaker one that is still pending.
_PRIORITY = {
    ExitReason.NORMAL: 1,
    ExitReason.PASSIVATE: 1,
    ExitReason.RESTART: 2,
    ExitReason.ESCALATE: 3,
    ExitReason.SHUTDOWN: 4,
    ExitReason.CRASH: 0,
}


class Cell:
    """Runs one actor: its hooks, its mailbox and its place in the supervision tree."""

    __slots__ = (
        "_mailbox",
        "accepting",
        "actor",
        "ctx",
        "done",
        "drain",
        "exit_error",
        "exit_request",
        "exited",
        "first",
        "id",
        "idle_seen",
        "idle_since",
        "key",
        "node",
        "parent",
        "passivate_when_idle",
        "processed",
        "ref",
        "running",
        "runtime",
        "scope",
        "signal",
        "spec",
        "start_error",
        "started",
        "tasks",
    )

    def __init__(
        self,
        runtime: ActorRuntime,
        spec: ChildSpec,
        parent: SupervisionNode,
        actor_id: str,
        key: Hashable | None = None,
    ) -> None:
        self.runtime = runtime
        self.spec = spec
        self.parent = parent
        self.id = actor_id
        self.key = key
        self._mailbox = Mailbox(spec.mailbox_size)
        self.ref = ActorRef(self, self._mailbox)
        self.actor: Actor = spec.factory()
        self.ctx = ActorContext(self)
        self.node: SupervisionNode | None = None
        #: Set once the first ``on_start`` ran (or failed) or the task ended; rarely awaited (``spawn``).
        self.started = LazyEvent()
        self.start_error: BaseException | None = None
        self.done = False
        #: Set once the actor's task has finished all its clean-up; most actors are never awaited.
        self.exited = LazyEvent()
        self.accepting = True
        self.signal = False
        self.exit_request: ExitReason | None = None
        self.exit_error: BaseException | None = None
        self.drain = False
        self.passivate_when_idle = False
        self.scope: anyio.CancelScope | None = None
        self.processed = 0
        #: A message handed over at launch: handled before the mailbox is read with no turn of the
        #: loop before it, even if a stop came first (it counts as taken; then within ``stop_timeout``).
        self.first: object | None = None
        self.idle_seen = -1
        self.idle_since = 0.0
        #: Where the tasks of an actor that ``runs_tasks`` run (in its incarnation), and how many do.
        self.tasks: anyio.abc.TaskGroup | LoopTasks | None = None
        self.running = 0

    # -- requests from other tasks (synchronous: they never wait behind the mailbox) --------------

    def request(
        self,
        reason: ExitReason,
        *,
        error: BaseException | None = None,
        timeout: float | None = None,
        drain: bool = False,
    ) -> None:
        """Ask the loop to end this incarnation for ``reason``; cancel the handler after ``timeout``."""
        current = self.exit_request
        if current is None or _PRIORITY[reason] > _PRIORITY[current]:
            self.exit_request = reason
            self.exit_error = error
        if drain:
            self.drain = True
        self.signal = True
        self._wake()
        scope = self.scope
        if timeout is not None and scope is not None:
            deadline = loop_time() + timeout
            if deadline < scope.deadline:
                scope.deadline = deadline

    def passivate(self) -> None:
        """Retire the actor the next time its mailbox is empty (no message can be lost)."""
        self.passivate_when_idle = True
        self.signal = True
        if current_cell.get() is not self:
            # From its own task (a run retiring itself after its message) the loop reads the flag
            # before its next receive anyway: no WAKE_TOKEN, no extra turn of the loop.
            self._wake()

    def stop_normally(self) -> None:
        self.request(ExitReason.NORMAL)

    async def stop(self, *, timeout: float | None, drain: bool) -> None:
        if self.done:
            return
        self.request(
            ExitReason.SHUTDOWN,
            timeout=self.spec.stop_timeout if timeout is None else timeout,
            drain=drain,
        )
        if current_cell.get() is self:
            return  # an actor cannot wait for its own exit; the loop ends after this message
        # Bounded: the loop is cancelled at the deadline; children and on_stop are time-bounded.
        await self.exited.wait()

    async def start_child(self, spec: ChildSpec) -> ActorRef:
        node = self.node
        if node is None:
            node = self.node = SupervisionNode(type(self.actor).supervision, self, self.runtime)
        return await self.runtime.spawn(spec, node)

    def start_task(self, fn: Callable[..., Awaitable[object]], args: tuple[object, ...]) -> None:
        tasks = self.tasks
        if tasks is None:
            raise RuntimeError(
                f"{self.id} cannot start a task: its actor class does not set runs_tasks = True, "
                "or it is not running"
            )
        self.running += 1
        if isinstance(tasks, LoopTasks):
            tasks.start(self._task(fn, args))
        else:
            tasks.start_soon(self._task, fn, args)

    async def _task(self, fn: Callable[..., Awaitable[object]], args: tuple[object, ...]) -> None:
        """One task of the actor."""
        try:
            await fn(*args)
        except Exception as exc:  # a task's failure is the actor's: it crashes as from receive
            _log.warning("actor.task_crash", actor_id=self.id, error=repr(exc))
            self.request(ExitReason.CRASH, error=exc)
        finally:
            self.running -= 1
            if not self.running and self.passivate_when_idle:
                self._wake()  # the loop looks again whether it can retire the actor

    def _wake(self) -> None:
        try:
            self._mailbox.send_nowait(WAKE_TOKEN)
        except (WouldBlock, BrokenResourceError, ClosedResourceError):
            pass  # full: the loop is not waiting and reads the flags before its next message

    # -- the task ---------------------------------------------------------------------------------

    async def run(self) -> None:
        """The actor's task: incarnations until supervision says stop; never raises but cancellation."""
        current_cell.set(self)
        reason = ExitReason.SHUTDOWN
        error: BaseException | None = None
        try:
            while True:
                reason, error = await self._incarnation()
                if self.start_error is not None:
                    break
                request = self.exit_request
                if request is ExitReason.SHUTDOWN:
                    break
                if reason is ExitReason.RESTART:
                    if self.spec.restart is Restart.TEMPORARY:
                        break
                elif reason is ExitReason.SHUTDOWN or reason is ExitReason.PASSIVATE:
                    break
                elif not self.parent.decide(self, reason, error):
                    break
                # Restart in place: same task, mailbox and ref; a pending weaker request is consumed.
                self.actor = self.spec.factory()
                self.exit_request = None
                self.exit_error = None
                self.signal = self.passivate_when_idle
        finally:
            self._finish(reason, error)

    async def _incarnation(self) -> tuple[ExitReason, BaseException | None]:
        actor = self.actor
        started = False
        reason = ExitReason.SHUTDOWN
        error: BaseException | None = None
        try:
            with cancel_scope() as scope:
                self.scope = scope
                if type(actor).on_start is not Actor.on_start:  # the base hook does nothing
                    await actor.on_start(self.ctx)
                started = True
                self.started.set()
                if type(actor).runs_tasks:
                    reason = await self._loop_with_tasks()
                else:
                    reason = await self._loop()
            if scope.cancelled_caught:
                reason = self.exit_request or ExitReason.SHUTDOWN
            if reason is ExitReason.ESCALATE:
                error = self.exit_error
        except Exception as exc:
            reason, error = ExitReason.CRASH, exc
            if not self.started.is_set():
                self.start_error = exc
            _log.warning("actor.crash", actor_id=self.id, error=repr(exc))
        finally:
            self.scope = None
            await self._end_incarnation(started)
        return reason, error

    async def _loop(self) -> ExitReason:
        receive = self._mailbox.receive
        handle = self._handle
        first, self.first = self.first, None
        if first is not None:
            scope = self.scope
            if self.exit_request is not None and scope is not None:  # a stop came before the task ran
                scope.deadline = min(scope.deadline, loop_time() + self.spec.stop_timeout)
            await handle(first)
        taken = 0  # messages taken in a row without waiting (the mailbox hands a queued one at once)
        while True:
            if self.signal:
                reason = await self._on_signal()
                if reason is not None:
                    return reason
            if taken < _STREAK:
                taken = taken + 1 if self._mailbox.ready() else 0
            else:  # a busy actor still lets others run
                taken = 0
                await anyio.lowlevel.checkpoint()
            item = await receive()
            if item is not WAKE_TOKEN:
                await handle(item)

    async def _loop_with_tasks(self) -> ExitReason:
        """:meth:`_loop` with somewhere to run the actor's tasks: plain tasks of the loop on asyncio
        (an anyio task group costs several times as much per task), a task group elsewhere. Tasks
        still running when the loop ends are cancelled, except on a stop: they then have until its
        deadline (on the incarnation's scope) to end, as a handler in flight has."""
        loop = running_asyncio_loop()
        if loop is None:
            async with anyio.create_task_group() as group:
                self.tasks = group
                try:
                    reason = await self._loop()
                finally:
                    self.tasks = None
                if reason is not ExitReason.SHUTDOWN:
                    group.cancel_scope.cancel()
            return reason
        tasks = self.tasks = LoopTasks(loop)
        try:
            reason = await self._loop()
            if reason is ExitReason.SHUTDOWN:
                await tasks.wait()
            return reason
        finally:
            self.tasks = None
            if tasks.cancel():
                with shielded(self.spec.stop_timeout):
                    await tasks.wait()

    async def _handle(self, item: object) -> None:
        self.processed += 1
        if type(item) is Ask:
            if item.abandoned:
                return
            try:
                value = await self.actor.receive(self.ctx, item.message)
            except Exception as exc:
                crashed = ActorCrashed(
                    f"{self.id} crashed handling {type(item.message).__name__}: {exc!r}", actor_id=self.id
                )
                crashed.__cause__ = exc
                item.fail(crashed)
                raise
            except BaseException:
                item.fail(ActorStopped(f"{self.id} was stopped while handling the message"))
                raise
            item.resolve(value)
        else:
            await self.actor.receive(self.ctx, item)

    async def _on_signal(self) -> ExitReason | None:
        request = self.exit_request
        if request is not None:
            if request is ExitReason.SHUTDOWN:
                if self.drain:
                    await self._drain()
                self._close_mailbox(None)
            return request
        if self.passivate_when_idle:
            if not self.running and self._mailbox.idle():
                # Synchronous from the check to the close: no message can slip in between.
                self._close_mailbox(None)
                return ExitReason.PASSIVATE
            return None
        self.signal = False
        return None

    async def _drain(self) -> None:
        """Handle what is queued now (bounded by the stop deadline on the loop's scope)."""
        take = self._mailbox.take
        while (item := take()) is not NOTHING:
            if item is not WAKE_TOKEN:
                await self._handle(item)

    async def _end_incarnation(self, started: bool) -> None:
        """Stop this incarnation's children, then run ``on_stop``; each step shielded and time-bounded.

        One shielded scope with a deadline per step (not a shield around a ``move_on_after``): the
        same bound, one scope less on every actor's exit.
        """
        node, self.node = self.node, None
        if node is not None:
            with shielded(self.spec.stop_timeout * 2 + 1.0):
                await node.shutdown()
        if not started or type(self.actor).on_stop is Actor.on_stop:  # the base hook does nothing
            return
        deadline = loop_time() + self.spec.stop_timeout
        with cancel_scope(shield=True) as bound:  # its deadline armed only if on_stop waits
            try:
                await within(bound, deadline, self.actor.on_stop(self.ctx))
            except Exception as exc:
                _log.error("actor.on_stop_failed", actor_id=self.id, error=repr(exc))
        if bound.cancelled_caught:
            _log.warning("actor.on_stop_timeout", actor_id=self.id, timeout=self.spec.stop_timeout)

    def _close_mailbox(self, cause: BaseException | None) -> None:
        """Refuse new messages and fail every queued ask or run request (synchronous, so nothing
        slips in): their senders wake with ``ActorStopped``; other messages are dropped."""
        if not self.accepting:
            return
        self.accepting = False
        dropped = 0
        first, self.first = self.first, None
        if isinstance(first, Failable):  # on_start failed before it was handled
            first.fail(ActorStopped(f"{self.id} stopped before handling the message"))
        take = self._mailbox.take
        while (item := take()) is not NOTHING:
            if isinstance(item, Failable):
                stopped = ActorStopped(f"{self.id} stopped before handling the message")
                stopped.__cause__ = cause
                item.fail(stopped)
            elif item is not WAKE_TOKEN:
                dropped += 1
        self._mailbox.close()
        if dropped:
            _log.warning("actor.dropped_messages", actor_id=self.id, count=dropped)

    def _finish(self, reason: ExitReason, error: BaseException | None) -> None:
        self._close_mailbox(error if reason is ExitReason.CRASH else None)
        self.parent.detach(self)
        self.runtime.cell_exited(self)
        self.started.set()
        self.done = True
        self.exited.set()
