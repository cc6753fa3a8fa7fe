"""The caller's event loop as a store's threads need it, on asyncio and on trio alike.

A SQLite database thread answers its caller by scheduling a callback on the caller's loop, and the
group commit chains its batches with callbacks on that loop (see :mod:`stores.sqlite._writer`); the
PostgreSQL bridge hands asyncpg's outcomes back the same way (:mod:`stores.postgres._bridge`). What
they need of the loop is small: :class:`Loop` (``create_future``, ``call_soon``,
``call_soon_threadsafe``). On asyncio that is the running loop itself, so the write path pays for
no wrapper (the loop is also anyio's own token there: ``anyio.lowlevel.current_token()``). Under
trio :func:`running_loop` gives a :class:`TrioLoop` (one per run), built on anyio's event-loop
token, whose futures are anyio-neutral :class:`Pending` ones.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from typing import Any, Generic, Protocol, TypeVar

import anyio
import anyio.lowlevel

from ._log import LOGGER

__all__ = ["Loop", "Pending", "Settled", "TrioLoop", "running_loop", "settled", "trio_loop"]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Settled(Protocol[T_co]):
    """A future the database thread answers: an ``asyncio.Future`` or a :class:`Pending`."""

    def done(self) -> bool: ...

    def set_result(self, value: Any, /) -> None: ...

    def set_exception(self, exc: BaseException, /) -> None: ...

    def __await__(self) -> Generator[Any, None, T_co]: ...


class Loop(Protocol):
    """What the database threads use of the caller's loop (an asyncio loop has all of it)."""

    def create_future(self) -> Settled[Any]: ...

    def call_soon(self, callback: Callable[..., object], *args: Any) -> object: ...

    def call_soon_threadsafe(self, callback: Callable[..., object], *args: Any) -> object: ...


class Pending(Generic[T]):
    """A future for any anyio backend: answered once on the loop's thread, awaited by one caller.

    A caller cancelled while it waits marks it done, so a late answer is dropped (as an
    ``asyncio.Future`` cancelled with its waiter); the operation itself stands or falls all the same.
    """

    __slots__ = ("_done", "_event", "_exc", "_value")

    def __init__(self) -> None:
        self._event = anyio.Event()
        self._done = False
        self._value: Any = None
        self._exc: BaseException | None = None

    def done(self) -> bool:
        return self._done

    def set_result(self, value: Any, /) -> None:
        if not self._done:
            self._done, self._value = True, value
            self._event.set()

    def set_exception(self, exc: BaseException, /) -> None:
        if not self._done:
            self._done, self._exc = True, exc
            self._event.set()

    async def wait_settled(self) -> None:
        """Wait until it is answered, without giving it up when this wait is cancelled."""
        await self._event.wait()

    async def _result(self) -> T:
        try:
            await self._event.wait()
        except BaseException:
            self._done = True  # given up: an answer arriving later is dropped
            raise
        if self._exc is not None:
            raise self._exc
        value: T = self._value
        return value

    def __await__(self) -> Generator[Any, None, T]:
        return self._result().__await__()


class TrioLoop:
    """:class:`Loop` on trio, from anyio's event-loop token.

    The threads call its ``run_sync_soon`` (thread-safe). ``call_soon`` runs the callback in a
    system task after one checkpoint, so that the tasks made ready before it run first, as with
    asyncio's ``call_soon`` (trio's own ``run_sync_soon`` would run it before them).
    """

    __slots__ = ("_checkpoint", "_later", "_run_sync_soon", "_spawn")

    def __init__(self, token: anyio.lowlevel.EventLoopToken) -> None:
        import trio  # only ever made under trio, which is then installed

        self._run_sync_soon: Callable[..., None] = token.native_token.run_sync_soon  # type: ignore[attr-defined]
        self._spawn = trio.lowlevel.spawn_system_task
        self._checkpoint = trio.lowlevel.cancel_shielded_checkpoint
        self._later: list[tuple[Callable[..., object], tuple[Any, ...]]] = []

    def create_future(self) -> Pending[Any]:
        return Pending()

    def call_soon(self, callback: Callable[..., object], *args: Any) -> None:
        """Run ``callback(*args)`` on this loop once the tasks ready now have run (on the loop)."""
        self._later.append((callback, args))
        if len(self._later) == 1:
            self._spawn(self._run_later, name="tether store callbacks")

    async def _run_later(self) -> None:
        await self._checkpoint()
        later, self._later = self._later, []
        for callback, args in later:
            _logged(callback, *args)

    def call_soon_threadsafe(self, callback: Callable[..., object], *args: Any) -> None:
        """Schedule ``callback`` from any thread; a ``RuntimeError`` once the run is over (as asyncio)."""
        self._run_sync_soon(_logged, callback, *args)


def _logged(callback: Callable[..., object], *args: Any) -> None:
    """Run a callback; a failure is logged, as asyncio's loop does (trio would end the run)."""
    try:
        callback(*args)
    except Exception:
        LOGGER.exception("a store callback failed: %r", callback)


_trio_loop: anyio.lowlevel.RunVar[TrioLoop] = anyio.lowlevel.RunVar("tether_store_loop")


def running_loop() -> Loop:
    """The running loop: asyncio's own, or this anyio run's :class:`TrioLoop`."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return trio_loop()


def trio_loop() -> TrioLoop:
    """This anyio run's :class:`TrioLoop` (made once per run)."""
    try:
        return _trio_loop.get()
    except LookupError:
        loop = TrioLoop(anyio.lowlevel.current_token())
        _trio_loop.set(loop)
        return loop


async def settled(future: Settled[Any]) -> None:
    """Wait until ``future`` is answered without cancelling it when this wait is cancelled."""
    if isinstance(future, asyncio.Future):
        await asyncio.wait({future})
    elif isinstance(future, Pending):
        await future.wait_settled()
