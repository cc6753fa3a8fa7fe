"""The store's run-ownership surface (:class:`stores.OwnedStore`), found once per store class.

The durable layer asks for it here only. A store that records run ownership (both backends) stops
a tool for a run this process lost, takes a new run with its first row, and serves a fleet; a store
that does not (a third-party or a test store) drives runs without any of that. The answer is the
store's class's (a protocol check costs microseconds, and each tool call asks).
"""

from __future__ import annotations

from typing import cast

from stores import OwnedStore, Store

__all__ = ["owned"]

#: Store class -> whether it is an OwnedStore.
_OWNED: dict[type, bool] = {}


def owned(store: Store | None) -> OwnedStore | None:
    """``store`` as an :class:`~stores.OwnedStore`, or ``None`` when it records no run ownership."""
    if store is None:
        return None
    kind = type(store)
    found = _OWNED.get(kind)
    if found is None:
        found = _OWNED[kind] = isinstance(store, OwnedStore)
    return cast("OwnedStore", store) if found else None
