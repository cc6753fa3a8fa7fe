"""The ``--store`` URL: where it comes from (the flag, ``$TETHER_STORE``, the default) and opening it."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import unquote, urlsplit

import anyio

from stores import SQLiteStore, Store, StoreUnavailable

__all__ = ["DEFAULT_STORE", "ENV_STORE", "open_store", "opened_store", "store_url"]

#: The store a command uses when neither ``--store`` nor ``$TETHER_STORE`` names one.
DEFAULT_STORE = "sqlite:///tether.db"
#: The environment variable that names the default store.
ENV_STORE = "TETHER_STORE"
#: Bound on closing a store when a command ends (it flushes and closes connections or a file).
_CLOSE_TIMEOUT = 10.0


def store_url(flag: str | None) -> str:
    """The store URL a command uses: ``--store``, else ``$TETHER_STORE``, else :data:`DEFAULT_STORE`."""
    return flag or os.environ.get(ENV_STORE) or DEFAULT_STORE


def open_store(url: str) -> Store:
    """A store (not yet opened) for ``url``: ``sqlite:///relative.db`` or ``sqlite:////absolute.db``.

    Raises :class:`~stores.StoreUnavailable` naming the URL for anything else.
    """
    parts = urlsplit(url)
    if parts.scheme != "sqlite" or parts.netloc or not parts.path.startswith("/") or len(parts.path) < 2:
        raise StoreUnavailable(
            f"cannot open store {url!r}: expected sqlite:///relative/path.db or sqlite:////absolute/path.db"
        )
    return SQLiteStore(unquote(parts.path[1:]))


@asynccontextmanager
async def opened_store(url: str) -> AsyncIterator[Store]:
    """The store at ``url``, set up (created or migrated) for the block and closed after it."""
    store = open_store(url)
    await store.setup()
    try:
        yield store
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT):
            await store.close()
