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

import asyncio
import functools
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Final, TypeVar

import anyio

from stores import RUN_END, Checkpoint, Store, StoreError

from .._core import cancel_scope, loop_time, running_asyncio_loop, suspending, tether_logger
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

    __slots__ = ("looking", "row", "scope", "since", "stopped", "store", "timer")

    def __init__(
        self, store: Store, row: Checkpoint, stopped: RunStop, scope: anyio.CancelScope, since: float
    ) -> None:
        self.store = store
        self.row = row
        self.stopped = stopped
        self.scope = scope
        #: When it began (``anyio.current_time()``).
        self.since = since
        #: The loop's timer that starts its watch, armed as the call first waits (asyncio; ``None``:
        #: in the table, or not armed: a call that never waits is never watched).
        self.timer: asyncio.TimerHandle | None = None
        #: The scope of the task watching the run's rows (``None``: not watched yet).
        self.looking: anyio.CancelScope | None = None


class ToolWatch:
    """The tool calls of one system, watched for a cancel from another process once they have run
    for :data:`CANCEL_WATCH` seconds. ``start`` runs a task in the system (``False``: it is not
    open, and calls then run unwatched).

    On asyncio a call arms one of the loop's timers (no task); on another backend it registers in a
    table that one task of the system looks at while calls run (it ends when none does)."""

    def __init__(self, start: Callable[[Callable[[], Coroutine[Any, Any, None]]], bool]) -> None:
        self._start = start
        self._calls: dict[_Call, None] = {}
        self._running = False
        #: The asyncio loop the calls run on; ``None`` on another backend; ``False``: not known yet.
        self._loop: asyncio.AbstractEventLoop | bool | None = False

    async def run(
        self, store: Store, row: Checkpoint, stopped: RunStop, invoke: Callable[[], Awaitable[T]]
    ) -> T:
        """``invoke()`` (the tool call whose row is ``row``), cancelled when another process cancels
        the run meanwhile: then ``RunCancelled`` (see :func:`~._runlog.cancelled_elsewhere`), whatever
        the call raised or returned."""
        with cancel_scope() as scope:
            call = _Call(store, row, stopped, scope, loop_time())
            try:
                # Watched from the call's start, armed as it first waits: a call that completes
                # without waiting cannot be cancelled meanwhile, so it arms no timer.
                outcome = await suspending(invoke(), functools.partial(self._arm, call))
            except anyio.get_cancelled_exc_class():
                raise
            except BaseException:
                if not stopped.is_set():
                    raise
            finally:
                if call.timer is not None:
                    call.timer.cancel()
                elif call in self._calls:
                    del self._calls[call]
                if call.looking is not None:
                    call.looking.cancel()
        if stopped.is_set():
            raise cancelled_elsewhere(row.execution_id)
        return outcome

    def _arm(self, call: _Call) -> None:
        """Have ``call`` watched once it has run for :data:`CANCEL_WATCH` seconds: the asyncio
        loop's timer, or the table's task."""
        loop = self._loop
        if loop is False:
            loop = self._loop = running_asyncio_loop()
        if isinstance(loop, asyncio.AbstractEventLoop):
            call.timer = loop.call_at(call.since + CANCEL_WATCH, self._watched, call)
            return
        self._calls[call] = None
        if not self._running:
            self._running = self._start(self._delay)

    def _watched(self, call: _Call) -> None:
        """``call`` has run for :data:`CANCEL_WATCH` seconds: a task watches its run's rows.

        On asyncio this runs as a callback of the loop's timer, where ``anyio.CancelScope()`` cannot
        tell the backend unless the loop was started by anyio: :func:`cancel_scope` asks the loop."""
        call.looking = cancel_scope()
        self._start(functools.partial(self._look, call))

    async def _delay(self) -> None:
        """The table's task (not on asyncio): every call still running after :data:`CANCEL_WATCH`
        seconds gets a task watching its run's rows. It looks at most once per
        :data:`CANCEL_WATCH` seconds, and ends once no call runs."""
        try:
            while self._calls:
                now = anyio.current_time()
                soonest = now + CANCEL_WATCH
                for call in list(self._calls):
                    if call.looking is not None:
                        continue
                    if now - call.since < CANCEL_WATCH:
                        soonest = min(soonest, call.since + CANCEL_WATCH)
                        continue
                    self._watched(call)
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
