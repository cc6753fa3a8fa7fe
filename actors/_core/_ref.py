"""``ActorRef``: the handle used to talk to an actor through its bounded mailbox."""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import anyio
import msgspec
from anyio import BrokenResourceError, ClosedResourceError, WouldBlock

from ._errors import ActorStopped, AskDeadlock, AskTimeout, MailboxFull
from ._mailbox import Failable

if TYPE_CHECKING:
    from ._cell import Cell
    from ._mailbox import Mailbox

__all__ = ["ActorInfo", "ActorRef", "current_cell"]

current_cell: ContextVar[Cell | None] = ContextVar("tether_current_actor", default=None)
"""The cell whose task is running (set once at the top of each actor task)."""


class Ask(Failable):
    """One ``ask`` in flight: the message and the slot its reply (or error) lands in."""

    __slots__ = ("abandoned", "done", "error", "event", "message", "value")

    def __init__(self, message: object) -> None:
        self.message = message
        self.event = anyio.Event()
        self.done = False
        self.abandoned = False
        self.value: Any = None
        self.error: BaseException | None = None

    def resolve(self, value: object) -> None:
        self.value = value
        self.done = True
        self.event.set()

    def fail(self, error: BaseException) -> None:
        if not self.done:
            self.error = error
            self.done = True
            self.event.set()


class ActorInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What :meth:`ActorRef.inspect` reads: a snapshot of one actor, taken without messaging it."""

    id: str
    alive: bool
    accepting: bool
    queued: int
    capacity: int
    received: int


class ActorRef:
    """A stable address of one actor; it survives the actor's restarts.

    Equal refs name the same actor. Sending to an actor that has exited raises :class:`ActorStopped`.
    """

    __slots__ = ("_cell", "_stream", "id")

    def __init__(self, cell: Cell, stream: Mailbox) -> None:
        self._cell = cell
        self._stream = stream
        self.id: str = cell.id

    def __repr__(self) -> str:
        return f"<ActorRef {self.id}>"

    @property
    def alive(self) -> bool:
        """Whether the actor still exists (it may be between two incarnations)."""
        return not self._cell.done

    def inspect(self) -> ActorInfo:
        """A snapshot of the actor: alive, queued messages, mailbox capacity, messages taken so far.

        Read directly, not through the mailbox, so it answers at once even when the mailbox is full
        or the actor is stuck in a handler.
        """
        cell = self._cell
        stats = self._stream.statistics()
        return ActorInfo(
            id=self.id,
            alive=self.alive,
            accepting=cell.accepting,
            queued=stats.current_buffer_used,
            capacity=int(stats.max_buffer_size),
            received=cell.processed,
        )

    async def send(self, message: object) -> None:
        """Put ``message`` in the mailbox, waiting for room while it is full (backpressure).

        Like ``asyncio.Queue.put``, it only yields to the event loop when it has to wait.
        """
        try:
            self._stream.send_nowait(message)
        except WouldBlock:
            try:
                await self._stream.send(message)
            except (BrokenResourceError, ClosedResourceError):
                raise ActorStopped(f"{self.id} has stopped") from None
        except (BrokenResourceError, ClosedResourceError):
            raise ActorStopped(f"{self.id} has stopped") from None

    def send_nowait(self, message: object) -> None:
        """Put ``message`` in the mailbox now or raise :class:`MailboxFull`."""
        try:
            self._stream.send_nowait(message)
        except WouldBlock:
            raise MailboxFull(f"the mailbox of {self.id} is full") from None
        except (BrokenResourceError, ClosedResourceError):
            raise ActorStopped(f"{self.id} has stopped") from None

    async def ask(self, message: object, *, timeout: float) -> Any:
        """Send ``message`` and return what the actor's ``receive`` returned for it.

        ``timeout`` bounds the whole exchange, including waiting for mailbox room. Raises
        :class:`AskTimeout`, :class:`ActorCrashed` (the handler raised; its error is the cause),
        :class:`ActorStopped`, or :class:`AskDeadlock` at once when an actor asks itself from its
        own task. An ask that timed out before the actor took it is skipped.
        """
        cell = self._cell
        if current_cell.get() is cell:
            raise AskDeadlock(f"{self.id} asked itself from its own handler; the reply could never come")
        request = Ask(message)
        try:
            self._stream.send_nowait(request)
        except WouldBlock:
            return await self._ask_waiting(request, timeout)
        except (BrokenResourceError, ClosedResourceError):
            raise ActorStopped(f"{self.id} has stopped") from None
        if not cell.runtime.deadlines.watch(request, timeout):
            return await self._ask_waiting(request, timeout, sent=True)
        try:
            # Bounded: the runtime's deadline task fails the request with AskTimeout.
            await request.event.wait()
        except BaseException:
            request.abandoned = True
            raise
        if request.error is not None:
            if isinstance(request.error, AskTimeout):
                raise AskTimeout(f"{self.id} did not answer within {timeout}s")
            raise request.error
        return request.value

    async def _ask_waiting(self, request: Ask, timeout: float, *, sent: bool = False) -> Any:
        """The slow path (mailbox full, or no runtime timer): one cancel scope bounds it all."""
        with anyio.move_on_after(timeout):
            if not sent:
                await self.send(request)
            await request.event.wait()
        if request.done:
            if request.error is not None:
                raise request.error
            return request.value
        request.abandoned = True
        raise AskTimeout(f"{self.id} did not answer within {timeout}s")

    async def stop(self, *, timeout: float | None = None, drain: bool = False) -> None:
        """Stop the actor for good (it is never restarted) and wait until it has exited.

        The message being handled may finish; with ``drain=True`` queued messages are handled too,
        otherwise queued asks fail with :class:`ActorStopped`. After ``timeout`` seconds (default: the
        actor's ``stop_timeout``) the handler is cancelled. ``on_stop`` then runs shielded and
        time-bounded. Called by the actor on itself, it only requests the stop.
        """
        await self._cell.stop(timeout=timeout, drain=drain)
