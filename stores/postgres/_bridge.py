"""asyncpg under trio: the store's own asyncio loop in a thread, and asyncpg's objects seen through it.

asyncpg runs only on asyncio. Under asyncio the store uses it as it is: :meth:`Bridge.open` returns
what it opened, no hop. Under any other anyio backend (trio) :meth:`Bridge.open` opens the pool or
connection on an asyncio loop the store owns in a daemon thread of its own and returns a stand-in
with the methods the store calls (:class:`BridgedPool`, :class:`BridgedConnection`): each awaited
call runs on that loop and hands its outcome back to the caller's loop through anyio's event-loop
token; the callbacks asyncpg calls (``LISTEN`` notices, a connection's termination) are handed back
the same way, so a :class:`~stores.RowWatch` is woken on the caller's loop. A caller cancelled while
it waits cancels the asyncpg call and waits (shielded, bounded) until it has ended, so a connection
is never used by two calls at once.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections.abc import Awaitable, Callable, Generator
from types import TracebackType
from typing import Any, Final, TypeVar, cast

import anyio
import asyncpg

from .._errors import bridge_closed, call_stopped
from .._loop import TrioLoop, trio_loop

__all__ = ["Bridge", "BridgedConnection", "BridgedPool", "on_asyncio"]

T = TypeVar("T")
#: How long a cancelled call may take to end on the store's loop, and how long ``close`` waits.
_SETTLE_TIMEOUT: Final = 5.0


def on_asyncio() -> bool:
    """Whether the running loop is asyncio's (asyncpg is then used directly)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class Bridge:
    """The store's asyncio loop in a thread of its own, started by the first :meth:`open` off asyncio."""

    def __init__(self, name: str = "tether-postgres") -> None:
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._guard = threading.Lock()
        self._closed = False

    async def open(self, connect: Callable[[], Awaitable[T]]) -> T:
        """``await connect()``: directly on asyncio; elsewhere on the store's loop, the pool or
        connection it returns seen through a :class:`BridgedPool` / :class:`BridgedConnection`."""
        if on_asyncio():
            return await connect()
        raw: object = await self.run(connect, undo=_close)
        if isinstance(raw, asyncpg.Pool):
            return cast(T, BridgedPool(raw, self))
        if isinstance(raw, asyncpg.Connection):
            return cast(T, BridgedConnection(raw, self))
        raise TypeError(f"cannot bridge a {type(raw).__name__}")

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._guard:
            if self._closed:
                raise bridge_closed()
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=_serve, args=(loop,), name=self._name, daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    async def run(
        self,
        fn: Callable[..., Awaitable[T]],
        *args: Any,
        undo: Callable[[T], Awaitable[object]] | None = None,
        **kwargs: Any,
    ) -> T:
        """``await fn(*args, **kwargs)`` on the store's loop, from the caller's loop. When the caller
        is cancelled after the call succeeded, ``undo(result)`` runs there (nothing is leaked)."""
        loop = self._started()
        caller = trio_loop()
        done = anyio.Event()
        tasks: list[asyncio.Task[T]] = []

        async def call() -> T:
            return await fn(*args, **kwargs)  # what asyncpg returns may be awaitable, not a coroutine

        def start() -> None:  # on the store's loop
            task = loop.create_task(call())
            tasks.append(task)
            task.add_done_callback(lambda _: _soon(caller, done.set))

        # A context of its own: the call must not inherit the caller's (anyio would take the
        # caller's backend for the store loop's).
        self._call(loop, start)
        try:
            await done.wait()
        except BaseException:
            self._call(loop, _cancel, tasks)  # after start: the task is there
            with anyio.CancelScope(shield=True), anyio.move_on_after(_SETTLE_TIMEOUT):
                await done.wait()
            if undo is not None and done.is_set():
                task = tasks[0]
                if not task.cancelled() and task.exception() is None:  # it ended before the cancel
                    self._call(loop, _undo, loop, undo, task.result())
            raise
        try:
            return tasks[0].result()
        except asyncio.CancelledError:
            raise call_stopped() from None

    @staticmethod
    def _call(loop: asyncio.AbstractEventLoop, fn: Callable[..., object], *args: Any) -> None:
        try:
            loop.call_soon_threadsafe(fn, *args, context=contextvars.Context())
        except RuntimeError:  # the loop was closed under the call
            raise bridge_closed() from None

    def soon(self, fn: Callable[..., object], *args: Any) -> None:
        """Run the plain function ``fn(*args)`` on the store's loop (not waited for)."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(fn, *args)
            except RuntimeError:  # closed meanwhile: nothing is left to do there
                pass

    def back(self, callback: Callable[..., object]) -> Callable[..., None]:
        """``callback`` for asyncpg to call on the store's loop: it runs on this caller's loop."""
        caller = trio_loop()

        def forward(*args: Any) -> None:
            _soon(caller, callback, *args)

        return forward

    async def close(self) -> None:
        """Stop the store's loop and its thread (what is still open there is dropped); idempotent."""
        with self._guard:
            self._closed = True
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        with anyio.CancelScope(shield=True), anyio.move_on_after(_SETTLE_TIMEOUT):
            await anyio.to_thread.run_sync(thread.join)


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        loop.close()


