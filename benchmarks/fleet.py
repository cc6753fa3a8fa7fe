"""The fleet: queue throughput with worker processes, SIGKILL-to-recovery time, and finding work
among many resting runs.

    python -m benchmarks.fleet [--runs 200] [--backend sqlite|postgres] [--resting 1000,100000] [--tiny]
    python -m benchmarks.fleet --queues [--runs 200] [--backend sqlite|postgres] [--tiny]

The work is a small refund: an offline model asks for ``refund(order)``, the tool runs (a sync
tool in a worker thread) and the run answers (3 step rows and ``run_end``). Each measurement uses
a fresh database (SQLite: WAL, ``synchronous=FULL``; PostgreSQL: a fresh schema).

* throughput: ``--runs`` runs spawned at once in one process, against the same runs enqueued and
  then driven by 2 and 4 worker processes (``system.serve(concurrency=16, poll=0.05)``), timed from
  the workers' start signal until every run has its ``run_end``; runs/s;
* recovery: 2 workers with a tool that takes 0.5 s; one is SIGKILLed once half the runs are inside their tool;
  the time from the kill to each of its runs' ``recover`` row in the survivor (min, median, max);
* finding work: with 1,000 and 100,000 resting runs (completed, written straight into the table),
  the median time of an idle ``system.sweep()`` (finding no work) and of ``spawn`` to ``result()``
  of one run; the target is the larger store within 1.3x of the smaller one.

Every run is verified (one ``run_end``, completed, the tool's charge once per run).

With ``--queues``: the take rate of a queue with every limit set against a queue with none, and the
statements each take sends (``benchmarks/_queues.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

import anyio
import asyncpg

from actors import ActorSystem, Agent, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from benchmarks._common import PG_DSN, median
from benchmarks._queues import report, take_rates
from stores import RECOVER, RUN_END, TOOL_CALL, PostgresStore, SQLiteStore, Store

TARGET = 1.3
#: How long the tool of the recovery measurement runs (s): every run is mid-tool when a worker is killed.
_KILL_PAUSE = 1.0
ROOT = Path(__file__).resolve().parents[1]


def refund_agent(pause: float = 0.0) -> Agent:
    """The small refund (a sync tool that sleeps ``pause`` seconds)."""

    @tool
    def refund(order: str) -> str:
        """Refund an order."""
        time.sleep(pause)
        return f"refunded {order}"

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"done: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("refund", {"order": messages[-1].content})])

    return Agent("bench-refund", FunctionModel(model), tools=[refund])


class Where:
    """A fresh database of one backend: ``open()`` a store on it; ``child`` names it to a process."""

    def __init__(self, backend: str, folder: Path) -> None:
        self.backend = backend
        self.target = str(folder / f"{uuid.uuid4().hex}.db") if backend == "sqlite" else PG_DSN
        self.schema = f"bench_fleet_{uuid.uuid4().hex[:12]}"

    def open(self) -> Store:
        if self.backend == "sqlite":
            return SQLiteStore(self.target)
        return PostgresStore(self.target, schema=self.schema)

    @property
    def child(self) -> list[str]:
        return [self.backend, self.target, self.schema]

    async def drop(self) -> None:
        if self.backend == "postgres":
            conn = await asyncpg.connect(PG_DSN)
            try:
                await conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')
            finally:
                await conn.close()


@asynccontextmanager
async def fresh(backend: str, folder: Path) -> AsyncIterator[Where]:
    where = Where(backend, folder)
    try:
        yield where
    finally:
        await where.drop()


async def _all_ended(store: Store, ids: list[str]) -> bool:
    for eid in ids:
        newest = await store.latest(eid)
        if newest is None or newest.step_type != RUN_END:
            return False
    return True


async def _mid_tool(store: Store, ids: list[str]) -> int:
    """How many of the runs are inside their tool (their newest row is its ``tool_call`` row)."""
    count = 0
    for eid in ids:
        newest = await store.latest(eid)
        count += newest is not None and newest.step_type == TOOL_CALL
    return count


async def _verify(store: Store, ids: list[str]) -> None:
    for eid in ids:
        rows = await store.history(eid)
        ends = [r for r in rows if r.step_type == RUN_END]
        assert len(ends) == 1 and ends[0].status == "completed", (eid, [r.node_id for r in rows])
        assert ends[0].state_snapshot["output"] == f"done: refunded {eid}", ends[0].state_snapshot


async def spawned(where: Where, runs: int) -> float:
    """Runs/s of ``runs`` runs spawned at once in one process."""
    runner = refund_agent()
    ids = [f"s{i}" for i in range(runs)]
    async with where.open() as store, ActorSystem(store, runners=[runner]) as system:
        start = time.perf_counter()
        refs = [await system.spawn(runner, eid, execution_id=eid) for eid in ids]
        for ref in refs:
            assert (await ref.result()).status == "completed"
        elapsed = time.perf_counter() - start
        await _verify(store, ids)
    return runs / elapsed


def _worker(where: Where, go: Path, pause: float, concurrency: int = 16) -> list[str]:
    return [
        sys.executable,
        "-m",
        "benchmarks.fleet",
        "--serve",
        *where.child,
        str(go),
        str(pause),
        str(concurrency),
    ]


async def through_workers(where: Where, runs: int, workers: int, folder: Path) -> float:
    """Runs/s of ``runs`` enqueued runs driven by ``workers`` worker processes."""
    runner = refund_agent()
    ids = [f"q{i}" for i in range(runs)]
    go = folder / f"go-{uuid.uuid4().hex}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    async with where.open() as store:
        async with ActorSystem(store, runners=[runner]) as system:
            for eid in ids:
                await system.enqueue(runner, eid, execution_id=eid)
        procs = [await anyio.open_process(_worker(where, go, 0.0), env=env) for _ in range(workers)]
        try:
            for proc in procs:
                assert proc.stdout is not None
                await proc.stdout.receive()  # "ready"
            start = time.perf_counter()
            go.touch()
            while not await _all_ended(store, ids):  # noqa: ASYNC110 (other processes write them)
                await anyio.sleep(0.01)
            elapsed = time.perf_counter() - start
        finally:
            for proc in procs:
                proc.kill()
                await proc.wait()
        await _verify(store, ids)
    return runs / elapsed


async def recovery(where: Where, runs: int, folder: Path) -> list[float]:
    """Seconds from a worker's SIGKILL to each of its runs' ``recover`` row in the other worker."""
    runner = refund_agent(_KILL_PAUSE)
    ids = [f"k{i}" for i in range(runs)]
    go = [folder / f"go-{uuid.uuid4().hex}" for _ in range(2)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    async with where.open() as store:
        async with ActorSystem(store, runners=[runner]) as system:
            for eid in ids:
                await system.enqueue(runner, eid, execution_id=eid)
        # The worker to be killed takes half the runs first; the survivor takes the rest and keeps room
        # for the killed one's runs, so its takeover does not wait for a free slot.
        half = max(1, runs // 2)
        procs = [
            await anyio.open_process(_worker(where, go[0], _KILL_PAUSE, half), env=env),
            await anyio.open_process(_worker(where, go[1], _KILL_PAUSE, 2 * runs), env=env),
        ]
        try:
            for proc in procs:
                assert proc.stdout is not None
                await proc.stdout.receive()
            go[0].touch()
            with anyio.move_on_after(30):  # bounded: the kill goes ahead whatever was taken
                while await _mid_tool(store, ids) < half:  # noqa: ASYNC110 (the workers write them)
                    await anyio.sleep(0.005)
                go[1].touch()
                while await _mid_tool(store, ids) < runs:  # noqa: ASYNC110 (the workers write them)
                    await anyio.sleep(0.005)
            go[1].touch()
            procs[0].send_signal(signal.SIGKILL)
            killed = datetime.now(UTC)
            await procs[0].wait()
            while not await _all_ended(store, ids):  # noqa: ASYNC110 (other processes write them)
                await anyio.sleep(0.01)
        finally:
            for proc in procs:
                if proc.returncode is None:
                    proc.kill()
                await proc.wait()
        await _verify(store, ids)
        times = []
        for eid in ids:
            rows = await store.history(eid)
            before = [r for r in rows if r.created_at <= killed]
            after = [r for r in rows if r.step_type == RECOVER and r.created_at > killed]
            if after and before and before[-1].step_type == TOOL_CALL:  # mid-tool at the kill
                times.append((after[0].created_at - killed).total_seconds())
    return sorted(times)


async def _rest(where: Where, count: int) -> None:
    """``count`` completed runs (one ``run_end`` row each), written straight into the table."""
    async with where.open() as store:
        await store.setup()
    now = datetime.now(UTC)
    if where.backend == "sqlite":
        import sqlite3

        conn = sqlite3.connect(where.target)
        with conn:
            conn.executemany(
                "INSERT INTO checkpoints (checkpoint_id, execution_id, seq, runner, node_id, step_index, "
                "step_type, status, state_snapshot, node_input, node_output, interrupt_context, created_at) "
                "VALUES (?, ?, 0, 'bench-refund', 'run_end', 0, 'run_end', 'completed', '{}', '{}', 'null', "
                "'{}', ?)",
                [
                    (uuid.uuid4().hex, f"rest-{i}", now.isoformat(timespec="microseconds"))
                    for i in range(count)
                ],
            )
        conn.close()
        return
    conn = await asyncpg.connect(PG_DSN)
    try:
        await conn.execute(
            f'INSERT INTO "{where.schema}".checkpoints (checkpoint_id, execution_id, seq, runner, node_id, '
            "step_index, step_type, status, state_snapshot, node_input, node_output, interrupt_context, "
            "created_at) SELECT md5(i::text || random()::text), 'rest-' || i, 0, 'bench-refund', 'run_end', "
            "0, 'run_end', 'completed', '{}', '{}', 'null', '{}', now() FROM generate_series(1, $1) AS i",
            count,
        )
        await conn.execute(f'ANALYZE "{where.schema}".checkpoints')
    finally:
        await conn.close()


async def finding_work(where: Where, resting: int, samples: int) -> tuple[float, float]:
    """Median seconds of an idle sweep and of one spawn-to-result, among ``resting`` resting runs."""
    await _rest(where, resting)
    runner = refund_agent()
    async with where.open() as store, ActorSystem(store, runners=[runner]) as system:
        for _ in range(3):
            await system.sweep()
        sweeps, spawns = [], []
        for i in range(samples):
            start = time.perf_counter()
            assert await system.sweep() == 0
            sweeps.append(time.perf_counter() - start)
            start = time.perf_counter()
            ref = await system.spawn(runner, f"n{i}", execution_id=f"n{i}")
            assert (await ref.result()).status == "completed"
            spawns.append(time.perf_counter() - start)
    return median(sweeps), median(spawns)


async def serve(backend: str, target: str, schema: str, go: str, pause: str, concurrency: str) -> None:
    """A worker process of the benchmark: ready, then serve once ``go`` exists."""
    store: Store = SQLiteStore(target) if backend == "sqlite" else PostgresStore(target, schema=schema)
    runner = refund_agent(float(pause))
    async with store, ActorSystem(store, runners=[runner]) as system:
        await store.orphans(1)  # connected and holding its liveness lock before "ready"
        print("ready", flush=True)
        while not Path(go).exists():  # noqa: ASYNC110, ASYNC240 (the parent makes it; a local stat)
            await anyio.sleep(0.001)
        await system.serve(concurrency=int(concurrency), poll=0.05)


async def queues(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with fresh(args.backend, Path(tmp)) as where:
            found = await take_rates(where.open, args.runs, args.rounds)
    report(args.backend, args.runs, args.rounds, found)


async def main(args: argparse.Namespace) -> None:
    if args.queues:
        await queues(args)
        return
    resting = [int(n) for n in args.resting.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        print(f"fleet, {args.backend}: {args.runs} small refunds per throughput measurement")
        async with fresh(args.backend, folder) as where:
            one = await spawned(where, args.runs)
        print(f"  spawned in one process       {one:8.0f} runs/s")
        for workers in args.workers:
            async with fresh(args.backend, folder) as where:
                rate = await through_workers(where, args.runs, workers, folder)
            print(f"  enqueued, {workers} worker processes {rate:8.0f} runs/s")
        async with fresh(args.backend, folder) as where:
            times = await recovery(where, args.kill_runs, folder)
        if times:
            print(
                f"  SIGKILL to recovery ({len(times)} runs): min {times[0]:.3f} s, "
                f"median {median(times):.3f} s, max {times[-1]:.3f} s"
            )
        else:
            print("  SIGKILL to recovery: the kill caught no run mid-way")
        found: list[tuple[int, float, float]] = []
        for count in resting:
            async with fresh(args.backend, folder) as where:
                sweep, spawn = await finding_work(where, count, args.samples)
            found.append((count, sweep, spawn))
            print(
                f"  {count:>7,} resting runs: idle sweep {sweep * 1e3:7.3f} ms, spawn to result {spawn * 1e3:7.3f} ms"
            )
        (small, s_sweep, s_spawn), (large, l_sweep, l_spawn) = found[0], found[-1]
        for what, a, b in (("sweep", s_sweep, l_sweep), ("spawn", s_spawn, l_spawn)):
            ratio = b / a
            verdict = "PASS" if ratio <= TARGET else "MISS"
            print(f"  {what} at {large:,} / at {small:,}: {ratio:.2f}x (target <= {TARGET:.2f}x): {verdict}")
        print("correctness: ok (every run completed once, with its tool's answer)")
        print(json.dumps({"takeover_seconds": times}))


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fleet", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--resting", default="1000,100000")
    parser.add_argument("--tiny", action="store_true", help="a smoke-test size")
    parser.add_argument("--queues", action="store_true", help="the take rate of a limited queue")
    args = parser.parse_args(argv)
    args.workers, args.kill_runs, args.samples, args.rounds = (2, 4), 40, 30, 7
    if args.tiny:
        args.runs, args.workers, args.kill_runs, args.samples, args.resting = 12, (2,), 12, 5, "100,1000"
        args.rounds = 2
    return args


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        anyio.run(serve, *sys.argv[2:8])
    else:
        anyio.run(main, parse(sys.argv[1:]))
