""":class:`LazyEvent`: an event that builds its ``anyio.Event`` only when a task waits on it unset.

Most events of a run are set and never awaited (an actor's start, a reply's first row, a registry
entry's activation): a flag costs one attribute where an ``anyio.Event`` costs a backend lookup to
build and one more call to set or read. Waiting behaves as on an ``anyio.Event``: a wait on a set
event is still a checkpoint, and a cancelled waiter leaves the event as it was.
"""

from __future__ import annotations

import anyio.lowlevel

from ._primitives import new_event

__all__ = ["LazyEvent"]


class LazyEvent:
    """``set``, ``is_set`` and ``wait`` of an ``anyio.Event``, which it builds on the first wait
    that finds it unset."""

    __slots__ = ("_event", "_set")

    def __init__(self) -> None:
        self._set = False
        self._event: anyio.Event | None = None

    def set(self) -> None:
        """Set the event and wake every task waiting on it (no effect once set)."""
        self._set = True
        event = self._event
        if event is not None:
            event.set()

    def is_set(self) -> bool:
        return self._set

    async def wait(self) -> None:
        """Wait until the event is set (a checkpoint even if it is set already)."""
        if self._set:
            await anyio.lowlevel.checkpoint()
            return
        event = self._event
        if event is None:
            event = self._event = new_event()
        await event.wait()
