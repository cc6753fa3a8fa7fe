"""Shared helpers: interleaved rounds, medians and small tables."""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

__all__ = [
    "PG_DSN",
    "ROOT",
    "Target",
    "interleaved",
    "measure_child",
    "median",
    "print_table",
    "print_targets",
]

#: The PostgreSQL server the benchmarks use (``TETHER_PG_DSN`` overrides it, as in the tests).
PG_DSN = os.environ.get("TETHER_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
#: The project root (a child process of a benchmark runs from here).
ROOT = Path(__file__).resolve().parents[1]


async def measure_child(module: str, payload: Any, *, timeout: float, what: str) -> str:
    """Run ``python -m <module> --measure <payload as JSON>`` from the project root and return the
    last line it printed (its measurement). Bounded by ``timeout``: a measurement that takes this
    long is broken, not slow; the child is killed if the wait ends early for any reason.
    """
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        module,
        "--measure",
        json.dumps(payload),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(child.communicate(), timeout)
    except BaseException:
        if child.returncode is None:
            child.kill()
            await asyncio.shield(child.wait())
        raise
    if child.returncode != 0:
        raise RuntimeError(f"measuring {what} failed:\n{err.decode()}")
    return out.decode().splitlines()[-1]


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
