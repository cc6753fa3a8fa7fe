"""The errors of replication: a plane that cannot be used, and what it answered."""

from __future__ import annotations

from stores import TetherError

__all__ = ["PlaneError", "WireError"]


class PlaneError(TetherError):
    """The plane could not be used: unreachable, refused the key, or answered outside the protocol.

    ``status`` is the HTTP status (``None`` for a transport error).
    """

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class WireError(TetherError, ValueError):
    """An item or a cache entry is not of the ingest shape; the message names the field."""
