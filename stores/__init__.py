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
from ._json import canonical_json
from ._json import decode as decode_json
from ._json import encode as encode_json
from ._json import normalize as normalize_json
from ._model import (
    BOOKKEEPING_STEPS,
    COMPLETED,
    FAILED,
    FORK_ORIGIN,
    HANDOFF,
    HITL_PAUSE,
    INTERRUPTED,
    LLM_CALL,
    RECOVER,
    REENTRY_SEQ,
    RESUME,
    RESUME_KEY,
    RUN_END,
    STATUSES,
    TOOL_CALL,
    Cached,
    Checkpoint,
    PendingInterrupt,
    ReEntry,
    new_id,
    utcnow,
)
from ._postgres import PostgresStore
from ._protocol import ReplicatedStore, Store
from ._sqlite import SQLiteStore

__all__ = [
    "BOOKKEEPING_STEPS",
    "COMPLETED",
    "FAILED",
    "FORK_ORIGIN",
    "HANDOFF",
    "HITL_PAUSE",
    "INTERRUPTED",
    "LLM_CALL",
    "RECOVER",
    "REENTRY_SEQ",
    "RESUME",
    "RESUME_KEY",
    "RUN_END",
    "STATUSES",
    "TOOL_CALL",
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
    "canonical_json",
    "decode_json",
    "encode_json",
    "new_id",
    "normalize_json",
    "utcnow",
]
