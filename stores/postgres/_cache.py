"""The idempotency cache of :class:`~stores.PostgresStore`: an entry per ``(execution_id, key)``,
the first writer's value kept, and the intent an at-most-once call records (one statement each)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .._codec import encode_cache_value
from .._errors import check_execution_id
from .._json import decode
from .._model import Cached, utcnow
from ._writer import WriterPool

__all__ = ["Cache"]


class Cache:
    """The cache entries, on the pool of the store's :class:`WriterPool` (an
    :class:`~stores._base.Intents` for the shared ``cache_intend``)."""

    def __init__(self, db: WriterPool, sql: dict[str, str]) -> None:
        self._db = db
        self._sql = sql

    async def get(self, execution_id: str, key: str) -> Cached | None:
        """The cached value for ``(execution_id, key)``, if any."""
        check_execution_id(execution_id)
        pool = await self._db.ready()
        with self._db.lost():
            value = await pool.fetchval(self._sql["cache_get"], execution_id, key)
        return None if value is None else Cached(decode(value))

    async def put(self, execution_id: str, key: str, value: Any) -> Any:
        """Insert if absent and return the stored value: the first writer wins (one round trip)."""
        # No ownership check: the entry records a body that ran, so a run abandoned after its body
        # (its lock lost meanwhile) still keeps the result, and its recovery does not run it again.
        data = encode_cache_value(execution_id, key, value)
        pool = await self._db.ready()
        with self._db.lost():
            stored = await pool.fetchval(self._sql["cache_put"], execution_id, key, data, utcnow())
            if stored is None:  # a rival committed after our snapshot: read it with a fresh one
                stored = await pool.fetchval(self._sql["cache_get"], execution_id, key)
        return decode(stored if stored is not None else data)

    async def intend(
        self, execution_id: str, key: str, marker: str, body: bytes, now: datetime
    ) -> tuple[bytes | None, bool]:
        """The stored value under ``key``, or insert the intent ``marker`` if absent (one statement)."""
        pool = await self._db.ready()
        with self._db.lost():
            rec = await pool.fetchrow(self._sql["cache_intend"], execution_id, key, marker, body, now)
        assert rec is not None
        return rec["value"], bool(rec["recorded"])
