"""Shared helpers: interleaved rounds, medians and a small table."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

__all__ = ["median", "print_table"]


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def print_table(title: str, rows: Sequence[tuple[str, float, float, str]]) -> None:
    """Print ``(metric, raw ops/s, tether ops/s, note)`` rows with the tether/raw ratio."""
    print(title)
    header = f"{'metric':<22}{'raw ops/s':>14}{'tether ops/s':>16}{'ratio':>9}  note"
    print(header)
    print("-" * len(header))
    for metric, raw, ours, note in rows:
        print(f"{metric:<22}{raw:>14,.0f}{ours:>16,.0f}{ours / raw:>8.2f}x  {note}")
