"""Error types shared by every package of tether, and the store refusals built from them.

They live in ``stores`` because it is the bottom of the dependency chain; ``actors`` re-exports them.
Each refusal a store makes has one constructor here, so every backend words it the same way.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "AlreadyResumed",
    "CheckpointError",
    "IdempotencyError",
    "IncompatibleSchema",
    "InvalidExecutionId",
    "InvalidPath",
    "InvalidStoreURL",
    "OwnershipLost",
    "RowTooLarge",
    "RunExists",
    "RunNotFound",
    "SerializationError",
    "StoreCorrupt",
    "StoreError",
    "StoreFull",
    "StoreUnavailable",
    "TetherError",
    "WriteConflict",
]


class TetherError(Exception):
    """Base class of every error tether raises on purpose."""


class CheckpointError(TetherError):
    """A checkpoint cannot be used the way it was asked for (e.g. forking from a run-end marker)."""


class RunNotFound(CheckpointError):
    """No row exists for the ``execution_id`` (or checkpoint) the caller named."""


class RunExists(CheckpointError):
    """A new run was asked for under an ``execution_id`` that already has rows."""


class AlreadyResumed(TetherError):
    """The run cannot be resumed by this caller: another caller won the claim, or the run finished."""


class WriteConflict(AlreadyResumed):
    """A row's ``seq`` or ``checkpoint_id`` is already taken: a stale writer lost the race."""


class SerializationError(TetherError, ValueError):
    """A value breaks the JSON rule; ``path`` names where (``$.messages[3].content``)."""

    def __init__(self, message: str, *, path: str = "$") -> None:
        super().__init__(f"{message} (at {path})")
        self.path = path


class IdempotencyError(SerializationError):
    """An ``@idempotent`` function returned or was called with something that is not JSON."""


class RowTooLarge(SerializationError):
    """A row's new content is larger than the store's documented limit."""


class StoreError(TetherError):
    """The store itself cannot be used."""


class StoreUnavailable(StoreError):
    """The database cannot be reached or opened (bad DSN, refused connection, not a database file)."""


class OwnershipLost(StoreUnavailable):
    """This process lost its liveness lock (its lock connection was closed or terminated, its lock
    file replaced or removed): the runs it owned are abandoned, and it writes nothing more for them."""


class StoreFull(StoreUnavailable):
    """The database could not grow (a full disk, a file-size limit): the write was not committed,
    nothing committed before it is lost, and writing works again once space is freed."""


class StoreCorrupt(StoreError):
    """The database file is damaged; the store refuses every further write to it."""


class IncompatibleSchema(StoreError):
    """The database was written by a newer schema version than this tether understands."""


class InvalidPath(TetherError, ValueError):
    """An ``agent_path`` or ``node_id`` that is not in the row grammar (docs/durability.md)."""


class InvalidExecutionId(TetherError, ValueError):
    """An ``execution_id`` that is not a str of 1 to :data:`MAX_EXECUTION_ID` characters without NUL
    or lone surrogates (the same limit on every backend)."""


class InvalidStoreURL(StoreError, ValueError):
    """A store URL that :func:`stores.open_store` cannot read: an unknown scheme, or a malformed URL."""


#: The longest ``execution_id`` every backend stores (PostgreSQL's B-tree entries cap it; SQLite
#: keeps the same limit so that a run moves between backends).
MAX_EXECUTION_ID: Final = 255

# -- refusals: one wording for each, shared by every backend ------------------------------------


def check_execution_id(execution_id: object) -> str:
    """``execution_id`` itself, or :class:`InvalidExecutionId` naming what is wrong with it."""
    if not isinstance(execution_id, str):
        raise InvalidExecutionId(f"an execution_id is a str, not {type(execution_id).__name__}")
    if not 0 < len(execution_id) <= MAX_EXECUTION_ID:
        raise InvalidExecutionId(
            f"an execution_id has 1 to {MAX_EXECUTION_ID} characters; this one has {len(execution_id)}"
        )
    if "\x00" in execution_id:
        raise InvalidExecutionId(f"execution_id {execution_id!r} contains a NUL character")
    if not execution_id.isascii() and _has_surrogate(execution_id):
        raise InvalidExecutionId(
            f"execution_id {execution_id!r} contains a lone surrogate, which UTF-8 cannot encode"
        )
    return execution_id


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def reserved_schema(schema: str) -> StoreError:
    """A PostgreSQL schema name that the server keeps for itself."""
    return StoreError(
        f"schema {schema!r} is reserved by PostgreSQL (pg_* and information_schema hold the "
        "server's catalogs): pick another schema name"
    )


def invalid_schema(schema: object) -> StoreError:
    """A PostgreSQL schema name outside what the store accepts."""
    return StoreError(
        f"invalid schema name {schema!r}: use letters, digits and underscores, "
        "not starting with a digit, at most 63 characters"
    )


def store_full(where: str, cause: str) -> StoreFull:
    """A write that the database could not make room for."""
    return StoreFull(
        f"cannot write to {where}: {cause}; this write was not committed and nothing committed "
        "before it is lost: free space, then resume the runs that stopped"
    )


