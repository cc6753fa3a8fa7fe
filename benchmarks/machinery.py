"""What the machinery a run is built from costs: instructions of one unit each, units per run.

    python -m benchmarks.machinery [--units 2000] [--runs 200] [--backend sqlite|postgres] [--tiny]

A run is an actor with its own task and mailbox; its waits are bounded and its clean-up shielded
with anyio's cancel scopes (which is what lets it run on trio too); a row's commit is a hop to the
store's writer thread and back (no blocking I/O on the event loop). This benchmark prices that
machinery on asyncio, apart from what the framework does with it:

- **instructions per unit**, each unit in a child process under ``valgrind --tool=callgrind``, once
  ``--units`` times and once twice as often (the difference divided by ``--units``, start-up
  cancelled out), beside an empty loop of as many passes (the raw counterpart: what it reads, a
  few hundred instructions either side of 0, is the count's noise):

  - *loop turn*: one iteration of the event loop running one callback (``await asyncio.sleep(0)``);
  - *task*: a task created, run to its end and awaited, less the two turns that takes;
  - *cancel scope*: anyio's, entered and left, with no deadline;
  - *deadline*: what a deadline adds to a scope that waits one turn (its timer armed and dropped);
  - *thread hop*: a job put to a worker thread and its answer back through
    ``call_soon_threadsafe``, less the turn that wakes the waiter;

- **units per run**, counted under :mod:`cProfile` (calls do not depend on the machine) over
  ``--runs`` runs one after another of :mod:`benchmarks.instructions`' store and tether contenders on
  SQLite or, with ``--backend postgres``, PostgreSQL (whose writes are round trips on the loop's
  own sockets, no thread hops): loop turns (``_run_once``), tasks (``create_task``), anyio cancel scopes (their
  ``__init__``), timers (``call_at``) and hops (the loop's wake-ups by another thread).

It prints each unit's instructions, its count per store and per tether run, and what the units
tether uses beyond the store cost per run: the floor under the framework's own instructions that
its structure sets before any of its logic runs (compare the framework's share printed by
:mod:`benchmarks.instructions`). ``--tiny`` runs each unit's child once without valgrind and
profiles 5 runs of each contender. Needs ``valgrind`` on ``PATH`` unless ``--tiny``.
"""

from __future__ import annotations

import argparse
import asyncio
import asyncio.selector_events
import queue
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from types import CodeType

import anyio

from benchmarks.calls import profiled
from benchmarks.instructions import BACKENDS, LABELS, callgrind_count, contender

__all__ = ["UNITS", "main", "unit_instructions", "units_per_run"]

#: The units, in the order printed: (name, label).
UNITS = (
    ("turn", "loop turn"),
    ("task", "task (beyond its 2 turns)"),
    ("scope", "anyio cancel scope"),
    ("deadline", "deadline (a timer)"),
    ("hop", "thread hop (beyond its turn)"),
)
#: What each unit's child runs; ``deadline`` and ``hop`` are counted less what they contain.
_CHILDREN = ("empty", "turn", "task", "scope", "scope-deadline", "hop")


async def _child(unit: str, passes: int) -> None:
    """``passes`` passes of ``unit``'s work on the running asyncio loop."""
    loop = asyncio.get_running_loop()
    scope_class = type(anyio.CancelScope())
    if unit == "empty":
        for _ in range(passes):
            pass
    elif unit == "turn":
        for _ in range(passes):
            await asyncio.sleep(0)
    elif unit == "task":

        async def nothing() -> None:
            pass

        for _ in range(passes):
            await loop.create_task(nothing())
    elif unit == "scope":
        for _ in range(passes):
            with scope_class():
                pass
    elif unit == "scope-deadline":
        for _ in range(passes):
            with scope_class(deadline=loop.time() + 60):
                await asyncio.sleep(0)
    elif unit == "hop":
        jobs: queue.SimpleQueue[asyncio.Future[None] | None] = queue.SimpleQueue()

        def worker() -> None:
            while (job := jobs.get()) is not None:
                loop.call_soon_threadsafe(job.set_result, None)

        thread = threading.Thread(target=worker)
        thread.start()
        try:
            for _ in range(passes):
                future = loop.create_future()
                jobs.put(future)
                await future
        finally:
            jobs.put(None)
            thread.join(timeout=10)
    else:
        raise ValueError(f"no unit {unit!r}")


def _child_command(unit: str, passes: int) -> list[str]:
    return [sys.executable, "-m", "benchmarks.machinery", "--child", unit, "--units", str(passes)]


