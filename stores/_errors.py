"""Error types shared by every package of tether, and the store refusals built from them.

They live in ``stores`` because it is the bottom of the dependency chain; ``actors`` re-exports them.
Each refusal a store makes has one constructor here, so every backend words it the same way.
"""

from __future__ import annotations

__all__ = [
    "AlreadyResumed",
    "CheckpointError",
    "IdempotencyError",
    "IncompatibleSchema",
    "InvalidPath",
    "InvalidStoreURL",
    "OwnershipLost",
    "RowTooLarge",
    "RunExists",
    "RunNotFound",
    "SerializationError",
    "StoreError",
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


class IncompatibleSchema(StoreError):
    """The database was written by a newer schema version than this tether understands."""


class InvalidPath(TetherError, ValueError):
    """An ``agent_path`` or ``node_id`` that is not in the row grammar (docs/durability.md)."""


class InvalidStoreURL(StoreError, ValueError):
    """A store URL that :func:`stores.open_store` cannot read: an unknown scheme, or a malformed URL."""


# -- refusals: one wording for each, shared by every backend ------------------------------------


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


def pending_exists(execution_id: str) -> WriteConflict:
    """A second pause of a run that already has a pending row."""
    return WriteConflict(f"run {execution_id!r} already has a pending interrupt")


def seq_taken(execution_id: str, seq: int, node_id: str) -> WriteConflict:
    """The row's ``seq`` is taken: a stale writer lost the race."""
    return WriteConflict(
        f"seq {seq} of run {execution_id!r} is already taken (writing {node_id!r}): a stale writer lost"
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


def store_closed(store: object) -> StoreUnavailable:
    """A call on a store after :meth:`close`."""
    return StoreUnavailable(f"{store!r} is closed")


def newer_schema(where: str, found: int, understood: int) -> IncompatibleSchema:
    """The database was written by a newer schema version than this code."""
    return IncompatibleSchema(
        f"{where} was written by tether schema version {found}; this tether understands up to "
        f"version {understood}: upgrade tether"
    )
