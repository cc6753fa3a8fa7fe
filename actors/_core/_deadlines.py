"""One timer task for all ask timeouts, so an ask costs no cancel scope of its own.

A ``move_on_after`` per ask (a cancel scope plus a loop timer) costs about as much as the rest of the
round trip. Instead, asks that got into the mailbox at once register their deadline here; a single
task sleeps until the earliest one and fails the expired asks with :class:`AskTimeout`. Deadlines are
kept in a heap with lazy deletion, compacted when answered asks dominate it.
"""

from __future__ import annotations

import heapq
import itertools
import math
from typing import TYPE_CHECKING

import anyio

from ._errors import AskTimeout

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from ._ref import Ask

__all__ = ["AskDeadlines"]


class AskDeadlines:
    """Fails asks whose deadline passed; started lazily in the runtime's task group."""

    __slots__ = ("_heap", "_order", "_scope", "_target", "_tg", "_wake")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Ask, float]] = []
        self._order = itertools.count()
        self._tg: TaskGroup | None = None
        self._scope: anyio.CancelScope | None = None
        self._wake: anyio.Event | None = None
        self._target = math.inf

    def attach(self, tg: TaskGroup) -> None:
        self._tg = tg

    def close(self) -> None:
        """Stop the timer task (pending asks then end with their actors: ActorStopped)."""
        if self._scope is not None:
            self._scope.cancel()
        self._tg = None

    def watch(self, request: Ask, timeout: float) -> bool:
        """Register ``request``'s deadline; False if no timer can run (the caller bounds it itself)."""
        if self._tg is None:
            return False
        deadline = anyio.current_time() + timeout
        heap = self._heap
        heapq.heappush(heap, (deadline, next(self._order), request, timeout))
        if len(heap) > 4096 and len(heap) % 4096 == 0:
            self._compact()
        if self._scope is None:
            self._scope = anyio.CancelScope()
            self._tg.start_soon(self._run, self._scope)
        elif deadline < self._target and self._wake is not None:
            self._wake.set()
        return True

    def _compact(self) -> None:
        live = [entry for entry in self._heap if not entry[2].done]
        if len(live) < len(self._heap) // 2:
            heapq.heapify(live)
            self._heap = live

    async def _run(self, scope: anyio.CancelScope) -> None:
        heap = self._heap
        with scope:
            while True:
                heap = self._heap
                now = anyio.current_time()
                while heap and heap[0][0] <= now:
                    _, _, request, timeout = heapq.heappop(heap)
                    if not request.done:
                        request.abandoned = True
                        request.fail(AskTimeout(f"no answer within {timeout}s"))
                self._target = heap[0][0] if heap else math.inf
                self._wake = anyio.Event()
                # Bounded by the earliest deadline; an earlier new one sets the event.
                with anyio.move_on_after(self._target - now):
                    await self._wake.wait()
