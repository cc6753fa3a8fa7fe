"""Waits inside a tool: :func:`wait_signal`, :func:`sleep` and :func:`sleep_until`.

A wait either returns at once (what it waits for is there) or rests the run: it raises
:class:`WaitSignal`, the run writes its ``wait`` row (no pending row) and stops, holding no task and
no memory; a wake (the signal came, the time passed) runs the tool again from the top. So every
wait of a step is numbered (its ``k``-th wait of that name in the step), and a re-run gets back, in
order, what its earlier passes got, from the step's ``signal`` and ``wake`` rows, as ``@idempotent``
returns earlier results: only a wait past those consumes a new signal or rests. A ``signal`` row
consumes its signal in its own transaction (exactly once, whoever races it).

:class:`WaitSignal` derives from ``BaseException``, like the pause's signal: a tool's ``except
Exception`` lets it through.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from stores import (
    CONSUMES,
    SIGNAL,
    WAIT,
    WAIT_DEADLINE,
    WAIT_K,
    WAIT_NAME,
    WAIT_STEP,
    WAKE,
    Checkpoint,
    Store,
    utcnow,
)

from ._context import current_context
from ._messages import Signal
from ._runlog import RunLog, step_seq

__all__ = ["RestedSignal", "StepWaits", "WaitSignal", "is_due", "sleep", "sleep_until", "wait_signal"]

#: ``node_input`` keys of a ``signal``/``wake`` row: the wait's kind (a signal's name, or ``None``
#: for a sleep) and number in its step, and what it got.
_PAYLOAD: Final = "payload"
_TIMED_OUT: Final = "timed_out"
#: The reason of a sleep's ``wait`` row; a signal's is ``signal:<name>``.
SLEEP_REASON: Final = "sleep"


class WaitSignal(BaseException):
    """Raised by a wait that must rest the run; the run catches it and writes the ``wait`` row."""

    def __init__(
        self, reason: str, context: dict[str, Any], name: str | None, wake_at: datetime | None
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.context = context
        self.name = name
        self.wake_at = wake_at

    def __str__(self) -> str:
        return f"{self.reason}: the run rests here until woken (uncaught outside a run)"


class RestedSignal(Exception):
    """Internal: the run rests at a tool's wait (its ``wait`` row is written)."""

    def __init__(self, name: str | None, wake_at: datetime | None) -> None:
        super().__init__(name or "sleep")
        self.name = name
        self.wake_at = wake_at


async def is_due(store: Store, wait: Checkpoint) -> bool:
    """Whether the ``wait`` row is due: its time passed, or its signal is in the inbox."""
    info = wait.interrupt_context
    deadline = info.get(WAIT_DEADLINE)
    if isinstance(deadline, str) and datetime.fromisoformat(deadline) <= utcnow():
        return True
    name = info.get(WAIT_NAME)
    return isinstance(name, str) and bool(await store.signals(wait.execution_id, name=name))


