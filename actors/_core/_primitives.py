"""anyio's cancel scopes and events, and the running loop's clock, without a backend lookup per call.

``anyio.CancelScope()``, ``anyio.Event()`` and ``anyio.current_time()`` each ask sniffio which
library runs the loop (about six Python calls), and a run opens several scopes and reads the clock
several times. Here one ``asyncio.get_running_loop()`` answers: on asyncio the loop's own clock and
anyio's classes for asyncio (each looked up once, on its first use); on any other loop (trio)
anyio's own calls. The scopes and events are anyio's, so they behave exactly as anyio's do.
"""

from __future__ import annotations

import asyncio
import math
import types
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, TypeVar

import anyio

__all__ = [
    "LoopTasks",
    "cancel_scope",
    "loop_time",
    "new_event",
    "running_asyncio_loop",
    "shielded",
    "suspending",
    "within",
]

T = TypeVar("T")

#: anyio's cancel scope and event classes on asyncio (``None``: none was made on asyncio yet).
_asyncio_scope: type[anyio.CancelScope] | None = None
_asyncio_event: type[anyio.Event] | None = None


def running_asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio loop, or ``None`` under another backend (trio)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def loop_time() -> float:
    """``anyio.current_time()``, also in a plain event-loop callback (a store's notice of a lost
    lock arrives in one), where anyio cannot tell which backend runs it."""
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:
        import trio  # no asyncio loop runs here, so anyio runs on trio

        return trio.current_time()


def cancel_scope(*, deadline: float = math.inf, shield: bool = False) -> anyio.CancelScope:
    """``anyio.CancelScope(deadline=deadline, shield=shield)``."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return anyio.CancelScope(deadline=deadline, shield=shield)
    return (_asyncio_scope or _asyncio_scope_class())(deadline=deadline, shield=shield)


def shielded(seconds: float) -> anyio.CancelScope:
    """A shielded scope cancelled ``seconds`` from now: for clean-up that a cancel must not cut
    short and that must not hang (one scope, where a shield around a ``move_on_after`` is two)."""
    try:
        now = asyncio.get_running_loop().time()
    except RuntimeError:
        return anyio.CancelScope(deadline=anyio.current_time() + seconds, shield=True)
    return (_asyncio_scope or _asyncio_scope_class())(deadline=now + seconds, shield=True)


def new_event() -> anyio.Event:
    """``anyio.Event()``."""
    global _asyncio_event
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return anyio.Event()
    if _asyncio_event is None:
        _asyncio_event = type(anyio.Event())
    return _asyncio_event()


def _asyncio_scope_class() -> type[anyio.CancelScope]:
    """anyio's cancel scope class on asyncio, looked up once (call on an asyncio loop)."""
    global _asyncio_scope
    if _asyncio_scope is None:
        _asyncio_scope = type(anyio.CancelScope())
    return _asyncio_scope


async def suspending(awaitable: Awaitable[T], on_suspend: Callable[[], object]) -> T:
    """``await awaitable``, calling ``on_suspend()`` as it first suspends (before the loop runs
    anything else): what only a waiting operation needs (a deadline's timer, a watch) is armed only
    for one, and an operation that completes without suspending arms nothing.

    Enter any cancel scope it runs in before calling this (so the scopes it opens nest inside)."""
    if type(awaitable) is not types.CoroutineType:
        on_suspend()
        return await awaitable
    coro: Coroutine[Any, Any, T] = awaitable
    try:
        step = coro.send(None)
    except StopIteration as done:
        value: T = done.value
        return value
    on_suspend()
    return await _driven(coro, step)


async def within(scope: anyio.CancelScope, deadline: float, awaitable: Awaitable[T]) -> T:
    """``await awaitable`` in the entered ``scope``, whose ``deadline`` is set as the awaitable first
    suspends: a deadline fires only while it waits, so the bound is the same, and one that completes
    without suspending arms no timer."""
    return await suspending(awaitable, lambda: _set_deadline(scope, deadline))


def _set_deadline(scope: anyio.CancelScope, deadline: float) -> None:
    scope.deadline = deadline


@types.coroutine
def _driven(coro: Coroutine[Any, Any, T], step: Any) -> Generator[Any, Any, T]:
    """Drive ``coro`` on from its first suspension (``step``, what it yielded to the loop): what
    ``await`` does, every value and exception the loop sends passed on."""
    while True:
        try:
            sent = yield step
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as error:
            try:
                step = coro.throw(error)
            except StopIteration as done:
                value: T = done.value
                return value
        else:
            try:
                step = coro.send(sent)
            except StopIteration as done:
                value = done.value
                return value


class LoopTasks:
    """Tasks on asyncio as plain tasks of the loop, where an anyio task group costs several times as
    much per task (its task handle, wrapper coroutine and done callback, and a turn of the loop).

    Each task runs in a cancel scope of its own, made when it is started: :meth:`cancel` cancels
    the scopes, so a task cut before it ran still starts and meets the cut at its first checkpoint
    (its own ``finally`` runs), and shielded clean-up holds, as in a task group (a native
    ``Task.cancel()`` would cut through anyio's shields). A task leaves :attr:`live` itself as it
    ends: no done callback. An exception a task lets out goes to ``failed`` (default: logged by
    asyncio as never retrieved).
    """

    __slots__ = ("_failed", "_loop", "live")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, failed: Callable[[Exception], object] | None = None
    ) -> None:
        self._loop = loop
        self._failed = failed
        #: The tasks started and not yet ended, each with its cancel scope.
        self.live: dict[asyncio.Task[None], anyio.CancelScope] = {}
        # Looked up here, in a task: :meth:`start` may then be called from a plain callback of the
        # loop, where anyio cannot tell the backend to make the first scope.
        _asyncio_scope_class()

    def start(self, coro: Coroutine[Any, Any, object]) -> None:
        scope = (_asyncio_scope or _asyncio_scope_class())()
        self.live[self._loop.create_task(self._scoped(scope, coro))] = scope

    async def _scoped(self, scope: anyio.CancelScope, coro: Coroutine[Any, Any, object]) -> None:
        try:
            with scope:
                await coro
        except Exception as error:
            if self._failed is None:
                raise
            self._failed(error)
        finally:
            task = asyncio.current_task()
            if task is not None:
                self.live.pop(task, None)

    def cancel(self) -> bool:
        """Cancel the tasks still running (their scopes); whether there were any."""
        for scope in self.live.values():
            scope.cancel()
        return bool(self.live)

    async def wait(self) -> None:
        """Until every task has ended (as long as they take: call it after :meth:`cancel`, whose
        cut leaves only bounded clean-up, or where the tasks end of themselves)."""
        while running := [task for task in self.live if not task.done()]:
            await asyncio.wait(running)