def _cancel(tasks: list[asyncio.Task[Any]]) -> None:
    for task in tasks:
        task.cancel()


def _undo(loop: asyncio.AbstractEventLoop, undo: Callable[[T], Awaitable[object]], value: T) -> None:
    """Start ``undo(value)`` on the store's loop for a caller that is gone (on that loop)."""

    async def run() -> None:
        try:
            await undo(value)
        except Exception:  # nobody is left to hear of it; the pool reclaims what it must
            pass

    loop.create_task(run())


async def _close(raw: object) -> None:
    """Close a pool or connection opened for a caller that was cancelled meanwhile."""
    if isinstance(raw, asyncpg.Pool | asyncpg.Connection):
        raw.terminate()


def _terminate(raw: Any) -> None:
    """End a connection now; one the pool has already taken back is left alone."""
    try:
        raw.terminate()
    except asyncpg.InterfaceError:
        pass


def _soon(caller: TrioLoop, fn: Callable[..., object], *args: Any) -> None:
    try:
        caller.call_soon_threadsafe(fn, *args)
    except RuntimeError:  # the caller's run is over: nobody is left to tell
        pass


class _Queries:
    """The query methods asyncpg's pool, connection and prepared statement share, run on the store's loop."""

    __slots__ = ("_bridge", "_raw")

    def __init__(self, raw: Any, bridge: Bridge) -> None:
        self._raw = raw
        self._bridge = bridge

    async def fetch(self, *args: Any, **kwargs: Any) -> Any:
        return await self._bridge.run(self._raw.fetch, *args, **kwargs)

    async def fetchrow(self, *args: Any, **kwargs: Any) -> Any:
        return await self._bridge.run(self._raw.fetchrow, *args, **kwargs)

    async def fetchval(self, *args: Any, **kwargs: Any) -> Any:
        return await self._bridge.run(self._raw.fetchval, *args, **kwargs)

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        return await self._bridge.run(self._raw.execute, *args, **kwargs)


class BridgedStatement(_Queries):
    """A prepared statement on the store's loop."""

    __slots__ = ()


class _Transaction:
    """``conn.transaction()``: started and ended on the store's loop; its end is shielded."""

    __slots__ = ("_bridge", "_raw")

    def __init__(self, raw: Any, bridge: Bridge) -> None:
        self._raw = raw
        self._bridge = bridge

    async def __aenter__(self) -> None:
        await self._bridge.run(self._raw.start)

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if kind is None:  # the commit, and its outcome, as on asyncio
            await self._bridge.run(self._raw.__aexit__, kind, exc, tb)
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(_SETTLE_TIMEOUT):  # the rollback
            await self._bridge.run(self._raw.__aexit__, kind, exc, tb)


