"""The replicator's protocol: the messages its mailbox takes and its timer child's, one tagged union."""

import msgspec

__all__ = ["Arm", "Drain", "Drained", "Kick", "ReplicatorMessage", "Tick"]


class Kick(msgspec.Struct, frozen=True, tag="kick"):
    """A commit happened: drain (unless the plane is being waited out; the timer retries then)."""


class Tick(msgspec.Struct, frozen=True, tag="tick"):
    """The retry timer fired: drain whatever the last attempt left buffered."""


class Drain(msgspec.Struct, frozen=True, tag="drain"):
    """Drain now, whatever the retry state (asked by :meth:`Replicator.drain`)."""


class Arm(msgspec.Struct, frozen=True, tag="arm"):
    """To the timer child: send a :class:`Tick` after ``delay`` seconds."""

    delay: float


class Drained(msgspec.Struct, kw_only=True):
    """What one drain did: rows sent (accepted), rows quarantined, cache entries sent, POSTs made,
    whether rows stayed buffered because the plane could not take them now, and inbox entries
    sent (each state: sent, consumed) and quarantined."""

    sent: int = 0
    quarantined: int = 0
    cached: int = 0
    posts: int = 0
    buffered: bool = False
    signals: int = 0
    signals_quarantined: int = 0


ReplicatorMessage = Kick | Tick | Drain