class StepWaits:
    """The waits of one pass of one tool step: its rows (``rows``, the step's tool row ``row``) and
    how many waits of each kind it made so far."""

    __slots__ = ("_counts", "_records", "row", "rows", "step", "store")

    def __init__(self, rows: RunLog, row: Checkpoint) -> None:
        self.rows = rows
        self.store: Store = rows.store
        self.row = row
        self.step = step_seq(row)
        self._counts: dict[str | None, int] = {}
        self._records: list[Checkpoint] | None = None

    def _next(self, name: str | None) -> int:
        k = self._counts.get(name, 0)
        self._counts[name] = k + 1
        return k

    async def _earlier(self, name: str | None, k: int) -> tuple[Checkpoint | None, datetime | None]:
        """What earlier passes of the step recorded for its ``k``-th wait of ``name``: the
        ``signal``/``wake`` row that ended it (if any), and its deadline as first rested."""
        if self._records is None:
            rows = await self.store.history(self.rows.execution_id, since=self.step)
            self._records = [r for r in rows if r.step_type in (SIGNAL, WAKE, WAIT)]
        ended: Checkpoint | None = None
        deadline: datetime | None = None
        for record in self._records:
            if record.step_type == WAIT:
                info = record.interrupt_context
                if info.get(WAIT_STEP) == self.step and info.get(WAIT_NAME) == name and info.get(WAIT_K) == k:
                    found = info.get(WAIT_DEADLINE)
                    if deadline is None and isinstance(found, str):
                        deadline = datetime.fromisoformat(found)
            elif record.node_input.get(WAIT_NAME) == name and record.node_input.get(WAIT_K) == k:
                if record.node_input.get("reentry_seq") == self.step:
                    ended = record
        return ended, deadline

    async def _record(self, step_type: str, name: str | None, k: int, got: dict[str, Any]) -> None:
        row = self.rows.inbox_row(step_type, self.row, {WAIT_NAME: name, WAIT_K: k, **got})
        await self.rows.append(row)
        if self._records is not None:
            self._records.append(row)

    async def wait_signal(self, name: str, timeout: float | None) -> Signal | None:
        k = self._next(name)
        ended, deadline = await self._earlier(name, k)
        if ended is not None:
            if ended.step_type == WAKE:
                return None
            return Signal(name, ended.node_input.get(_PAYLOAD))
        waiting = await self.store.signals(self.rows.execution_id, name=name)
        if waiting:
            found = waiting[0]
            await self._record(SIGNAL, name, k, {CONSUMES: [found.id], _PAYLOAD: found.payload})
            return Signal(name, found.payload)
        if deadline is None and timeout is not None:
            deadline = utcnow() + timedelta(seconds=timeout)
        if deadline is not None and utcnow() >= deadline:
            await self._record(WAKE, name, k, {_TIMED_OUT: True})
            return None
        raise WaitSignal(f"signal:{name}", self._context(name, k, deadline), name, deadline)

    async def sleep_until(self, when: datetime) -> None:
        k = self._next(None)
        ended, deadline = await self._earlier(None, k)
        if ended is not None:
            return
        deadline = deadline if deadline is not None else when
        if utcnow() >= deadline:
            await self._record(WAKE, None, k, {})
            return
        raise WaitSignal(SLEEP_REASON, self._context(None, k, deadline), None, deadline)

    def _context(self, name: str | None, k: int, deadline: datetime | None) -> dict[str, Any]:
        return {
            WAIT_NAME: name,
            WAIT_K: k,
            WAIT_STEP: self.step,
            WAIT_DEADLINE: None if deadline is None else deadline.isoformat(),
        }


def _waits(what: str) -> StepWaits:
    ctx = current_context()
    waits = None if ctx is None else ctx.waits
    if waits is None:
        raise RuntimeError(f"{what}() is called inside a tool of a durable run (an async tool)")
    return waits


def _seconds(value: object, what: str) -> float:
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds):
        raise TypeError(f"{what} takes a number of seconds or a timedelta, not {value!r}")
    if not 0 <= seconds < 1e9:
        raise ValueError(f"{what} must be between 0 and 1e9 seconds, not {value!r}")
    return float(seconds)


async def wait_signal(name: str, *, timeout: float | timedelta | None = None) -> Signal | None:
    """Inside a tool: the oldest unconsumed signal ``name`` of the run, consumed now (a ``signal``
    row, one transaction); when there is none, the run rests (``"waiting"``: a ``wait`` row, no
    task, no pending row) until one comes, then the tool runs again from the top and this call
    returns it. Past ``timeout`` (seconds, counted from the first time this wait rested) it returns
    ``None``. A re-run of the tool gets back what its earlier passes got, in order."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"wait_signal() takes a signal's name (a non-empty str), not {name!r}")
    seconds = None if timeout is None else _seconds(timeout, "wait_signal(timeout=...)")
    return await _waits("wait_signal").wait_signal(name, seconds)


async def sleep(seconds: float | timedelta) -> None:
    """Inside a tool: rest the run for ``seconds`` (a ``wait`` row; no task, no memory). At its
    time the run is woken, exactly once, by this process if it is still open or by any serving
    worker, and the tool runs again from the top; this call then returns at once."""
    delay = _seconds(seconds, "sleep()")
    await _waits("sleep").sleep_until(utcnow() + timedelta(seconds=delay))


async def sleep_until(when: datetime) -> None:
    """Inside a tool: :func:`sleep` until ``when`` (an aware datetime)."""
    if not isinstance(when, datetime) or when.tzinfo is None:
        raise TypeError(f"sleep_until() takes an aware datetime, not {when!r}")
    await _waits("sleep_until").sleep_until(when.astimezone(UTC))
