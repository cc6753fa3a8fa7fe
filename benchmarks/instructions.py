"""Instructions per run under callgrind: a deterministic split of a run, for A/B on a busy machine.

    python -m benchmarks.instructions [--runs 100] [--backend sqlite|postgres] [--spawns] [--tiny]

The contenders of :mod:`benchmarks.step_costs` (the small refund's 4 rows a run): raw (the driver,
no framework: step_path's raw contender), store (the store's ``append`` of a real run's 4 rows) and
tether (the whole run through ``ActorSystem.spawn``), on SQLite (WAL, ``synchronous=FULL``;
aiosqlite, ``SQLiteStore``) or, with ``--backend postgres``, PostgreSQL (``synchronous_commit=on``;
asyncpg, ``PostgresStore``, each on a fresh schema; :data:`benchmarks._common.PG_DSN`). Each runs
in a child process under ``valgrind --tool=callgrind``, twice: with ``--runs`` runs and with twice
as many, one after another on a fresh database after the same warm-up, each child checking
``--runs`` of its runs; the difference divided by ``--runs`` is the instructions one run costs,
every thread of the process counted (the SQLite writer thread's work too), start-up, warm-up and
the check cancelled out. On PostgreSQL only the client process is counted: the server is another
process, so its work on the statements is not in the figures. Valgrind counts instructions, not time: the same tree gives the same figure whatever else the
machine runs, so two trees can be compared on a shared machine where timings move several-fold.
It prints each contender's instructions per run and its ratio to raw, and the split of
:mod:`benchmarks.step_costs`: framework (tether minus store), store over raw. Compare trees by
running it in each. Verified in every child: tether runs answered with the tool once, and the checked
runs hold their 4 rows in order (raw: its whole table). Needs ``valgrind`` on ``PATH``; a run is ~50x slower
under it (``--tiny``: tether alone, 2 runs). ``--spawns`` counts step_path's spawns row instead:
tether runs in batches of 64 (``--runs`` 128 unless given, a multiple of 64), started by awaited
``spawn`` calls one after another or all at once, each child's warm-up one batch.

``--against REV --cpu`` measures the same A/B as process CPU instead (user and system time of each
child, every thread, as the kernel accounts it, without valgrind): what the target names, on a
machine whose load moves it; ``--rounds`` rounds (5) interleave the trees, and it prints medians.

``--against REV`` is the A/B of two trees: this tree's tether and the tree at git revision ``REV``
(extracted with ``git archive`` into a temporary folder, its own benchmark's child run there) are
counted side by side, half the runs one after another (``--runs``) and half 64 at a time (spawned
at once, in batches of 64), and it prints each mode's ratio and the ratio over both halves.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks._common import PG_DSN
from benchmarks.step_costs import StoreOnly, template_rows
from benchmarks.step_path import (
    WARMUP,
    Contender,
    RawPostgres,
    RawSQLite,
    Tether,
    TetherSpawns,
    _drop_schema,
)
from stores import Checkpoint, PostgresStore, Store

__all__ = [
    "BACKENDS",
    "CONTENDERS",
    "LABELS",
    "against",
    "against_cpu",
    "callgrind_count",
    "contender",
    "instructions_per_run",
    "main",
]

CONTENDERS = ("raw", "store", "tether")
#: ``--spawns``: tether runs started in batches by awaited spawn calls, or by spawns all at once.
SPAWNS = ("awaited-spawns", "spawns-at-once")
#: Counted runs per child unless ``--runs`` says (``--spawns``: two batches).
RUNS = 100
#: Runs a batch of ``--spawns`` (``--tiny``: 4).
BATCH = 64
BACKENDS = ("sqlite", "postgres")
_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")
LABELS = {
    "sqlite": "SQLite (WAL, synchronous=FULL)",
    "postgres": "PostgreSQL (synchronous_commit=on), the client process only (the server is not counted)",
}


class StoreOnlyPostgres(StoreOnly):
    """step_costs' store contender on PostgreSQL: the 4 rows of a tether run appended with
    ``PostgresStore.append`` on a fresh schema, with no framework."""

    backend = "postgres"
    SCHEMA = f"bench_instr_store_{os.getpid()}"  # per process: runs may overlap

    def __init__(self, rows: list[Checkpoint]) -> None:
        super().__init__(Path(), rows)

    def _open_store(self, tag: str) -> Store:
        return PostgresStore(PG_DSN, schema=self.SCHEMA)

    async def open(self, tag: str) -> None:
        await _drop_schema(self.SCHEMA)
        await super().open(tag)

    async def close(self) -> None:
        await super().close()
        await _drop_schema(self.SCHEMA)


async def contender(name: str, backend: str, workdir: Path) -> Contender:
    """The contender ``name`` (:data:`CONTENDERS`, :data:`SPAWNS`) on ``backend``, its files in ``workdir``."""
    if name == "raw":
        return RawSQLite(workdir) if backend == "sqlite" else RawPostgres(1)
    if name == "store":
        rows = await template_rows(workdir)  # a run's rows, whatever store wrote them
        return StoreOnly(workdir, rows) if backend == "sqlite" else StoreOnlyPostgres(rows)
    if name in SPAWNS:
        return TetherSpawns(backend, workdir, awaited=name == "awaited-spawns")
    return Tether(backend, workdir)


async def _child(name: str, backend: str, runs: int, verified: int, batch: int) -> None:
    """The work one valgrind child counts: warm-up, ``runs`` runs (a batched contender's in
    batches of ``batch``), then the check of the last ``verified`` of them (raw checks its whole
    table in one query)."""
    with tempfile.TemporaryDirectory(prefix="tether-instr-") as tmp:
        counted = await contender(name, backend, Path(tmp))
        await counted.open("counted")
        try:
            # The warm-up runs first: both counts include them, so they cancel out.
            ids = [f"run-{i}" for i in range(runs)]
            if counted.batched:
                await counted.batch([f"warm-{i}" for i in range(batch)])
                for first in range(0, runs, batch):
                    await counted.batch(ids[first : first + batch])
            else:
                for i in range(WARMUP):
                    await counted.one(f"warm-{i}")
                for run_id in ids:
                    await counted.one(run_id)
            await counted.verify(ids if name == "raw" else ids[len(ids) - verified :])
        finally:
            await counted.close()


def _child_command(name: str, backend: str, runs: int, verified: int, batch: int) -> list[str]:
    """The command of a child doing the warm-up and ``runs`` runs of ``name``, checking ``verified``."""
    command = [sys.executable, "-m", "benchmarks.instructions", "--child", name, "--backend", backend]
    command.extend(("--runs", str(runs), "--verified", str(verified), "--batch", str(batch)))
    return command


def _count(name: str, backend: str, runs: int, verified: int, batch: int, tree: Path | None = None) -> int:
    """Instructions of one child doing the warm-up and ``runs`` runs of ``name`` on ``backend``,
    checking ``verified``; with ``tree``, the child is that tree's benchmark, run in it."""
    return callgrind_count(_child_command(name, backend, runs, verified, batch), name, tree)


