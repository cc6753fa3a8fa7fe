"""The runtime's own vocabulary: why an actor incarnation ended, the mailbox wake-up token, and
:class:`Failable`, the mailbox items whose sender waits for an answer.

User messages are ``msgspec.Struct`` tagged unions (``class Ping(msgspec.Struct, tag="ping",
frozen=True)``) that an actor handles with ``match``. The runtime's control requests (stop, restart,
escalate, passivate) never travel through the bounded mailbox: they are flags on the actor's cell
plus, at most, one :data:`WAKE_TOKEN`, so a full mailbox cannot hold them back.
"""

from __future__ import annotations

import asyncio
import enum
from collections import deque
from typing import Final

import anyio
from anyio import ClosedResourceError, EndOfStream, WouldBlock

from ._primitives import new_event, running_asyncio_loop

__all__ = ["NOTHING", "WAKE_TOKEN", "ExitReason", "Failable", "Mailbox", "MailboxStatistics"]


class ExitReason(enum.Enum):
    """Why one incarnation of an actor ended; supervision decides from it whether to restart."""

    NORMAL = "normal"
    """The actor ended itself with ``ctx.stop()``; only ``permanent`` actors are restarted."""
    CRASH = "crash"
    """``on_start`` or ``receive`` raised; ``permanent`` and ``transient`` actors are restarted."""
    ESCALATE = "escalate"
    """A child exceeded its restart intensity; handled like a crash of this actor."""
    RESTART = "restart"
    """A sibling crashed under ``one_for_all`` / ``rest_for_one``; restarted without counting."""
    SHUTDOWN = "shutdown"
    """``ref.stop()``, the parent or the system stopped it; never restarted."""
    PASSIVATE = "passivate"
    """An idle registry actor was retired; the next message activates a new one."""


class Failable:
    """A mailbox item whose sender waits for an answer: an ``ask``, a request to a run actor.

    An actor whose mailbox closes with such an item still queued fails it with ``ActorStopped``, so
    its sender wakes with the error instead of waiting for an answer that will never come.
    """

    __slots__ = ()

    def fail(self, error: BaseException) -> None:
        """Wake the sender with ``error``; no effect once the item was answered."""
        raise NotImplementedError


class _Token:
    """A named marker that is never a message: :data:`WAKE_TOKEN`, :data:`NOTHING`."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


#: Wakes an actor waiting on its mailbox so it reads its control flags.
WAKE_TOKEN: Final = _Token("WAKE")
#: What :meth:`Mailbox.take` returns when no message is queued.
NOTHING: Final = _Token("NOTHING")


class MailboxStatistics:
    """How full a mailbox is (the fields of anyio's memory-stream statistics that actors read)."""

    __slots__ = ("current_buffer_used", "max_buffer_size", "tasks_waiting_send")

    def __init__(self, used: int, size: int, waiting: int) -> None:
        self.current_buffer_used = used
        self.max_buffer_size = size
        self.tasks_waiting_send = waiting


def _wake(reader: asyncio.Future[None] | anyio.Event) -> None:
    if isinstance(reader, asyncio.Future):
        if not reader.done():
            reader.set_result(None)
    else:
        reader.set()


class _Sender:
    """A sender waiting for room in a full mailbox, with its message."""

    __slots__ = ("item", "queued", "room")

    def __init__(self, item: object) -> None:
        self.item = item
        self.queued = False
        self.room = new_event()


class Mailbox:
    """An actor's bounded mailbox: any number of senders, one reader (the actor's task).

    It speaks as anyio's memory object streams do (``send_nowait`` raises ``WouldBlock`` when full,
    a closed mailbox refuses with ``ClosedResourceError`` and, once empty, ends with
    ``EndOfStream``), at less cost per message: a queued message is taken without a turn of the
    loop, and the reader waits on a bare future on asyncio (elsewhere on an event made without a
    backend lookup). A message stays queued until the reader takes it, so a cancelled ``receive``
    loses nothing.
    """

    __slots__ = ("_closed", "_items", "_reader", "_senders", "_size")

    def __init__(self, size: int) -> None:
        self._items: deque[object] = deque()
        self._size = size
        self._closed = False
        self._reader: asyncio.Future[None] | anyio.Event | None = None
        self._senders: deque[_Sender] = deque()

    def send_nowait(self, item: object) -> None:
        if self._closed:
            raise ClosedResourceError
        if len(self._items) >= self._size:
            raise WouldBlock
        self._items.append(item)
        reader = self._reader
        if reader is not None:
            self._reader = None
            _wake(reader)

    async def send(self, item: object) -> None:
        """Queue ``item``, waiting while the mailbox is full (``ClosedResourceError`` once closed).
        A waiting sender's message is queued as room frees, in the order the senders came."""
        try:
            self.send_nowait(item)
            return
        except WouldBlock:
            pass
        waiting = _Sender(item)
        self._senders.append(waiting)
        try:
            await waiting.room.wait()
        finally:
            if not waiting.room.is_set():
                self._senders.remove(waiting)
        if not waiting.queued:
            raise ClosedResourceError

    def ready(self) -> bool:
        """Whether a message is queued (``receive`` then returns it at once)."""
        return bool(self._items)

    def idle(self) -> bool:
        """Whether no message is queued and no sender waits for room."""
        return not self._items and not self._senders

    def take(self) -> object:
        """The next queued message, or :data:`NOTHING` (:meth:`receive_nowait` without raising)."""
        if not self._items:
            return NOTHING
        item = self._items.popleft()
        if self._senders:  # the room goes to the first sender waiting for it
            waiting = self._senders.popleft()
            self._items.append(waiting.item)
            waiting.queued = True
            waiting.room.set()
        return item

    def receive_nowait(self) -> object:
        if self._items:
            return self.take()
        if self._closed:
            raise EndOfStream
        raise WouldBlock

    async def receive(self) -> object:
        """The next message, waiting for one (``EndOfStream`` once closed and empty)."""
        while True:
            if self._items:
                return self.take()
            if self._closed:
                raise EndOfStream
            # On asyncio a bare future, the cheapest wait there is; elsewhere an anyio event.
            loop = running_asyncio_loop()
            reader = self._reader = new_event() if loop is None else loop.create_future()
            try:
                await (reader if isinstance(reader, asyncio.Future) else reader.wait())
            finally:
                if self._reader is reader:
                    self._reader = None

    def close(self) -> None:
        """Refuse new messages; senders waiting for room and the reader wake to the refusal."""
        self._closed = True
        while self._senders:
            self._senders.popleft().room.set()
        reader, self._reader = self._reader, None
        if reader is not None:
            _wake(reader)

    def statistics(self) -> MailboxStatistics:
        return MailboxStatistics(len(self._items), self._size, len(self._senders))
