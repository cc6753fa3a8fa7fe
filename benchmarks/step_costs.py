"""Where a step's time goes on SQLite: a tether run beside the store alone and the raw driver.

    python -m benchmarks.step_costs [--runs 300] [--concurrency 1] [--rounds 5] [--spawns] [--tiny]

Larger: ``--runs 2000 --rounds 7``; ``--concurrency 64`` splits the concurrent column the same way.
``--spawns`` splits step_path's spawns row instead: tether runs in batches of ``--concurrency`` (64
unless given), started by awaited ``spawn`` calls one after another or all at once, the same figures
for each and their ratios.

The small refund of :mod:`benchmarks.step_path` (4 rows a run), three ways, each measurement on a
fresh SQLite file (WAL, ``synchronous=FULL``), interleaved over ``--rounds`` rounds:

* raw: the same 4 row writes on aiosqlite with no framework (step_path's raw contender);
* store: the 4 rows a tether run writes (taken from one real run), appended with
  ``SQLiteStore.append`` one after another: no actors, no model, no tool;
* tether: the whole run through ``ActorSystem.spawn`` (step_path's tether contender).

Per run it prints runs/s and the ratio to raw, the CPU time of the event-loop thread
(``time.thread_time``), and for the two store contenders the writer thread's time inside its write
transactions and inside their ``COMMIT`` (timers wrapped around two methods of the store's
connection owner, ``stores.sqlite._writer.Connections``, in this process only). The differences
split a run: tether minus store is what the framework costs on the loop, store minus raw what the
store adds to the raw write. Verified while measuring: tether runs as in step_path (the answer, the
tool once, the 4 rows in order); store runs hold the same 4 rows in order, raw runs 4 rows each.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from actors import ActorSystem
from benchmarks._common import interleaved, median
from benchmarks.step_path import (
    EXPECTED_ROWS,
    PROMPT,
    SPAWNS_AT_ONCE,
    SPAWNS_AWAITED,
    Contender,
    RawSQLite,
    Tether,
    TetherSpawns,
    check_rows,
    refund_agent,
    timed_runs,
)
from stores import Checkpoint, SQLiteStore, Store, new_id, utcnow
from stores.lowlevel import sqlite_writer_module

# Time the writer thread spends in write transactions and in COMMIT, summed (see ``_instrument``).
_writer = {"transactions": 0.0, "commit": 0.0, "count": 0.0}


def _instrument() -> None:
    """Wrap the SQLite store's transaction and COMMIT with timers (this benchmark's process only)."""

    def timed(method: Callable[..., Any], key: str) -> Callable[..., Any]:
        @functools.wraps(method)
        def wrapper(*args: Any) -> Any:
            start = time.perf_counter()
            try:
                return method(*args)
            finally:
                _writer[key] += time.perf_counter() - start
                if key == "transactions":
                    _writer["count"] += 1

        return wrapper

    store: Any = sqlite_writer_module.Connections
    if not hasattr(store._run_batch_locked, "__wrapped__"):
        store._run_batch_locked = timed(store._run_batch_locked, "transactions")
        store._commit = timed(store._commit, "commit")


def _reset_writer() -> None:
    for key in _writer:
        _writer[key] = 0.0


class StoreOnly(Contender):
    """The 4 rows of a tether run appended with ``SQLiteStore.append``, with no framework."""

    name = "store"
    backend = "sqlite"
    tool_calls = 0  # the store alone runs no tool

    def __init__(self, workdir: Path, rows: list[Checkpoint]) -> None:
        self._workdir = workdir
        self._rows = rows
        self._store: Store | None = None

    def _open_store(self, tag: str) -> Store:
        return SQLiteStore(self._workdir / f"{tag}-store.db")

    async def open(self, tag: str) -> None:
        self._store = self._open_store(tag)
        await self._store.setup()

    async def one(self, run_id: str) -> None:
        assert self._store is not None
        for row in self._rows:
            await self._store.append(
                msgspec.structs.replace(row, execution_id=run_id, checkpoint_id=new_id(), created_at=utcnow())
            )

    async def verify(self, run_ids: list[str]) -> None:
        assert self._store is not None
        await check_rows(self.name, self._store.history, run_ids)

    async def close(self) -> None:
        if self._store is not None:
            await self._store.close()
            self._store = None


async def template_rows(workdir: Path) -> list[Checkpoint]:
    """The rows one real tether run of the small refund writes."""
    agent = refund_agent()
    async with SQLiteStore(workdir / "template.db") as store, ActorSystem(store, runners=[agent]) as system:
        ref = await system.spawn(agent, PROMPT, execution_id="template")
        result = await ref.result()
        assert result.status == "completed", result
        rows = await system.history("template")
    assert [row.node_id for row in rows] == EXPECTED_ROWS, rows
    return rows


class Sample(NamedTuple):
    """One measurement: runs/s and, per run, ms of loop CPU, of write transactions, of COMMIT."""

    rate: float
    loop_cpu: float
    transactions: float
    commit: float
    transactions_per_run: float


async def measure(contender: Contender, tag: str, runs: int, concurrency: int) -> Sample:
    """``runs`` runs on a fresh file with ``concurrency`` in flight, timed and split; verified."""
    timing = await timed_runs(contender, tag, runs, concurrency, before=_reset_writer)
    writer = dict(_writer)
    per_run = 1000 / runs
    return Sample(
        rate=runs / timing.wall,
        loop_cpu=timing.loop_cpu * per_run,
        transactions=writer["transactions"] * per_run,
        commit=writer["commit"] * per_run,
        transactions_per_run=writer["count"] / runs,
    )


async def run(runs: int, concurrency: int, rounds: int, *, spawns: bool = False) -> dict[str, Sample]:
    """Median of each figure per contender over interleaved rounds (``spawns``: the two ways of
    starting a batch of tether runs instead of raw, store and tether)."""
    _instrument()
    with tempfile.TemporaryDirectory(prefix="tether-costs-") as tmp:
        workdir = Path(tmp)
        contenders: list[Contender] = (
            [
                TetherSpawns("sqlite", workdir, awaited=True),
                TetherSpawns("sqlite", workdir, awaited=False),
            ]
            if spawns
            else [
                RawSQLite(workdir),
                StoreOnly(workdir, await template_rows(workdir)),
                Tether("sqlite", workdir),
            ]
        )
        samples: dict[str, list[Sample]] = {c.name: [] for c in contenders}
        counter = iter(range(1_000_000))
        measures: dict[str, Callable[[], Awaitable[float]]] = {}
        for contender in contenders:

            async def job(c: Contender = contender) -> float:
                sample = await measure(c, f"m{next(counter)}", runs, concurrency)
                samples[c.name].append(sample)
                return sample.rate

            measures[contender.name] = job
        await interleaved(rounds, measures)
    return {
        name: Sample(*(median(values) for values in zip(*got, strict=True))) for name, got in samples.items()
    }


def _table(results: dict[str, Sample], base: str, width: int = 10) -> None:
    """One line per contender: its figures, runs/s as a ratio to ``base``'s (raw's writer thread
    is not timed: its transaction columns are dashes)."""
    header = (
        f"{'contender':<{width}}{'runs/s':>10}{'x ' + base:>{max(8, len(base) + 3)}}{'wall ms/run':>13}"
        f"{'loop CPU ms/run':>17}{'write tx ms/run':>17}{'COMMIT ms/run':>15}{'tx/run':>8}"
    )
    print(header)
    print("-" * len(header))
    rate = results[base].rate
    for name, s in results.items():
        tx = (
            f"{s.transactions:>17.3f}{s.commit:>15.3f}{s.transactions_per_run:>8.2f}"
            if name != "raw"
            else f"{'-':>17}{'-':>15}{'-':>8}"
        )
        ratio = f"{s.rate / rate:.2f}x"
        print(
            f"{name:<{width}}{s.rate:>10,.0f}{ratio:>{max(8, len(base) + 3)}}{1000 / s.rate:>13.3f}"
            f"{s.loop_cpu:>17.3f}{tx}"
        )


def report(results: dict[str, Sample], runs: int, concurrency: int, rounds: int) -> None:
    mode = "one after another" if concurrency <= 1 else f"{concurrency} in flight"
    print(
        f"step costs, SQLite (WAL, synchronous=FULL): {runs} runs {mode}, medians of {rounds} interleaved rounds"
    )
    _table(results, "raw")
    raw = results["raw"]
    tether, store = results["tether"], results["store"]
    print(
        f"loop CPU per run: framework (tether - store) {tether.loop_cpu - store.loop_cpu:.3f} ms, "
        f"store over raw (store - raw) {store.loop_cpu - raw.loop_cpu:.3f} ms, raw {raw.loop_cpu:.3f} ms"
    )
    if concurrency <= 1:
        rest = 1000 / tether.rate - tether.loop_cpu - tether.transactions
        print(
            f"a tether run, one after another: {1000 / tether.rate:.3f} ms = loop CPU {tether.loop_cpu:.3f} "
            f"+ writer transactions {tether.transactions:.3f} (COMMIT {tether.commit:.3f}) "
            f"+ the rest {rest:.3f} (thread hops, wake-ups, the loop waiting on other work)"
        )
    print(
        "verified: tether runs answered with the tool once; tether and store runs hold their 4 rows in "
        "order, raw runs 4 rows"
    )


def report_spawns(results: dict[str, Sample], runs: int, concurrency: int, rounds: int) -> None:
    print(
        f"step costs of spawns, SQLite (WAL, synchronous=FULL): {runs} tether runs in batches of "
        f"{concurrency}, medians of {rounds} interleaved rounds"
    )
    _table(results, SPAWNS_AT_ONCE, width=24)
    awaited, at_once = results[SPAWNS_AWAITED], results[SPAWNS_AT_ONCE]
    print(
        f"awaited spawns over spawns at once: runs/s {awaited.rate / at_once.rate:.2f}x, loop CPU per run "
        f"{awaited.loop_cpu / at_once.loop_cpu:.2f}x, write transactions per run "
        f"{awaited.transactions_per_run / at_once.transactions_per_run:.2f}x"
    )
    print("verified: tether runs answered with the tool once and hold their 4 rows in order")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300, help="runs per measurement")
    parser.add_argument("--concurrency", type=int, default=1, help="runs in flight (1: one after another)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (median over them)")
    parser.add_argument("--spawns", action="store_true", help="awaited spawns against spawns at once")
    parser.add_argument("--tiny", action="store_true", help="a fast smoke size for CI")
    args = parser.parse_args(argv)
    rounds = 3 if args.tiny else args.rounds
    if args.spawns:
        concurrency = 4 if args.tiny else (args.concurrency if args.concurrency > 1 else 64)
        runs = 8 if args.tiny else args.runs
        results = asyncio.run(run(runs, concurrency, rounds, spawns=True))
        report_spawns(results, runs, concurrency, rounds)
        return
    runs = 10 if args.tiny else args.runs
    results = asyncio.run(run(runs, args.concurrency, rounds))
    report(results, runs, args.concurrency, rounds)


if __name__ == "__main__":
    main()
