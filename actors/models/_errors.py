"""The error a model client raises when the model server refuses or cannot be reached."""

from __future__ import annotations

from stores import TetherError

__all__ = ["ModelError"]


class ModelError(TetherError):
    """A model call failed for good: a 4xx refusal, retries exhausted, or a reply we cannot read.

    ``status_code`` is the HTTP status when there was one; ``body`` the server's text, if any.
    """

    def __init__(self, message: str, *, status_code: int | None = None, body: str = "") -> None:
        super().__init__(message)
        self.status_code = status_code
        self.body = body
