"""Watching a run for new rows written by any process: :class:`RowWatch`.

A reader that follows a run (``RunRef.events()`` for a run owned elsewhere) reads the rows after
the last one it saw, then waits on its watch and reads again. The wait is always bounded: it
returns when the store heard that the run got a row (PostgreSQL: ``LISTEN``/``NOTIFY``, see
``stores.postgres._notices``) or after the poll interval (SQLite, or PostgreSQL while its
listening connection is down). A notice that arrives while the reader is busy reading is kept, so
the next wait returns at once: no row is missed between a read and the following wait.

A watch on the store's resting runs (``Store.watch_waits``) is a :class:`RowWatch` under the key
:data:`WAITS`: its waits end when a signal made a waiting run due, in any process (PostgreSQL: the
signal's ``NOTIFY``), or after the poll interval (SQLite), and its reader then reads the store's
index of waits: one watch per process, however many runs rest.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

import anyio

__all__ = ["POLL_INTERVAL", "WAITS", "RowWatch"]

#: How long a watch waits at most before the reader reads again (SQLite polls at this pace).
POLL_INTERVAL: Final = 0.2
#: The key of a watch on the store's resting runs: no run's id is empty.
WAITS: Final = ""


class RowWatch:
    """Wakes one reader of the run ``execution_id`` when a row may have been written.

    ``poll`` bounds every wait; ``ensure`` (optional) is awaited before each wait, so a backend can
    re-open a lost listening connection; ``on_close`` unregisters the watch.
    """

    __slots__ = ("__weakref__", "_ensure", "_noticed", "_on_close", "_poll", "_waiter", "execution_id")

    def __init__(
        self,
        execution_id: str,
        *,
        poll: float = POLL_INTERVAL,
        ensure: Callable[[], Awaitable[None]] | None = None,
        on_close: Callable[[RowWatch], None] | None = None,
    ) -> None:
        self.execution_id = execution_id
        self._poll = poll
        self._ensure = ensure
        self._on_close = on_close
        self._noticed = False
        self._waiter: anyio.Event | None = None

    def notice(self) -> None:
        """The store heard of a new row of the run (called on the event loop's thread)."""
        self._noticed = True
        if self._waiter is not None:
            self._waiter.set()

    async def wait(self, timeout: float) -> bool:
        """Wait at most ``min(timeout, poll)`` seconds; ``True`` when a notice came (since the last
        wait returned), ``False`` when the time ran out (the caller reads again in either case)."""
        if self._ensure is not None:
            await self._ensure()
        if not self._noticed:
            self._waiter = anyio.Event()
            try:
                with anyio.move_on_after(min(timeout, self._poll)):
                    await self._waiter.wait()
            finally:
                self._waiter = None
        noticed, self._noticed = self._noticed, False
        return noticed

    def close(self) -> None:
        """Stop watching (idempotent)."""
        on_close, self._on_close = self._on_close, None
        if on_close is not None:
            on_close(self)
