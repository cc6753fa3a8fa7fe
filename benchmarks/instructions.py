"""Instructions per run under callgrind: a deterministic split of a SQLite run, for A/B on a busy machine.

    python -m benchmarks.instructions [--runs 100] [--tiny]

The contenders of :mod:`benchmarks.step_costs` (the small refund's 4 rows a run on SQLite, WAL,
``synchronous=FULL``): raw (aiosqlite, no framework), store (``SQLiteStore.append`` of a real run's
4 rows) and tether (the whole run through ``ActorSystem.spawn``). Each runs in a child process
under ``valgrind --tool=callgrind``, twice: with no timed run and with ``--runs`` of them, one after
another on a fresh file after the same warm-up; the difference divided by ``--runs`` is the
instructions one run costs, every thread of the process counted (the writer thread's SQLite work
too). Valgrind counts instructions, not time: the same tree gives the same figure whatever else the
machine runs, so two trees can be compared on a shared machine where timings move several-fold.
It prints each contender's instructions per run and its ratio to raw, and the split of
:mod:`benchmarks.step_costs`: framework (tether minus store), store over raw. Compare trees by
running it in each. Verified in every child: tether runs answered with the tool once, and every
contender's runs hold their 4 rows in order. Needs ``valgrind`` on ``PATH``; a run is ~50x slower
under it (``--tiny``: tether alone, 2 runs).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.step_path import WARMUP, Contender, RawSQLite, Tether

__all__ = ["CONTENDERS", "instructions_per_run", "main"]

CONTENDERS = ("raw", "store", "tether")
_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


async def _contender(name: str, workdir: Path) -> Contender:
    if name == "raw":
        return RawSQLite(workdir)
    if name == "store":
        from benchmarks.step_costs import StoreOnly, template_rows

        return StoreOnly(workdir, await template_rows(workdir))
    return Tether("sqlite", workdir)


async def _child(name: str, runs: int) -> None:
    """The work one valgrind child counts: warm-up, then ``runs`` runs, then their check."""
    with tempfile.TemporaryDirectory(prefix="tether-instr-") as tmp:
        contender = await _contender(name, Path(tmp))
        await contender.open("counted")
        try:
            # step_path's warm-up runs first: both counts include them, so they cancel out.
            for i in range(WARMUP):
                await contender.one(f"warm-{i}")
            ids = [f"run-{i}" for i in range(runs)]
            for run_id in ids:
                await contender.one(run_id)
            await contender.verify(ids)
        finally:
            await contender.close()


def _count(name: str, runs: int) -> int:
    """Instructions of one child doing the warm-up and ``runs`` runs of ``name``."""
    result = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            "-m",
            "benchmarks.instructions",
            "--child",
            name,
            "--runs",
            str(runs),
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    found = _COLLECTED.search(result.stderr)
    if result.returncode != 0 or found is None:
        raise RuntimeError(f"{name} under callgrind failed ({result.returncode}):\n{result.stderr[-2000:]}")
    return int(found.group(1))


def instructions_per_run(name: str, runs: int) -> float:
    """(instructions with ``runs`` runs - instructions with none) / ``runs``."""
    return (_count(name, runs) - _count(name, 0)) / runs


def report(counts: dict[str, float], runs: int) -> None:
    print(
        f"instructions per run under callgrind, SQLite (WAL, synchronous=FULL): {runs} runs one after another"
    )
    header = f"{'contender':<10}{'instructions/run':>18}{'x raw':>8}"
    print(header)
    print("-" * len(header))
    raw = counts.get("raw")
    for name, count in counts.items():
        ratio = f"{count / raw:>7.2f}x" if raw else f"{'-':>8}"
        print(f"{name:<10}{count:>18,.0f}{ratio}")
    if "store" in counts and "tether" in counts:
        split = f"framework (tether - store) {counts['tether'] - counts['store']:,.0f}"
        if raw:
            split += f", store over raw (store - raw) {counts['store'] - raw:,.0f}, raw {raw:,.0f}"
        print(f"instructions per run: {split}")
    print(
        "verified: tether runs answered with the tool once; every contender's runs hold their 4 rows in order"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100, help="counted runs per child")
    parser.add_argument("--tiny", action="store_true", help="a fast smoke size for CI (tether, 2 runs)")
    parser.add_argument("--child", choices=CONTENDERS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        asyncio.run(_child(args.child, args.runs))
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("benchmarks.instructions needs valgrind on PATH (Debian: apt-get install valgrind)")
    names, runs = (("tether",), 2) if args.tiny else (CONTENDERS, args.runs)
    report({name: instructions_per_run(name, runs) for name in names}, runs)


if __name__ == "__main__":
    main()