def store_corrupt(where: str, cause: str) -> StoreCorrupt:
    """A read or write that found the database damaged."""
    return StoreCorrupt(
        f"{where} is damaged ({cause}): the store refuses further writes to it; run `tether check` "
        "on it and restore it from a backup (docs/durability.md, 'The SQLite file')"
    )


def run_exists(execution_id: str) -> RunExists:
    """``seq`` 0 was appended to a run that already has rows."""
    return RunExists(
        f"run {execution_id!r} already has checkpoints (seq 0 starts a new run only): pick another "
        "execution_id, or fork or resume the existing run"
    )


def no_checkpoints(execution_id: str) -> RunNotFound:
    """The run has no rows at all."""
    return RunNotFound(f"run {execution_id!r} has no checkpoints")


def no_checkpoint(execution_id: str, checkpoint_id: str) -> RunNotFound:
    """The run has no row with this id."""
    return RunNotFound(f"run {execution_id!r} has no checkpoint {checkpoint_id!r}")


def no_step(execution_id: str) -> RunNotFound:
    """The run's rows are all markers and bookkeeping: nothing to re-enter."""
    return RunNotFound(f"run {execution_id!r} has no step to re-enter (only markers and bookkeeping rows)")


def already_finished(execution_id: str) -> AlreadyResumed:
    """A resume of a run whose newest row is a completed ``run_end`` (rule 8 of docs/durability.md)."""
    return AlreadyResumed(
        f"run {execution_id!r} already finished (completed): there is nothing to resume; "
        "fork it to branch under a new id"
    )


def marker_not_step(execution_id: str, checkpoint_id: str) -> CheckpointError:
    """A fork from the ``run_end`` marker itself (rule 8 of docs/durability.md)."""
    return CheckpointError(
        f"checkpoint {checkpoint_id!r} of run {execution_id!r} is the run-end marker, not a step "
        "of the run; fork from a step (or omit checkpoint_id for the newest step)"
    )


def no_pause(execution_id: str) -> AlreadyResumed:
    """A claim found no pending row: another resumer won it, or the run is not paused."""
    return AlreadyResumed(
        f"run {execution_id!r} has no pending interrupt to claim: another resumer claimed it, "
        "or the run is not paused"
    )


def owned_elsewhere(execution_id: str) -> RunExists:
    """A run's first row refused because a live owner holds the run."""
    return RunExists(f"run {execution_id!r} is owned by another live process or actor")


def take_unfinished(execution_id: str, timeout: float) -> StoreUnavailable:
    """Taking a run did not finish within its bound (its outcome is unknown; the take is undone)."""
    return StoreUnavailable(f"taking run {execution_id!r} did not finish in {timeout} s")


def abandoned_run(execution_id: str, store: object) -> OwnershipLost:
    """Anything more for a run ``store`` abandoned when it lost its liveness lock."""
    return OwnershipLost(
        f"run {execution_id!r} was abandoned: {store!r} lost its liveness lock, and "
        "another process may be recovering the run"
    )


def take_unrecorded(execution_id: str) -> OwnershipLost:
    """An act for a run whose take is not written (its first row is not, or it rests)."""
    return OwnershipLost(
        f"run {execution_id!r} is not recorded as owned here: its first row is not written yet, "
        "or it rests (nothing may act for it until a write records the take)"
    )


def signal_to_no_run(execution_id: str) -> RunNotFound:
    """A signal to a run without rows."""
    return RunNotFound(f"run {execution_id!r} has no checkpoints in this store: no signal sent")


def signal_to_completed(execution_id: str) -> AlreadyResumed:
    """A signal to a completed run: nothing is left to deliver to."""
    return AlreadyResumed(f"run {execution_id!r} already completed: no signal is delivered to it")


def pending_exists(execution_id: str) -> WriteConflict:
    """A second pause of a run that already has a pending row."""
    return WriteConflict(f"run {execution_id!r} already has a pending interrupt")


def seq_taken(execution_id: str, seq: int, node_id: str) -> WriteConflict:
    """The row's ``seq`` is taken: a stale writer lost the race."""
    return WriteConflict(
        f"seq {seq} of run {execution_id!r} is already taken (writing {node_id!r}): a stale writer lost"
    )


def signals_taken(execution_id: str, seq: int) -> WriteConflict:
    return WriteConflict(
        f"run {execution_id!r}: the signals row {seq} consumes were consumed by another row already"
    )


def checkpoint_id_taken(execution_id: str, checkpoint_id: str) -> WriteConflict:
    """The row's ``checkpoint_id`` is taken."""
    return WriteConflict(f"checkpoint id {checkpoint_id!r} is already taken (run {execution_id!r})")


def log_kept_changing(execution_id: str, node_id: str) -> WriteConflict:
    """The run's message log moved under every re-plan of the write."""
    return WriteConflict(
        f"the message log of run {execution_id!r} kept changing while writing {node_id!r}: "
        "another writer is appending to this run"
    )


