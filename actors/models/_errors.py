"""The error a model client raises when the model server refuses, cannot be reached, or ends badly."""

from __future__ import annotations

from stores import TetherError

__all__ = ["ModelError"]


class ModelError(TetherError):
    """A model call failed for good: a 4xx refusal, retries exhausted, a timeout, or a reply we cannot use.

    ``status_code`` is the HTTP status when there was one; ``body`` the server's text, if any;
    ``reason`` why a reply that arrived cannot be used: ``"refusal"``, ``"content_filter"`` or
    ``"length"`` (the answer was cut off). A run that fails with it can be resumed.
    """

    def __init__(
        self, message: str, *, status_code: int | None = None, body: str = "", reason: str | None = None
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.body = body
        self.reason = reason
