"""The SQLite backend: its dialect (:mod:`._rows`, :mod:`._schema`), its writer (:mod:`._writer`,
:mod:`._connection`) and its locks (:mod:`._locks`). The rules live in ``stores``' shared modules."""

from ._store import SQLiteStore

__all__ = ["SQLiteStore"]
