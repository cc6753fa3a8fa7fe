"""The PostgreSQL backend (asyncpg): its statements (:mod:`._sql`, :mod:`._schema`), its pool's
owner (:mod:`._writer`), its appends, inbox, outbox and cache, and its locks. Importing it imports asyncpg; ``stores`` does so only
when the backend is first used (``stores.PostgresStore``, or :func:`stores.open_store` on a
PostgreSQL URL)."""

from ._store import PostgresStore

__all__ = ["PostgresStore"]
