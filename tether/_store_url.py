"""The ``--store`` URL: where it comes from (the flag, ``$TETHER_STORE``, the default) and opening it.

The URL forms are :func:`stores.open_store`'s: ``sqlite:///relative/path.db``,
``sqlite:////absolute/path.db``, ``postgresql://user@host:port/db?schema=name`` or a libpq keyword
string.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from stores import SQLiteStore, Store, StoreUnavailable, open_store

__all__ = ["DEFAULT_STORE", "ENV_STORE", "close_store", "opened_store", "require_existing", "store_url"]

#: The store a command uses when neither ``--store`` nor ``$TETHER_STORE`` names one.
DEFAULT_STORE = "sqlite:///tether.db"
#: The environment variable that names the default store.
ENV_STORE = "TETHER_STORE"
#: Bound on closing a store when a command ends (it flushes and closes connections or a file).
_CLOSE_TIMEOUT = 10.0


def store_url(flag: str | None) -> str:
    """The store URL a command uses: ``--store``, else ``$TETHER_STORE``, else :data:`DEFAULT_STORE`."""
    return flag or os.environ.get(ENV_STORE) or DEFAULT_STORE


def require_existing(store: Store) -> None:
    """Refuse a SQLite store whose file is not there (``StoreUnavailable`` naming the path), before
    anything creates it: a mistyped path must not read as an empty store."""
    if isinstance(store, SQLiteStore) and not os.path.exists(store.path):
        raise StoreUnavailable(
            f"there is no SQLite database at {os.path.abspath(store.path)!r}: check --store or "
            f"${ENV_STORE} (tether migrate creates an empty one)"
        )


@asynccontextmanager
async def opened_store(url: str, *, create: bool = True) -> AsyncIterator[Store]:
    """The store at ``url``, set up (created or migrated) for the block and closed after it.

    A URL :func:`stores.open_store` cannot read raises :class:`~stores.InvalidStoreURL`; a store
    that cannot be reached or is not a database, :class:`~stores.StoreUnavailable`; so does a
    SQLite file that is not there when ``create`` is false (nothing is created then).
    """
    store = open_store(url)
    if not create:
        require_existing(store)
    try:
        await store.setup()
        yield store
    finally:
        await close_store(store)


async def close_store(store: Store) -> None:
    """Close ``store``, shielded and bounded (a command ending, or one being cancelled)."""
    with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT):
        await store.close()
