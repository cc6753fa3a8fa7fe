"""The run actor: one actor per ``execution_id``, advanced by the messages in its mailbox.

Its messages are ``msgspec`` tagged unions with stable tags. :class:`Recover` and :class:`Cancel`
are public (``system.send(execution_id, Cancel("..."))``); a :class:`~actors.Resume` sent to a run
claims its pause. Each message that activates the run first takes the run's ownership lock, a lock
the operating system or the database frees when the owning process dies, and releases it when the
run pauses, ends or fails.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from stores import AlreadyResumed, Checkpoint, RunExists, Store

from ._actor import Actor, ActorContext
from ._engine import RunEngine
from ._errors import ActorStopped
from ._interrupt import Resume
from ._log import StepLog
from ._messages import Failable
from ._result import RunResult
from .models import Message

if TYPE_CHECKING:
    from ._agent import Agent

__all__ = ["Cancel", "Recover", "Reply", "Request", "RunActor", "RunMessage", "Spawn", "SpawnFork"]

#: Bound on releasing the ownership lock after an activation (shielded).
_UNLOCK_TIMEOUT = 5.0


class Spawn(msgspec.Struct, tag="spawn", frozen=True):
    """Start a fresh run from ``messages`` (their JSON forms)."""

    messages: list[dict[str, Any]]


class SpawnFork(msgspec.Struct, tag="fork", frozen=True):
    """Start a fork from ``base`` (a step of another run), with an optional next user message."""

    base: Checkpoint
    appended: dict[str, Any] | None = None


class ResumeRun(msgspec.Struct, tag="resume", frozen=True):
    """Claim the run's pause with ``resume``."""

    resume: Resume


class Recover(msgspec.Struct, tag="recover", frozen=True):
    """Crash recovery: re-enter the run at its newest row (a paused run needs a ``Resume`` instead)."""


class Cancel(msgspec.Struct, tag="cancel", frozen=True):
    """End the run with a failed ``run_end`` marker (reason ``cancelled`` by default)."""

    reason: str = "cancelled"


RunMessage = Spawn | SpawnFork | ResumeRun | Recover | Cancel


class Reply:
    """Where the outcome of one message to a run lands; ``RunRef.result()`` waits on it.

    ``started`` is set once the run is owned and its first row is down (or the message was refused),
    so ``spawn`` can raise ``RunExists`` itself.
    """

    __slots__ = ("done", "error", "result", "started")

    def __init__(self) -> None:
        self.started = anyio.Event()
        self.done = anyio.Event()
        self.result: RunResult | None = None
        self.error: BaseException | None = None

    def settle(self, result: RunResult | None, error: BaseException | None) -> None:
        self.result, self.error = result, error
        self.started.set()
        self.done.set()


class Request(Failable):
    """A message for a run actor and the reply slot of whoever sent it (in-process only)."""

    __slots__ = ("message", "reply")

    def __init__(self, message: RunMessage, reply: Reply) -> None:
        self.message = message
        self.reply = reply

    def fail(self, error: BaseException) -> None:
        """Settle the reply with ``error`` (waiters on ``started`` and ``done`` wake), if unsettled."""
        if not self.reply.done.is_set():
            self.reply.settle(None, error)


class RunActor(Actor):
    """The supervised actor of one run. Never restarted automatically (rule 12): recovery is explicit."""

    def __init__(self, *, store: Store, agent: Agent, execution_id: str, live: dict[str, RunActor]) -> None:
        self.store = store
        self._live = live
        self.agent = agent
        self.execution_id = execution_id
        self._log = StepLog(execution_id=execution_id, runner=agent.name)
        self._scope: anyio.CancelScope | None = None
        self._cancel_reason: str | None = None

    async def on_start(self, ctx: ActorContext) -> None:
        self._live[self.execution_id] = self

    async def on_stop(self, ctx: ActorContext) -> None:
        if self._live.get(self.execution_id) is self:
            del self._live[self.execution_id]

    @property
    def busy(self) -> bool:
        """Whether a start, resume or recovery of the run is in flight in this actor."""
        return self._scope is not None

    def cancel_current(self, reason: str) -> bool:
        """Cancel the step in flight, if any; the run then writes its failed marker. Returns whether
        a step was in flight."""
        if self._scope is None:
            return False
        self._cancel_reason = reason
        self._scope.cancel()
        return True

    async def receive(self, ctx: ActorContext, message: Any) -> None:
        if not isinstance(message, Request):
            raise TypeError(f"run {self.execution_id!r} takes run requests, not {type(message).__name__}")
        reply = message.reply
        try:
            result = await self._handle(message.message, reply)
        except anyio.get_cancelled_exc_class():
            stopped = ActorStopped(
                f"the actor of run {self.execution_id!r} stopped before the run paused or ended; "
                "the run stays recoverable: resume it"
            )
            reply.settle(None, stopped)
            raise
        except Exception as error:
            reply.settle(None, error)
        else:
            reply.settle(result, None)
        ctx.system.runtime.passivate(self.execution_id)

    async def _handle(self, message: RunMessage, reply: Reply) -> RunResult:
        engine = RunEngine(
            store=self.store,
            agent=self.agent,
            execution_id=self.execution_id,
            log=self._log,
            on_first_row=reply.started.set,
        )
        match message:
            case Cancel(reason=reason):
                # No lock: the marker takes the next seq, and a live owner elsewhere then loses its
                # next write (WriteConflict) and stops. The log is the lock.
                return await engine.cancel(reason)
            case Spawn(messages=messages):
                start = [Message.from_dict(m) for m in messages]
                return await self._owned(engine, lambda: engine.start(start), refuse=RunExists)
            case SpawnFork(base=base, appended=appended):
                extra = Message.from_dict(appended) if appended is not None else None
                return await self._owned(engine, lambda: engine.fork(base, extra), refuse=RunExists)
            case ResumeRun(resume=resume):
                return await self._owned(engine, lambda: engine.resume(resume), refuse=AlreadyResumed)
            case Recover():
                return await self._owned(engine, lambda: engine.resume(None), refuse=AlreadyResumed)
        raise TypeError(f"unknown run message {message!r}")  # pragma: no cover

    async def _owned(
        self, engine: RunEngine, operation: Callable[[], Awaitable[RunResult]], *, refuse: type[Exception]
    ) -> RunResult:
        """Run ``operation`` holding the run's ownership lock; a cancel of it writes the failed marker."""
        if not await self.store.try_lock(self.execution_id):
            raise refuse(f"run {self.execution_id!r} is owned by another live process or actor")
        try:
            self._cancel_reason = None
            with anyio.CancelScope() as scope:
                self._scope = scope
                result = await operation()
            self._scope = None
            if scope.cancelled_caught:
                return await engine.cancel(self._cancel_reason or "cancelled")
            return result
        finally:
            self._scope = None
            # One shielded scope with a deadline (not a shield plus a move_on_after): bounded, quiet.
            with anyio.CancelScope(deadline=anyio.current_time() + _UNLOCK_TIMEOUT, shield=True):
                await self.store.unlock(self.execution_id)