def path_not_url(path: str) -> InvalidStoreURL:
    """:class:`~stores.SQLiteStore` was given a URL (only the scheme is quoted: a URL may hold a password)."""
    scheme = path.partition("://")[0]
    return InvalidStoreURL(
        f"SQLiteStore takes a file path, not a {scheme}:// URL: pass the path (SQLiteStore('runs.db')), "
        "or give the URL to open_store() (open_store('sqlite:///runs.db'))"
    )


def store_closed(store: object) -> StoreUnavailable:
    """A call on a store after :meth:`close`."""
    return StoreUnavailable(f"{store!r} is closed")


def newer_schema(where: str, found: int, understood: int) -> IncompatibleSchema:
    """The database was written by a newer schema version than this code."""
    return IncompatibleSchema(
        f"{where} was written by tether schema version {found}; this tether understands up to "
        f"version {understood}: upgrade tether"
    )


# -- the database cannot be reached, opened or used (StoreUnavailable) ---------------------------


def unusable(where: str, cause: object) -> StoreUnavailable:
    """A database that answered with an error this store has no more specific wording for."""
    return StoreUnavailable(f"cannot use {where}: {cause}")


def bridge_closed() -> StoreUnavailable:
    """A call on the PostgreSQL store after its event loop was closed."""
    return StoreUnavailable("the PostgreSQL store is closed")


def call_stopped() -> StoreUnavailable:
    """A call the PostgreSQL store's event loop cancelled (it was stopping) before it ended."""
    return StoreUnavailable("the PostgreSQL store's event loop stopped the call")


def invalid_dsn(where: str, kind: str) -> StoreUnavailable:
    """A DSN asyncpg cannot read (only the error's ``kind``: its text may quote the password)."""
    return StoreUnavailable(f"cannot connect to {where}: invalid DSN ({kind})")


def connect_timed_out(where: str) -> StoreUnavailable:
    """A connection to the server that did not open within its timeout."""
    return StoreUnavailable(f"cannot reach {where}: the connection timed out")


def unreachable(where: str, reason: str) -> StoreUnavailable:
    """A connection the network refused (no server listening, no route)."""
    return StoreUnavailable(
        f"cannot reach {where}: {reason} (is the server running and accepting TCP connections there?)"
    )


def no_database(database: str, where: str) -> StoreUnavailable:
    """A DSN naming a database the server does not have."""
    return StoreUnavailable(
        f"database {database!r} does not exist on {where}: create it (CREATE DATABASE), "
        "or name an existing one in the DSN"
    )


def login_refused(where: str, user: str, cause: str) -> StoreUnavailable:
    """A login the server refused (a wrong password, or a pg_hba.conf rule)."""
    return StoreUnavailable(
        f"{where} refused the login of role {user!r}: {cause} "
        "(check the user and password of the DSN, and the server's pg_hba.conf)"
    )


def no_permission(user: str, where: str, cause: str) -> StoreUnavailable:
    """A statement refused for a permission the role lacks."""
    return StoreUnavailable(
        f"role {user!r} lacks a permission on {where}: {cause} (the store needs CREATE "
        "on the database to create its schema, or USAGE and CREATE on an existing schema, and "
        "read and write on its tables)"
    )


def owner_lock_held(owner: str) -> StoreUnavailable:
    """An owner's liveness lock another session holds (a 63-bit key collision with a live owner)."""
    return StoreUnavailable(f"the liveness lock of owner {owner!r} is held by another session")


def cannot_open(path: str, cause: object) -> StoreUnavailable:
    """A SQLite database file that cannot be opened (a missing directory, no permission)."""
    return StoreUnavailable(f"cannot open the SQLite database {path!r}: {cause}")


def no_sqlite_file(path: str) -> StoreUnavailable:
    """A check of a SQLite database that is not there (a check creates nothing)."""
    return StoreUnavailable(f"there is no SQLite database at {path!r}")


def not_sqlite(path: str) -> StoreUnavailable:
    """A file whose header is not a SQLite database's."""
    return StoreUnavailable(f"{path!r} is not a SQLite database")


def no_wal(path: str, mode: object) -> StoreUnavailable:
    """A SQLite database that would not switch to WAL mode (``mode`` is what the pragma gave)."""
    return StoreUnavailable(f"cannot switch {path!r} to WAL mode (got {mode!r})")


def sqlite_connection_closed() -> StoreUnavailable:
    """A call on a SQLite connection's thread after it stopped."""
    return StoreUnavailable("the SQLite connection is closed")


def unreadable(path: str, cause: object) -> StoreUnavailable:
    """A read of a SQLite database that failed (locked, or an I/O error), not from damage."""
    return StoreUnavailable(f"cannot read {path!r}: {cause}")


def stayed_locked(path: str, cause: object) -> StoreUnavailable:
    """A write transaction that could not begin: another writer held the database past the timeout."""
    return StoreUnavailable(f"{path!r} stayed locked by another writer: {cause}")


def batch_stopped(exc: BaseException) -> StoreUnavailable:
    """What the callers of a write batch get when a ``BaseException`` (not an ``Exception``)
    stopped it: its text, as an error they can handle."""
    return StoreUnavailable(str(exc))


def write_failed() -> StoreUnavailable:
    """A write of a batch that ended with no outcome and no error to give its caller."""
    return StoreUnavailable("write failed")
