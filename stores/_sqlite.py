"""Placeholder: being written (replaced before this lands)."""

from __future__ import annotations

__all__ = ["SQLiteStore"]


class SQLiteStore:
    """Placeholder."""
