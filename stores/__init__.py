"""tether's durable row log: the row model, errors, the async store protocol and its backends.

Layout. What every backend shares lives once, in private modules at this level: the row model
(``_model``), the JSON rule (``_json``), ``agent_path``/``node_id`` (``_paths``), rows to columns
(``_codec``), the re-entry walk (``_reentry``), the prune rule (``_prune``), the refusals
(``_errors``) and the base class with the re-plan loop (``_base``); the protocol is ``_protocol``.
``sqlite/`` and ``postgres/`` hold only a backend's SQL, writer and locks; asyncpg is imported
when ``PostgresStore`` is first used. :func:`open_store` opens either from a URL.
``SQLiteStore`` (the embedded default) and ``PostgresStore`` (for a fleet) pass one conformance
suite, :mod:`stores.testing`, that a third-party store can run too.
"""

from typing import TYPE_CHECKING, Any

from ._codec import StoredRow
from ._errors import (
    MAX_EXECUTION_ID,
    AlreadyResumed,
    CheckpointError,
    IdempotencyError,
    IncompatibleSchema,
    InvalidExecutionId,
    InvalidPath,
    InvalidStoreURL,
    OwnershipLost,
    RowTooLarge,
    RunExists,
    RunNotFound,
    SerializationError,
    StoreCorrupt,
    StoreError,
    StoreFull,
    StoreUnavailable,
    TetherError,
    WriteConflict,
    check_execution_id,
)
from ._heads import ROW_STATES, RunHead, row_state
from ._json import MAX_DEPTH as MAX_JSON_DEPTH
from ._json import canonical_json
from ._json import decode as decode_json
from ._json import encode as encode_json
from ._json import normalize as normalize_json
from ._meta import fixup_module_metadata
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
    SIGNAL,
    STATUSES,
    TOOL_CALL,
    WAIT,
    WAKE,
    Cached,
    CacheEntry,
    Checkpoint,
    PendingInterrupt,
    ReEntry,
    new_id,
    utcnow,
)
from ._paths import (
    PATH_KINDS,
    NodeId,
    child_path,
    conversation_of,
    handoff_node,
    is_segment_name,
    parse_node_id,
    parse_path,
    tool_node,
    tool_path,
    turn_node,
)
from ._protocol import OwnedStore, OwnerSessions, ReplicatedStore, Store
from ._queues import DEFAULT_QUEUE, Admission, Queue, check_enqueue, parse_queue
from ._schedules import StoredSchedule
from ._signals import (
    CONSUMES,
    MESSAGE,
    WAIT_DEADLINE,
    WAIT_K,
    WAIT_NAME,
    WAIT_STEP,
    WAKE_AT,
    SignalsWaiting,
    StoredSignal,
)
from ._url import open_store
from ._watch import RowWatch
from .sqlite import SQLiteStore

if TYPE_CHECKING:
    from .postgres import PostgresStore

__all__ = [
    "BOOKKEEPING_STEPS",
    "COMPLETED",
    "CONSUMES",
    "DEFAULT_QUEUE",
    "FAILED",
    "FORK_ORIGIN",
    "HANDOFF",
    "HITL_PAUSE",
    "INTERRUPTED",
    "LLM_CALL",
    "MAX_EXECUTION_ID",
    "MAX_JSON_DEPTH",
    "MESSAGE",
    "PATH_KINDS",
    "RECOVER",
    "REENTRY_SEQ",
    "RESUME",
    "RESUME_KEY",
    "ROW_STATES",
    "RUN_END",
    "SIGNAL",
    "STATUSES",
    "TOOL_CALL",
    "WAIT",
    "WAIT_DEADLINE",
    "WAIT_K",
    "WAIT_NAME",
    "WAIT_STEP",
    "WAKE",
    "WAKE_AT",
    "Admission",
    "AlreadyResumed",
    "CacheEntry",
    "Cached",
    "Checkpoint",
    "CheckpointError",
    "IdempotencyError",
    "IncompatibleSchema",
    "InvalidExecutionId",
    "InvalidPath",
    "InvalidStoreURL",
    "NodeId",
    "OwnedStore",
    "OwnerSessions",
    "OwnershipLost",
    "PendingInterrupt",
    "PostgresStore",
    "Queue",
    "ReEntry",
    "ReplicatedStore",
    "RowTooLarge",
    "RowWatch",
    "RunExists",
    "RunHead",
    "RunNotFound",
    "SQLiteStore",
    "SerializationError",
    "SignalsWaiting",
    "Store",
    "StoreCorrupt",
    "StoreError",
    "StoreFull",
    "StoreUnavailable",
    "StoredRow",
    "StoredSchedule",
    "StoredSignal",
    "TetherError",
    "WriteConflict",
    "canonical_json",
    "check_enqueue",
    "check_execution_id",
    "child_path",
    "conversation_of",
    "decode_json",
    "encode_json",
    "fixup_module_metadata",
    "handoff_node",
    "is_segment_name",
    "new_id",
    "normalize_json",
    "open_store",
    "parse_node_id",
    "parse_path",
    "parse_queue",
    "row_state",
    "tool_node",
    "tool_path",
    "turn_node",
    "utcnow",
]

_LAZY = frozenset({"PostgresStore"})
fixup_module_metadata(__name__, globals(), [name for name in __all__ if name not in _LAZY])


def __getattr__(name: str) -> Any:
    """``PostgresStore`` is imported on first use, so ``import stores`` does not import asyncpg."""
    if name == "PostgresStore":
        from .postgres import PostgresStore

        fixup_module_metadata(__name__, {name: PostgresStore}, [name])
        globals()[name] = PostgresStore
        return PostgresStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
