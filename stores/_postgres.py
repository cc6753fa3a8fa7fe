"""Placeholder: being written (replaced before this lands)."""

from __future__ import annotations

__all__ = ["PostgresStore"]


class PostgresStore:
    """Placeholder."""
