"""Shared helpers: interleaved rounds, medians and small tables."""

from __future__ import annotations

import os
import statistics
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import NamedTuple

__all__ = ["PG_DSN", "Target", "interleaved", "median", "print_table", "print_targets"]

#: The PostgreSQL server the benchmarks use (``TETHER_PG_DSN`` overrides it, as in the tests).
PG_DSN = os.environ.get("TETHER_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")


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


async def interleaved(
    rounds: int, measures: Mapping[str, Callable[[], Awaitable[float]]]
) -> dict[str, list[float]]:
    """Run every measurement once per round, rotating (and reversing) the order between rounds.

    Returns the samples by name; take :func:`median` of each. Rotation spreads the machine's noise
    and any warm-up over every configuration instead of charging it to whichever runs first.
    """
    names = list(measures)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for index in range(rounds):
        shift = index % len(names)
        order = names[shift:] + names[:shift]
        if index % 2:
            order.reverse()
        for name in order:
            samples[name].append(await measures[name]())
    return samples


class Target(NamedTuple):
    """One configuration: ``ours / base`` must reach ``target`` (``None``: shown, not checked)."""

    config: str
    ours: float
    base: float
    target: float | None
    note: str = ""

    @property
    def ratio(self) -> float:
        return self.ours / self.base if self.base else float("inf")

    @property
    def passed(self) -> bool:
        return self.target is None or self.ratio >= self.target


def print_targets(title: str, rows: Sequence[Target], *, ours: str = "tether", base: str = "raw") -> bool:
    """Print configuration, median ops/s of both sides, ratio, target and PASS/MISS; True if all pass."""
    print(title)
    header = (
        f"{'configuration':<34}{'median ' + ours:>16}{'median ' + base:>16}{'ratio':>9}{'target':>9}  result"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        verdict = "info" if row.target is None else "PASS" if row.passed else "MISS"
        target = "-" if row.target is None else f">={row.target:.2f}"
        note = f"  ({row.note})" if row.note else ""
        print(
            f"{row.config:<34}{row.ours:>16,.1f}{row.base:>16,.1f}{row.ratio:>8.2f}x"
            f"{target:>9}  {verdict}{note}"
        )
    return all(row.passed for row in rows)