class BridgedConnection(_Queries):
    """An asyncpg connection (or a pool's lent one) seen from another loop: the methods the store calls."""

    __slots__ = ("__weakref__", "_forwards")

    def __init__(self, raw: Any, bridge: Bridge) -> None:
        super().__init__(raw, bridge)
        self._forwards: dict[Callable[..., object], Callable[..., None]] = {}

    async def executemany(self, *args: Any, **kwargs: Any) -> Any:
        return await self._bridge.run(self._raw.executemany, *args, **kwargs)

    async def prepare(self, query: str) -> BridgedStatement:
        return BridgedStatement(await self._bridge.run(self._raw.prepare, query), self._bridge)

    def transaction(self) -> _Transaction:
        return _Transaction(self._raw.transaction(), self._bridge)

    def is_closed(self) -> bool:
        return bool(self._raw.is_closed())

    def is_in_transaction(self) -> bool:
        return bool(self._raw.is_in_transaction())

    def get_server_pid(self) -> int:
        return int(self._raw.get_server_pid())

    def terminate(self) -> None:
        self._bridge.soon(_terminate, self._raw)

    async def close(self, *, timeout: float | None = None) -> None:
        await self._bridge.run(self._raw.close, timeout=timeout)

    async def add_listener(self, channel: str, callback: Callable[..., object]) -> None:
        """``LISTEN``; ``callback(conn, pid, channel, payload)`` runs on the caller's loop, ``conn`` this."""
        forward = self._bridge.back(functools.partial(_as_me, callback, self))
        self._forwards[callback] = forward
        await self._bridge.run(self._raw.add_listener, channel, forward)

    def add_termination_listener(self, callback: Callable[..., object]) -> None:
        """``callback(conn)`` runs on the caller's loop when the connection ends, ``conn`` this."""
        forward = self._bridge.back(functools.partial(_as_me, callback, self))
        self._forwards[callback] = forward
        self._bridge.soon(self._raw.add_termination_listener, forward)

    def remove_termination_listener(self, callback: Callable[..., object]) -> None:
        forward = self._forwards.pop(callback, None)
        if forward is not None:
            self._bridge.soon(self._raw.remove_termination_listener, forward)


def _as_me(callback: Callable[..., object], me: BridgedConnection, _raw: object, *args: Any) -> None:
    callback(me, *args)


class _Acquire:
    """``pool.acquire()``: awaited, a lent connection; as a context, released on exit (shielded)."""

    __slots__ = ("_conn", "_pool", "_timeout")

    def __init__(self, pool: BridgedPool, timeout: float | None) -> None:
        self._pool = pool
        self._timeout = timeout
        self._conn: BridgedConnection | None = None

    async def _acquire(self) -> BridgedConnection:
        pool = self._pool
        raw = await pool._bridge.run(pool._raw.acquire, timeout=self._timeout, undo=pool._raw.release)
        return BridgedConnection(raw, pool._bridge)

    def __await__(self) -> Generator[Any, None, BridgedConnection]:
        return self._acquire().__await__()

    async def __aenter__(self) -> BridgedConnection:
        self._conn = await self._acquire()
        return self._conn

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_SETTLE_TIMEOUT):
                await self._pool.release(conn)


class BridgedPool(_Queries):
    """An asyncpg pool seen from another loop: the methods the store calls."""

    __slots__ = ()

    def acquire(self, *, timeout: float | None = None) -> _Acquire:
        return _Acquire(self, timeout)

    async def release(self, conn: BridgedConnection, *, timeout: float | None = None) -> None:
        await self._bridge.run(self._raw.release, conn._raw, timeout=timeout)

    async def close(self) -> None:
        await self._bridge.run(self._raw.close)

    def terminate(self) -> None:
        self._bridge.soon(self._raw.terminate)
