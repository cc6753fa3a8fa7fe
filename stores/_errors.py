"""Error types shared by every package of tether.

They live in ``stores`` because it is the bottom of the dependency chain; ``actors`` re-exports them.
"""

from __future__ import annotations

__all__ = [
    "AlreadyResumed",
    "CheckpointError",
    "IdempotencyError",
    "IncompatibleSchema",
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


class IncompatibleSchema(StoreError):
    """The database was written by a newer schema version than this tether understands."""
