"""Hearing of new rows: one ``LISTEN`` connection per store, waking the :class:`RowWatch` es on it.

Every write statement notifies the schema's channel with the run's id (``stores.postgres._sql``),
delivered when it commits. The listening connection is opened by the first wait of a watch and
re-opened by a later wait when it was lost; while it is down, watches fall back to polling
(their waits are bounded in any case), so a lost notice costs latency, never a row. A write that
makes a resting run due notifies the same channel with the empty payload (``stores._watch.WAITS``),
which wakes the store's watches on waits.
"""

from __future__ import annotations

import functools
import weakref
from typing import Final

import anyio
import asyncpg

from .._errors import StoreUnavailable
from .._log import LOGGER
from .._watch import RowWatch
from ._bridge import Bridge
from ._connection import CONNECT_ERRORS, unavailable

__all__ = ["RowNotices"]

#: A watch's poll while the listener is up: a safety net only, notices do the waking.
_LISTENING_POLL: Final = 2.0
_CLOSE_TIMEOUT: Final = 5.0
#: Payloads are run ids cut to this length (NOTIFY takes at most 8000 bytes).
_PAYLOAD_CHARS: Final = 1000
#: After a failed attempt to listen, the next one waits this long (the watches poll meanwhile).
_RETRY_AFTER: Final = 5.0


class RowNotices:
    """The watches of one store and the connection that listens for them."""

    def __init__(self, dsn: str, channel: str, *, connect_timeout: float, bridge: Bridge) -> None:
        self._dsn = dsn
        self._bridge = bridge  # the store's: asyncpg's loop off asyncio
        self._channel = channel
        self._timeout = connect_timeout
        self._conn: asyncpg.Connection | None = None
        self._lock = anyio.Lock()
        self._watches: dict[str, weakref.WeakSet[RowWatch]] = {}  # a dropped watch goes too
        self._closed = False
        self._retry_at = 0.0

    def watch(self, execution_id: str) -> RowWatch:
        """A watch on the run, woken by its notices (see :class:`RowWatch`)."""
        watch = RowWatch(execution_id, poll=_LISTENING_POLL, ensure=self._ensure, on_close=self._forget)
        self._watches.setdefault(execution_id[:_PAYLOAD_CHARS], weakref.WeakSet()).add(watch)
        return watch

    def _forget(self, watch: RowWatch) -> None:
        key = watch.execution_id[:_PAYLOAD_CHARS]
        watches = self._watches.get(key)
        if watches is not None:
            watches.discard(watch)
            if not watches:
                del self._watches[key]

    def _on_notice(
        self,
        conn: asyncpg.Connection | asyncpg.pool.PoolConnectionProxy,
        pid: int,
        channel: str,
        payload: object,
    ) -> None:
        for watch in list(self._watches.get(str(payload), ())):
            watch.notice()

    def _on_lost(self, conn: object) -> None:
        if conn is self._conn:
            self._conn = None
            self._wake_all()  # they read again: a notice may have been lost with the connection

    def _wake_all(self) -> None:
        for watches in list(self._watches.values()):
            for watch in list(watches):
                watch.notice()

    async def _ensure(self) -> None:
        """Open the listening connection if it is not up (bounded by the connect timeout). A
        failure is logged and leaves the watches polling."""
        if self._conn is not None or self._closed or anyio.current_time() < self._retry_at:
            return
        async with self._lock:
            if self._conn is not None or self._closed:
                return
            try:
                with anyio.fail_after(self._timeout + 1):
                    conn: asyncpg.Connection = await self._bridge.open(
                        functools.partial(
                            asyncpg.connect,
                            self._dsn,
                            timeout=self._timeout,
                            server_settings={"application_name": "tether-notices"},
                        )
                    )
                    await conn.add_listener(self._channel, self._on_notice)
            except (*CONNECT_ERRORS, TimeoutError) as exc:
                error: StoreUnavailable = unavailable(self._dsn, exc)
                LOGGER.warning("cannot listen for new rows (readers poll instead): %s", error)
                self._retry_at = anyio.current_time() + _RETRY_AFTER
                return
            conn.add_termination_listener(self._on_lost)
            self._conn = conn
            self._wake_all()  # rows written before the LISTEN took effect are read at once

    async def close(self) -> None:
        """Close the listening connection (shielded, bounded); watches then only poll."""
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is None:
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT):
            try:
                await conn.close()
            except CONNECT_ERRORS:
                conn.terminate()