def callgrind_count(command: list[str], what: str, tree: Path | None = None) -> int:
    """Instructions of ``command`` (a Python child, every thread) under ``valgrind --tool=callgrind``;
    with ``tree``, run in that tree with it on ``PYTHONPATH``."""
    result = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *command],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
        cwd=tree,
        env=None if tree is None else {**os.environ, "PYTHONPATH": str(tree)},
    )
    found = _COLLECTED.search(result.stderr)
    if result.returncode != 0 or found is None:
        raise RuntimeError(f"{what} under callgrind failed ({result.returncode}):\n{result.stderr[-2000:]}")
    return int(found.group(1))


def instructions_per_run(
    name: str, runs: int, backend: str = "sqlite", batch: int = BATCH, tree: Path | None = None
) -> float:
    """(instructions with ``2 * runs`` runs - instructions with ``runs``) / ``runs``: both children
    check ``runs`` runs (every run of the first, the last half of the second), so the check's own
    reads cancel out with the start-up and the warm-up. The two children run side by side: each
    counts its own instructions, so running them at once changes no count, only the wall time."""
    _compile(tree)
    with ThreadPoolExecutor(max_workers=2) as pool:
        more = pool.submit(_count, name, backend, 2 * runs, runs, batch, tree)
        fewer = pool.submit(_count, name, backend, runs, runs, batch, tree)
        return (more.result() - fewer.result()) / runs


def _mode_runs(name: str, runs: int, batch: int) -> int:
    """The runs an A/B half counts: ``runs`` one after another, whole batches 64 at a time."""
    return runs if name == "tether" else max(batch, runs - runs % batch)


