"""The error of replication: a plane that cannot be used."""

from __future__ import annotations

from stores import TetherError

__all__ = ["PlaneError"]


class PlaneError(TetherError):
    """The plane could not be used: unreachable, refused the key, or answered outside the protocol.

    ``status`` is the HTTP status (``None`` for a transport error).
    """

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
