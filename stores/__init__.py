"""tether's durable row log: the row model, errors, the async store protocol and its backends.

``SQLiteStore`` (aiosqlite, the embedded default) and ``PostgresStore`` (asyncpg, for a fleet) pass
one conformance suite, :mod:`stores.testing`, that a third-party store can run too.
"""

from ._errors import (
    AlreadyResumed,
    CheckpointError,
    IdempotencyError,
    IncompatibleSchema,
    RowTooLarge,
    RunExists,
    RunNotFound,
    SerializationError,
    StoreError,
    StoreUnavailable,
    TetherError,
    WriteConflict,
)
from ._model import Cached, Checkpoint, PendingInterrupt, ReEntry
from ._postgres import PostgresStore
from ._protocol import ReplicatedStore, Store
from ._sqlite import SQLiteStore

__all__ = [
    "AlreadyResumed",
    "Cached",
    "Checkpoint",
    "CheckpointError",
    "IdempotencyError",
    "IncompatibleSchema",
    "PendingInterrupt",
    "PostgresStore",
    "ReEntry",
    "ReplicatedStore",
    "RowTooLarge",
    "RunExists",
    "RunNotFound",
    "SQLiteStore",
    "SerializationError",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "TetherError",
    "WriteConflict",
]