def _cpu_seconds(name: str, backend: str, runs: int, batch: int, tree: Path | None) -> float:
    """Process CPU (user + system, every thread) of one child doing the warm-up and ``runs`` runs."""
    with tempfile.TemporaryFile() as errors:
        child = subprocess.Popen(
            _child_command(name, backend, runs, min(runs, RUNS), batch),
            stdout=subprocess.DEVNULL,
            stderr=errors,
            cwd=tree,
            env=None if tree is None else {**os.environ, "PYTHONPATH": str(tree)},
        )
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            errors.seek(0)
            tail = errors.read().decode(errors="replace")[-2000:]
            raise RuntimeError(f"{name} failed ({child.returncode}):\n{tail}")
    return usage.ru_utime + usage.ru_stime


def against_cpu(
    revision: str, runs: int, backend: str, rounds: int, batch: int = BATCH
) -> dict[str, tuple[float, float]]:
    """Per mode, (this tree's, ``revision``'s) median process CPU seconds per tether run over
    ``rounds`` interleaved rounds, each ``(CPU with 2 * runs - CPU with runs) / runs``."""
    samples: dict[str, tuple[list[float], list[float]]] = {mode: ([], []) for mode, _ in AB_MODES}
    with other_tree(revision) as tree:
        _compile(None)
        _compile(tree)
        for _ in range(rounds):
            for mode, name in AB_MODES:
                mode_runs = _mode_runs(name, runs, batch)
                for side, where in zip(samples[mode], (None, tree), strict=True):
                    fewer = _cpu_seconds(name, backend, mode_runs, batch, where)
                    more = _cpu_seconds(name, backend, 2 * mode_runs, batch, where)
                    side.append((more - fewer) / mode_runs)
    return {
        mode: (statistics.median(ours), statistics.median(theirs)) for mode, (ours, theirs) in samples.items()
    }


def _compile(tree: Path | None) -> None:
    """Write the bytecode of every module of the tree first: a child that found none would compile
    what it imports (tens of millions of instructions), and which of two children side by side
    does so, or both, depends on which imports first, which no subtraction cancels out."""
    root = tree if tree is not None else Path(__file__).resolve().parent.parent
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", "-x", r"/\.(venv|git)/", str(root)],
        capture_output=True,
        timeout=600,
        check=True,
    )


def report(counts: dict[str, float], runs: int, backend: str = "sqlite") -> None:
    print(f"instructions per run under callgrind, {LABELS[backend]}: {runs} runs one after another")
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


def report_spawns(counts: dict[str, float], runs: int, batch: int, backend: str = "sqlite") -> None:
    print(
        f"instructions per tether run under callgrind, {LABELS[backend]}: {runs} runs in batches of {batch}"
    )
    header = f"{'contender':<16}{'instructions/run':>18}"
    print(header)
    print("-" * len(header))
    for name, count in counts.items():
        print(f"{name:<16}{count:>18,.0f}")
    awaited, at_once = counts["awaited-spawns"], counts["spawns-at-once"]
    print(f"awaited spawns over spawns at once: {awaited / at_once:.2f}x the instructions per run")
    print("verified: tether runs answered with the tool once and hold their 4 rows in order")


#: ``--against``: the two halves of the runs, one after another and 64 at a time.
AB_MODES = (("one after another", "tether"), ("64 at a time", "spawns-at-once"))
#: ``--against``: the most this tree may cost per run, as a share of the other tree, per backend.
AB_TARGETS = {"sqlite": 0.6, "postgres": 0.7}


@contextlib.contextmanager
def other_tree(revision: str) -> Iterator[Path]:
    """The project's tree at git ``revision``, extracted into a temporary folder."""
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="tether-against-") as tmp:
        archive = subprocess.run(
            ["git", "-C", str(root), "archive", "--format=tar", revision],
            capture_output=True,
            timeout=120,
            check=False,
        )
        if archive.returncode != 0:
            detail = archive.stderr.decode(errors="replace").strip()
            raise SystemExit(f"--against {revision}: git archive failed: {detail}")
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, timeout=120, check=True)
        yield Path(tmp)


