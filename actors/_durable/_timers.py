"""The durable timers of one process: its resting runs woken, by the system still open, at their
time or when another process signals them.

A run that rests (``wait_signal``, ``sleep``) costs no task: this process keeps only the earliest
time it was told of, and one task (started on the first rest) that waits on the store's watch on
waits (``Store.watch_waits``: a signal's ``NOTIFY`` on PostgreSQL, the poll on SQLite) until that
time, then wakes the due runs it has the runner for (read from the store's index of waits, as a
worker's sweep does) and asks the store for the next time. So the memory does not grow with the
number of resting runs, and a run killed while it rests is woken by the next process that serves
(``serve``, ``tether worker``), late but exactly once: a wake is one activation of the run,
refused to any other, and the tool's ``signal`` or ``wake`` row is written once.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Coroutine
from datetime import datetime, timedelta
from typing import Any, Final

import anyio

from stores import RowWatch, Store, StoreError, utcnow

from .._core import tether_logger

__all__ = ["Timers"]

_log = tether_logger()
#: How long the timer waits before it looks again at a store that failed, or at a due wake it
#: could not drive (another process's runner, or one being woken): seconds, doubled while a look
#: drives nothing, up to :data:`_LONGEST_RETRY`.
_RETRY: Final = 1.0
_LONGEST_RETRY: Final = 30.0
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
        #: A poll does not look at due runs before this (``anyio.current_time()``): those it saw
        #: last were not this process's to drive.
        self._quiet_until = 0.0
        self._retry = _RETRY
        self._sleep: anyio.CancelScope | None = None
        self._running = False

    def arm(self, when: datetime | None) -> None:
        """A run of this process rests, until ``when`` if it has a time: be awake then, and hear
        the signals any process sends to the store's resting runs meanwhile."""
        if when is not None and (self._next is None or when < self._next):
            self._next = when
            if self._sleep is not None:
                self._sleep.cancel()  # wait again, until the earlier time
        if not self._running:
            self._running = self._start(self._run)

    async def _run(self) -> None:
        watch: RowWatch | None = None
        try:
            while True:
                try:
                    store = await self._store()
                    if watch is None:
                        watch = store.watch_waits()
                    heard = await self._wait(watch)
                    if heard is None:  # armed for an earlier time meanwhile
                        continue
                    if heard or (self._next is not None and self._next <= utcnow()):
                        await self._look(store)
                    elif anyio.current_time() >= self._quiet_until:
                        await self._poll(store)
                except StoreError as error:
                    _log.warning("timers: store unusable, looking again", error=repr(error))
                    await anyio.sleep(_RETRY)
                    self._next = utcnow()
        finally:
            if watch is not None:
                watch.close()
            self._running = False

    async def _wait(self, watch: RowWatch) -> bool | None:
        """Wait on the store's watch until the next time: whether a signal was heard (``False``:
        the time came, or the watch's poll), ``None`` when :meth:`arm` set an earlier time."""
        timeout = math.inf if self._next is None else max(0.0, (self._next - utcnow()).total_seconds())
        with anyio.CancelScope() as scope:
            self._sleep = scope
            try:
                return await watch.wait(timeout)
            finally:
                self._sleep = None
        return None

    async def _poll(self, store: Store) -> None:
        """The watch's poll (SQLite hears no signal of another process; PostgreSQL's safety net):
        one read of the index's first entry, and a look when a run is due by it."""
        found = await store.next_wake()
        if found is not None and found <= utcnow():
            await self._look(store)
        elif found is not None and (self._next is None or found < self._next):
            self._next = found

    async def _look(self, store: Store) -> None:
        """Wake what is due, then set the next time from the store's index."""
        self._next = None
        began = utcnow()
        woken = await self._wake_due(store, _BATCH)
        found = await store.next_wake()
        now = utcnow()
        if found is not None and found <= now:  # due, yet not ours (or being woken): later
            self._retry = _RETRY if woken else min(2 * self._retry, _LONGEST_RETRY)
            self._quiet_until = anyio.current_time() + self._retry
            found = now + timedelta(seconds=self._retry)
            # A run due after this look began (it may be due by now) is not held back.
            later = await store.next_wake(after=began)
            if later is not None and later < found:
                found = later
        else:
            self._retry = _RETRY
        if found is not None and (self._next is None or found < self._next):
            self._next = found
