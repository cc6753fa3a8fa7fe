"""The durable timers of one process: resting runs woken at their time by the system still open.

A run that rests with a time (``sleep``, ``wait_signal(timeout=...)``) costs no task: this process
keeps only the earliest time it was told of, and one task (started on the first such rest) that
sleeps until then, wakes the due runs it has the runner for (read from the store's index of
waits, as a worker's sweep does) and asks the store for the next time. So the memory does not grow
with the number of resting runs, and a run killed while asleep is woken by the next process that
serves (``serve``, ``tether worker``), late but exactly once: a wake is one activation of the run,
refused to any other, and the tool's ``wake`` row is written once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from datetime import datetime, timedelta
from typing import Any, Final

import anyio

from stores import Store, StoreError, utcnow

from .._core import tether_logger

__all__ = ["Timers"]

_log = tether_logger()
#: How long the timer waits before it looks again at a store that failed, or at a due wake it
#: could not drive (another process's runner): seconds.
_RETRY: Final = 1.0
#: How many due runs one look wakes.
_BATCH: Final = 100


class Timers:
    """The timer task of a process. ``start`` runs a task in the system's runtime; ``wake_due``
    wakes the due runs this process can drive and returns how many."""

    def __init__(
        self,
        store: Callable[[], Awaitable[Store]],
        start: Callable[[Callable[[], Coroutine[Any, Any, None]]], bool],
        wake_due: Callable[[Store, int], Awaitable[int]],
    ) -> None:
        self._store = store
        self._start = start
        self._wake_due = wake_due
        self._next: datetime | None = None
        self._changed: anyio.Event | None = None
        self._running = False

    def arm(self, when: datetime) -> None:
        """A run of this process rests until ``when``: be awake then."""
        if self._next is not None and self._next <= when:
            return
        self._next = when
        if not self._running:
            self._running = self._start(self._run)
        elif self._changed is not None:
            self._changed.set()

    async def _run(self) -> None:
        try:
            while True:
                if self._next is None:
                    self._changed = anyio.Event()
                    await self._changed.wait()
                    continue
                delay = (self._next - utcnow()).total_seconds()
                if delay > 0:
                    self._changed = anyio.Event()
                    with anyio.move_on_after(delay):
                        await self._changed.wait()
                    continue
                self._next = None
                await self._look()
        finally:
            self._running = False

    async def _look(self) -> None:
        """Wake what is due, then set the next time from the store's index."""
        try:
            store = await self._store()
            await self._wake_due(store, _BATCH)
            found = await store.next_wake()
        except StoreError as error:
            _log.warning("timers: store unusable, looking again", error=repr(error))
            found = utcnow()
        if found is None:
            return
        soonest = utcnow() + timedelta(seconds=_RETRY)  # due, yet not ours (or being woken): later
        when = max(found, soonest) if found <= utcnow() else found
        if self._next is None or when < self._next:
            self._next = when
