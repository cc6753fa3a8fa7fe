"""The SQLite backend: its dialect (:mod:`._rows`, :mod:`._schema`, :mod:`._insert`), its connections'
owner (:mod:`._writer`, :mod:`._connection`), its inbox, replica and cache, and its locks (:mod:`._locks`). The rules live in ``stores``' shared modules."""

from ._store import SQLiteStore

__all__ = ["SQLiteStore"]
