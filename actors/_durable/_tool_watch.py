"""Tool calls stopped by a cancel from another process: :class:`ToolWatch`, one per system.

A run's owner hears of a cancel written by another process (a ``run_end`` newer than the tool's
row) while a tool runs. Most tools are done in milliseconds, so a call costs no task and no read:
it registers in this process's table and runs inside its own cancel scope. One task of the system
(started by the first call) looks at the table every :data:`CANCEL_WATCH` seconds at most; a call
still running after that long gets a task that watches the run's rows (the store's notices on
PostgreSQL, its poll on SQLite). When it sees the cancel it sets the call's :class:`~._context.RunStop`
(no ``@idempotent`` body starts from then on, a sync tool's thread is abandoned) and cancels the
call, and the run stops without writing.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Final, TypeVar

import anyio

from stores import RUN_END, Checkpoint, Store, StoreError

from .._core import tether_logger
from ._context import RunStop
from ._runlog import cancelled_elsewhere

__all__ = ["CANCEL_WATCH", "ToolWatch"]

T = TypeVar("T")

_log = tether_logger()
#: How long a tool call runs before its run's rows are watched, and the longest wait between two
#: looks at them (seconds; a notice wakes a look at once on PostgreSQL).
CANCEL_WATCH: Final = 0.5


class _Call:
    """One tool call in flight: its run's store and row, its stop, its scope and when it began."""

    __slots__ = ("looking", "row", "scope", "since", "stopped", "store")

    def __init__(self, store: Store, row: Checkpoint, stopped: RunStop, scope: anyio.CancelScope) -> None:
        self.store = store
        self.row = row
        self.stopped = stopped
        self.scope = scope
        self.since = anyio.current_time()
        #: The scope of the task watching the run's rows (``None``: not watched yet).
        self.looking: anyio.CancelScope | None = None


class ToolWatch:
    """The tool calls of one system, watched for a cancel from another process once they have run
    for :data:`CANCEL_WATCH` seconds. ``start`` runs a task in the system (``False``: it is not
    open, and calls then run unwatched)."""

    def __init__(self, start: Callable[[Callable[[], Coroutine[Any, Any, None]]], bool]) -> None:
        self._start = start
        self._calls: dict[_Call, None] = {}
        self._running = False
        self._busy: anyio.Event | None = None  # set when the first call of an empty table comes

    async def run(
        self, store: Store, row: Checkpoint, stopped: RunStop, invoke: Callable[[], Awaitable[T]]
    ) -> T:
        """``invoke()`` (the tool call whose row is ``row``), cancelled when another process cancels
        the run meanwhile: then ``RunCancelled`` (see :func:`~._runlog.cancelled_elsewhere`), whatever
        the call raised or returned."""
        with anyio.CancelScope() as scope:
            call = _Call(store, row, stopped, scope)
            if not self._calls:
                self._wake()
            self._calls[call] = None
            try:
                outcome = await invoke()
            except anyio.get_cancelled_exc_class():
                raise
            except BaseException:
                if not stopped.is_set():
                    raise
            finally:
                del self._calls[call]
                if call.looking is not None:
                    call.looking.cancel()
        if stopped.is_set():
            raise cancelled_elsewhere(row.execution_id)
        return outcome

    def _wake(self) -> None:
        """A call came to an empty table: start the task, or wake it."""
        if not self._running:
            self._running = self._start(self._delay)
        elif self._busy is not None:
            self._busy.set()

    async def _delay(self) -> None:
        """The system's task: every call still running after :data:`CANCEL_WATCH` seconds gets a
        task watching its run's rows. It wakes at most once per :data:`CANCEL_WATCH` seconds while
        calls come and go, and sleeps while none runs."""
        try:
            while True:
                if not self._calls:
                    busy = self._busy = anyio.Event()
                    await busy.wait()  # until a call comes (the task lives as long as the system)
                    self._busy = None
                now = anyio.current_time()
                soonest = now + CANCEL_WATCH
                for call in list(self._calls):
                    if call.looking is not None:
                        continue
                    if now - call.since < CANCEL_WATCH:
                        soonest = min(soonest, call.since + CANCEL_WATCH)
                        continue
                    call.looking = anyio.CancelScope()
                    if not self._start(functools.partial(self._look, call)):
                        return  # the system is closing
                await anyio.sleep(soonest - now)
        finally:
            self._running = False

    async def _look(self, call: _Call) -> None:
        """Watch ``call``'s run until a cancel written after its row shows: stop and cancel it."""
        assert call.looking is not None
        with call.looking:
            try:
                await _until_cancelled(call.store, call.row)
            except Exception as exc:  # not the call's to fail for: it runs on, unwatched
                _log.warning(
                    "tool watch failed",
                    execution_id=call.row.execution_id,
                    node_id=call.row.node_id,
                    error=repr(exc),
                )
                return
            call.stopped.set()
            call.scope.cancel()


async def _until_cancelled(store: Store, row: Checkpoint) -> None:
    """Return once the run has a ``run_end`` newer than ``row`` (a cancel from another process)."""
    watch = store.watch(row.execution_id)
    try:
        while True:
            try:
                newest = await store.latest(row.execution_id)
            except StoreError:  # an outage: the tool's own writes ride it out; look again later
                await anyio.sleep(CANCEL_WATCH)
                continue
            if newest is not None and newest.seq > row.seq and newest.step_type == RUN_END:
                return
            await watch.wait(CANCEL_WATCH)
    finally:
        watch.close()
