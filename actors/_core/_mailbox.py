"""The runtime's own vocabulary: why an actor incarnation ended, the mailbox wake-up token, and
:class:`Failable`, the mailbox items whose sender waits for an answer.

User messages are ``msgspec.Struct`` tagged unions (``class Ping(msgspec.Struct, tag="ping",
frozen=True)``) that an actor handles with ``match``. The runtime's control requests (stop, restart,
escalate, passivate) never travel through the bounded mailbox: they are flags on the actor's cell
plus, at most, one :data:`WAKE_TOKEN`, so a full mailbox cannot hold them back.
"""

from __future__ import annotations

import enum
from typing import Final

__all__ = ["WAKE_TOKEN", "ExitReason", "Failable"]


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


class _Wake:
    """A token that wakes an actor waiting on its mailbox so it reads its control flags."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "WAKE"


WAKE_TOKEN: Final = _Wake()
