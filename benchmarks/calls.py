"""Where a tether run's Python calls go: a deterministic profile of the small refund on SQLite.

    python -m benchmarks.calls [--runs 300] [--top 25] [--tiny]

Runs ``--runs`` tether runs one after another (``benchmarks.step_path``'s tether contender: the small
refund, 4 rows a run, SQLite WAL ``synchronous=FULL``) under :mod:`cProfile`, after the step path's
warm-up, and prints per run: the Python-level calls (every function, method and builtin call, a
coroutine's resumptions counted as calls, as cProfile counts them) grouped by where the function
lives (the framework's packages, anyio, asyncio, the drivers, the rest), the event-loop iterations,
and the functions called most. Call counts do not depend on the machine or its load: two trees
compare by running this in each. The self time cProfile measures beside them is printed for
orientation only (profiling inflates it, and it moves with the load). Verified: every run answered
with the tool once and holds its 4 rows in order.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import tempfile
from collections import Counter
from pathlib import Path

from benchmarks._common import ROOT
from benchmarks.step_path import WARMUP, Contender, Tether

__all__ = ["group_of", "main", "profile_runs", "profiled"]


def group_of(filename: str) -> str:
    """Where a profiled function lives, from its ``filename``: an installed package by its name, the
    standard library's asyncio, the project's own package (``actors/_core``, ``stores``, ...),
    ``builtins and C methods`` (cProfile's ``~``), else ``other Python``."""
    if filename == "~":
        return "builtins and C methods"
    path = filename.replace("\\", "/")
    if "/site-packages/" in path:
        return path.split("/site-packages/", 1)[1].split("/", 1)[0]
    root = ROOT.as_posix().rstrip("/") + "/"
    if path.startswith(root):
        parts = path[len(root) :].split("/")
        if parts[0] == "actors" and len(parts) > 2:
            return f"actors/{parts[1]}"
        return parts[0].removesuffix(".py")
    if "/asyncio/" in path:
        return "asyncio"
    return "other Python"


async def _profiled(runs: int) -> pstats.Stats:
    with tempfile.TemporaryDirectory(prefix="tether-calls-") as tmp:
        contender = Tether("sqlite", Path(tmp))
        await contender.open("calls")
        try:
            return await profiled(contender, runs)
        finally:
            await contender.close()


async def profiled(contender: Contender, runs: int) -> pstats.Stats:
    """``contender``'s (opened) warm-up, then ``runs`` runs one after another under cProfile, then
    the check of those runs; the profile."""
    for i in range(WARMUP):
        await contender.one(f"warm-{i}")
    ids = [f"run-{i}" for i in range(runs)]
    profile = cProfile.Profile()
    profile.enable()
    try:
        for run_id in ids:
            await contender.one(run_id)
    finally:
        profile.disable()
    await contender.verify(ids)
    return pstats.Stats(profile)


def profile_runs(runs: int) -> tuple[Counter[str], Counter[str], Counter[str], int]:
    """Profile ``runs`` tether runs: calls per group, self seconds per group, calls per function
    (``file:line(name)``), and the event loop's iterations, all totals over the runs."""
    stats = asyncio.run(_profiled(runs))
    calls: Counter[str] = Counter()
    seconds: Counter[str] = Counter()
    functions: Counter[str] = Counter()
    iterations = 0
    for (filename, line, name), (_, ncalls, tottime, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        group = group_of(filename)
        calls[group] += ncalls
        seconds[group] += tottime
        where = name if filename == "~" else f"{_short(filename)}:{line}({name})"
        functions[where] += ncalls
        if name == "_run_once" and filename.endswith("base_events.py"):
            iterations += ncalls
    return calls, seconds, functions, iterations


def _short(filename: str) -> str:
    path = filename.replace("\\", "/")
    root = ROOT.as_posix().rstrip("/") + "/"
    if path.startswith(root):
        return path[len(root) :]
    for marker in ("/site-packages/", "/lib/python3."):
        if marker in path:
            tail = path.split(marker, 1)[1]
            return tail if marker == "/site-packages/" else tail.split("/", 1)[1]
    return path


def report(runs: int, top: int) -> None:
    calls, seconds, functions, iterations = profile_runs(runs)
    total = sum(calls.values())
    print(
        f"calls per tether run under cProfile, SQLite (WAL, synchronous=FULL): {runs} runs one after another"
    )
    header = f"{'where':<26}{'calls/run':>11}{'share':>8}{'self ms/run (profiled)':>25}"
    print(header)
    print("-" * len(header))
    for group, count in calls.most_common():
        print(f"{group:<26}{count / runs:>11,.1f}{count / total:>8.1%}{seconds[group] * 1000 / runs:>25.3f}")
    print(f"{'all':<26}{total / runs:>11,.1f}{1:>8.0%}{sum(seconds.values()) * 1000 / runs:>25.3f}")
    print(f"event-loop iterations per run: {iterations / runs:.1f}")
    print(f"the {top} functions called most, calls per run:")
    for where, count in functions.most_common(top):
        print(f"  {count / runs:>7.1f}  {where}")
    print("verified: every run answered with the tool once and holds its 4 rows in order")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300, help="profiled runs")
    parser.add_argument("--top", type=int, default=25, help="how many functions to list")
    parser.add_argument("--tiny", action="store_true", help="a fast smoke size for CI (5 runs)")
    args = parser.parse_args(argv)
    report(5 if args.tiny else args.runs, args.top)


if __name__ == "__main__":
    main()