def against(revision: str, runs: int, backend: str, batch: int = BATCH) -> dict[str, tuple[float, float]]:
    """Per mode, (this tree's, ``revision``'s) instructions per tether run."""
    counts: dict[str, tuple[float, float]] = {}
    with other_tree(revision) as tree:
        for mode, name in AB_MODES:
            mode_runs = _mode_runs(name, runs, batch)
            ours = instructions_per_run(name, mode_runs, backend, batch)
            theirs = instructions_per_run(name, mode_runs, backend, batch, tree)
            counts[mode] = (ours, theirs)
    return counts


def report_against(
    counts: dict[str, tuple[float, float]], revision: str, backend: str = "sqlite", rounds: int = 0
) -> None:
    """Print the A/B: instructions per run, or (``rounds``: from :func:`against_cpu`) process CPU."""
    if rounds:
        what, figure = "process CPU (user + system, ms)", "{:>14,.3f}"
        print(
            f"process CPU per tether run, medians of {rounds} rounds, {LABELS[backend]}: this tree against {revision}"
        )
        counts = {mode: (ours * 1000, theirs * 1000) for mode, (ours, theirs) in counts.items()}
    else:
        what, figure = "instructions", "{:>14,.0f}"
        print(f"instructions per tether run under callgrind, {LABELS[backend]}: this tree against {revision}")
    header = f"{'mode':<20}{'this tree':>14}{revision[:12]:>14}{'ratio':>8}"
    print(header)
    print("-" * len(header))
    for mode, (ours, theirs) in counts.items():
        print(f"{mode:<20}{figure.format(ours)}{figure.format(theirs)}{ours / theirs:>7.2f}x")
    ours_total = sum(ours for ours, _ in counts.values())
    theirs_total = sum(theirs for _, theirs in counts.values())
    ratio = ours_total / theirs_total
    halves = len(counts)
    print(
        f"{'both halves':<20}{figure.format(ours_total / halves)}{figure.format(theirs_total / halves)}{ratio:>7.2f}x"
    )
    target = AB_TARGETS[backend]
    verdict = "PASS" if ratio <= target else "MISS"
    print(f"target: this tree at most {target:.1f}x the {what} per run of {revision}: {verdict}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, help="counted runs per child (100; --spawns: 128)")
    parser.add_argument("--backend", choices=BACKENDS, default="sqlite", help="the store and driver")
    parser.add_argument("--spawns", action="store_true", help="awaited spawns against spawns at once")
    parser.add_argument("--tiny", action="store_true", help="a fast smoke size for CI (tether, 2 runs)")
    parser.add_argument("--against", metavar="REV", help="A/B: this tree against the tree at git REV")
    parser.add_argument("--cpu", action="store_true", help="--against as process CPU, without valgrind")
    parser.add_argument("--rounds", type=int, default=5, help="--cpu: interleaved rounds (5)")
    parser.add_argument("--child", choices=CONTENDERS + SPAWNS, help=argparse.SUPPRESS)
    parser.add_argument("--verified", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=BATCH, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        asyncio.run(_child(args.child, args.backend, args.runs or RUNS, args.verified, args.batch))
        return
    if args.against is not None and args.cpu:
        batch = 4 if args.tiny else BATCH
        runs = batch if args.tiny else (args.runs or RUNS)
        rounds = 1 if args.tiny else args.rounds
        report_against(
            against_cpu(args.against, runs, args.backend, rounds, batch), args.against, args.backend, rounds
        )
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("benchmarks.instructions needs valgrind on PATH (Debian: apt-get install valgrind)")
    if args.against is not None:
        batch = 4 if args.tiny else BATCH
        runs = batch if args.tiny else (args.runs or RUNS)
        report_against(against(args.against, runs, args.backend, batch), args.against, args.backend)
        return
    if args.spawns:
        batch = 4 if args.tiny else BATCH
        runs = batch if args.tiny else (args.runs or 2 * BATCH)
        if runs % batch:
            parser.error(f"--spawns counts whole batches: --runs must be a multiple of {batch}")
        spawns = {name: instructions_per_run(name, runs, args.backend, batch) for name in SPAWNS}
        report_spawns(spawns, runs, batch, args.backend)
        return
    names, runs = (("tether",), 2) if args.tiny else (CONTENDERS, args.runs or RUNS)
    counts = {name: instructions_per_run(name, runs, args.backend) for name in names}
    report(counts, runs, args.backend)


if __name__ == "__main__":
    main()
