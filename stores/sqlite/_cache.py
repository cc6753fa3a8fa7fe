"""The idempotency cache of :class:`~stores.SQLiteStore`: an entry per ``(execution_id, key)``, the
first writer's value kept, and the intent an at-most-once call records (one transaction each)."""

from __future__ import annotations

import sqlite3
from datetime import datetime
from typing import Any

from .._codec import encode_cache_value
from .._errors import check_execution_id
from .._json import decode
from .._model import Cached, utcnow
from ._rows import ts
from ._writer import Connections

__all__ = ["Cache"]


class Cache:
    """The cache entries, through the store's :class:`~stores.sqlite._writer.Connections` (an
    :class:`~stores._base.Intents` for the shared ``cache_intend``)."""

    def __init__(self, db: Connections) -> None:
        self._db = db

    async def get(self, execution_id: str, key: str) -> Cached | None:
        """The cache entry for ``(execution_id, key)``, if any."""
        check_execution_id(execution_id)

        def run(conn: sqlite3.Connection) -> Cached | None:
            found = conn.execute(
                "SELECT value FROM idempotency_cache WHERE execution_id = ? AND key = ?", (execution_id, key)
            ).fetchone()
            return None if found is None else Cached(decode(found[0]))

        return await self._db.read(run)

    async def put(self, execution_id: str, key: str, value: Any) -> Any:
        """Insert the entry if absent; return the stored value (the first writer's)."""
        # No ownership check: the entry records a body that ran, so a run abandoned after its body
        # (its lock lost meanwhile) still keeps the result, and its recovery does not run it again.
        body = encode_cache_value(execution_id, key, value)
        now = ts(utcnow())

        def run(conn: sqlite3.Connection) -> Any:
            conn.execute(
                "INSERT INTO idempotency_cache (execution_id, key, value, created_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (execution_id, key) DO NOTHING",
                (execution_id, key, body, now),
            )
            stored = conn.execute(
                "SELECT value FROM idempotency_cache WHERE execution_id = ? AND key = ?", (execution_id, key)
            ).fetchone()
            return decode(stored[0])

        return await self._db.write(run)

    async def intend(
        self, execution_id: str, key: str, marker: str, body: bytes, now: datetime
    ) -> tuple[bytes | None, bool]:
        """The stored value under ``key``, or insert the intent ``marker`` if absent (one transaction)."""

        def run(conn: sqlite3.Connection) -> tuple[bytes | None, bool]:
            found = conn.execute(
                "SELECT value FROM idempotency_cache WHERE execution_id = ? AND key = ?", (execution_id, key)
            ).fetchone()
            if found is not None:
                return found[0], False
            inserted = conn.execute(
                "INSERT INTO idempotency_cache (execution_id, key, value, created_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (execution_id, key) DO NOTHING",
                (execution_id, marker, body, ts(now)),
            )
            return None, inserted.rowcount == 1

        return await self._db.write(run)