def unit_instructions(passes: int) -> dict[str, float]:
    """Instructions of one pass of each of :data:`_CHILDREN` under callgrind: (count at
    ``2 * passes`` - count at ``passes``) / ``passes``."""
    per_pass: dict[str, float] = {}
    for unit in _CHILDREN:
        fewer = callgrind_count(_child_command(unit, passes), unit)
        more = callgrind_count(_child_command(unit, 2 * passes), unit)
        per_pass[unit] = (more - fewer) / passes
    turn = per_pass["turn"]
    return {
        "empty": per_pass["empty"],
        "turn": turn,
        "task": per_pass["task"] - 2 * turn,
        "scope": per_pass["scope"],
        "deadline": per_pass["scope-deadline"] - per_pass["scope"] - turn,
        "hop": per_pass["hop"] - turn,
    }


def _counted_code() -> dict[str, CodeType]:
    """The code whose calls count a unit (call on an asyncio loop: anyio's scope class is its own)."""
    loop_class = asyncio.BaseEventLoop
    return {
        "turn": loop_class._run_once.__code__,  # type: ignore[attr-defined]
        "task": loop_class.create_task.__code__,
        "scope": type(anyio.CancelScope()).__init__.__code__,
        "deadline": loop_class.call_at.__code__,
        # A hop's answer comes from another thread, which cProfile does not see: counted by the
        # loop's wake-ups through its self-pipe, one per answer when runs go one after another.
        "hop": asyncio.selector_events.BaseSelectorEventLoop._read_from_self.__code__,  # type: ignore[attr-defined]
    }


async def _profiled(name: str, runs: int, backend: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="tether-machinery-") as tmp:
        counted = await contender(name, backend, Path(tmp))
        await counted.open("machinery")
        try:
            profile = await profiled(counted, runs)
        finally:
            await counted.close()
    stats: dict[tuple[str, int, str], tuple[int, ...]] = profile.stats  # type: ignore[attr-defined]
    counts = {}
    for unit, code in _counted_code().items():
        found = stats.get((code.co_filename, code.co_firstlineno, code.co_name))
        counts[unit] = (found[1] if found else 0) / runs
    return counts


def units_per_run(runs: int, backend: str = "sqlite") -> dict[str, dict[str, float]]:
    """Per contender (``store``, ``tether``), each unit's calls per run over ``runs`` runs."""
    return {name: asyncio.run(_profiled(name, runs, backend)) for name in ("store", "tether")}


def report(
    instructions: dict[str, float] | None,
    counts: dict[str, dict[str, float]],
    passes: int,
    runs: int,
    backend: str = "sqlite",
) -> None:
    """Print the table; ``instructions`` ``None``: units not counted (``--tiny``)."""
    where = "not counted (--tiny)" if instructions is None else f"callgrind, {passes} and {2 * passes} passes"
    print(
        f"a run's machinery on asyncio: instructions per unit ({where}); units per run under cProfile, "
        f"{LABELS[backend]}: {runs} runs one after another"
    )
    header = f"{'unit':<30}{'instr/unit':>12}{'store/run':>11}{'tether/run':>12}{'tether-store':>14}{'instr/run':>12}"
    print(header)
    print("-" * len(header))
    floor = 0.0
    for unit, label in UNITS:
        store, tether = counts["store"][unit], counts["tether"][unit]
        extra = tether - store
        if instructions is None:
            cost, total = "-", "-"
        else:
            floor += extra * instructions[unit]
            cost, total = f"{instructions[unit]:,.0f}", f"{extra * instructions[unit]:,.0f}"
        print(f"{label:<30}{cost:>12}{store:>11.1f}{tether:>12.1f}{extra:>14.1f}{total:>12}")
    if instructions is not None:
        print(
            f"raw counterpart, an empty pass of a loop (the count's noise): {instructions['empty']:,.0f} instructions"
        )
        print(f"the units tether uses beyond the store: {floor:,.0f} instructions per run")
    print("verified: every run of both contenders holds its 4 rows in order")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=2000, help="passes of each unit per child")
    parser.add_argument("--runs", type=int, default=200, help="profiled runs per contender")
    parser.add_argument("--backend", choices=BACKENDS, default="sqlite", help="the store of the runs")
    parser.add_argument("--tiny", action="store_true", help="a fast smoke size for CI (no valgrind)")
    parser.add_argument("--child", choices=_CHILDREN, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        asyncio.run(_child(args.child, args.units))
        return
    if args.tiny:
        for unit in _CHILDREN:
            asyncio.run(_child(unit, 10))
        report(None, units_per_run(5, args.backend), 10, 5, args.backend)
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("benchmarks.machinery needs valgrind on PATH (Debian: apt-get install valgrind)")
    counts = units_per_run(args.runs, args.backend)
    report(unit_instructions(args.units), counts, args.units, args.runs, args.backend)


if __name__ == "__main__":
    main()
