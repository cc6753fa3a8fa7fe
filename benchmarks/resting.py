"""Resting runs: what runs waiting for a signal cost a process, and what a worker's wake-up scan costs.

    python -m benchmarks.resting [--runs 10000] [--first 2000] [--sizes 1000,10000,100000] [--tiny]

Memory. One process spawns ``--runs`` runs whose tool calls ``wait_signal("go")`` (rows
``turn:0``, ``turn:0/tool:wait_for_go`` and its ``wait`` row), ``--batch`` at once, each awaited
until it reports ``waiting``. At ``--first`` and at ``--runs`` resting runs it is measured after
``gc.collect()``: Python memory (``tracemalloc``, current), live actor tasks and the runs listed live.
The store keeps a bounded memory of the message logs of the 1,024 runs it wrote last, so from
``--first`` on what grows per run is the framework's: the target is at most :data:`TARGET_BYTES`
per resting run (allocator and ``tracemalloc`` noise), no live actor and no run listed live. One of
the runs is then signalled and completes.

Scan. A worker finds due runs by ``Store.due_waits`` and its next wake by ``Store.next_wake``: one
range of the ``run_waits`` index each. The store is filled with ``--sizes`` resting runs (index rows
written directly, none due but ten) and both reads are timed, median of :data:`ROUNDS` rounds; the
ratio of the largest size's time to the smallest's is printed, flat when it stays near 1.00x.
"""

from __future__ import annotations

import argparse
import gc
import os
import sqlite3
import statistics
import tempfile
import time
import tracemalloc
from datetime import timedelta
from pathlib import Path
from typing import Final

import anyio

from actors import ActorSystem, Agent, tool, wait_signal
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import SQLiteStore, utcnow

#: The framework's memory per resting run from ``--first`` to ``--runs``, at most this many bytes.
TARGET_BYTES: Final = 16.0
#: Rounds of each timed read (the median is printed).
ROUNDS: Final = 21


def _agent() -> Agent:
    @tool
    async def wait_for_go() -> str:
        """Wait for the signal go."""
        got = await wait_signal("go")
        return f"went {got.payload if got else None}"

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return messages[-1].content
        return ModelReply(tool_calls=[ToolCall("wait_for_go", {})])

    return Agent("rester", FunctionModel(model), tools=[wait_for_go])


def _traced() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


async def memory(
    path: Path, runs: int, first: int, batch: int
) -> tuple[list[tuple[int, int, int, int]], bool]:
    """Spawn ``runs`` resting runs; (resting, traced bytes, live actors, runs live) at ``first``
    and at ``runs``; and whether one of them, signalled, completed."""
    agent = _agent()
    points: list[tuple[int, int, int, int]] = []
    ids: list[str] = []
    async with (
        SQLiteStore(path, synchronous="NORMAL") as store,
        ActorSystem(store, runners=[agent]) as system,
    ):
        tracemalloc.start()

        async def one() -> None:
            ref = await system.spawn(agent, "wait")
            result = await ref.result()
            assert result.status == "waiting", result
            ids.append(ref.execution_id)

        for target in (first, runs):
            while len(ids) < target:
                async with anyio.create_task_group() as tg:
                    for _ in range(min(batch, target - len(ids))):
                        tg.start_soon(one)
            live = sum(1 for eid in ids if system._runs.is_live(eid))
            points.append((len(ids), _traced(), system.runtime.live_actors, live))
        tracemalloc.stop()
        await system.signal(ids[0], "go", 1)
        with anyio.fail_after(30):
            while (await system.status(ids[0])).status != "completed":  # noqa: ASYNC110
                await anyio.sleep(0.02)
        done = (await system.ref(ids[0]).result()).output == "went 1"
    return points, done


def _fill(path: Path, size: int) -> None:
    """``size`` resting runs in the index of waits (ten of them due), written directly."""
    far = (utcnow() + timedelta(days=1)).isoformat()
    due = (utcnow() - timedelta(seconds=1)).isoformat()
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM run_waits")
        rows = [(f"r{i:07d}", 2, "go", due if i < 10 else (far if i % 2 else None)) for i in range(size)]
        conn.executemany("INSERT INTO run_waits (execution_id, seq, name, wake_at) VALUES (?, ?, ?, ?)", rows)


async def scan(path: Path, sizes: list[int]) -> list[tuple[int, float, float]]:
    """(resting runs, median due_waits µs, median next_wake µs) for each size."""
    out = []
    for size in sizes:
        async with SQLiteStore(path) as store:
            await anyio.to_thread.run_sync(_fill, path, size)
            due_times, next_times = [], []
            for _ in range(ROUNDS):
                started = time.perf_counter()
                found = await store.due_waits(100)
                due_times.append(time.perf_counter() - started)
                started = time.perf_counter()
                await store.next_wake()
                next_times.append(time.perf_counter() - started)
                assert len(found) == 10, found
            out.append((size, statistics.median(due_times) * 1e6, statistics.median(next_times) * 1e6))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--first", type=int, default=2_000)
    parser.add_argument("--batch", type=int, default=250)
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--tiny", action="store_true", help="a fast smoke size for CI")
    args = parser.parse_args(argv)
    if args.tiny:
        args.runs, args.first, args.batch, args.sizes = 200, 50, 50, "1000,5000"
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        points, done = anyio.run(memory, Path(tmp) / "memory.db", args.runs, args.first, args.batch)
        timings = anyio.run(scan, Path(tmp) / "scan.db", sizes)
        os.sync()
    print(
        f"resting runs, sqlite: spawned {args.batch} at once, each awaited until waiting; after gc.collect()"
    )
    print(f"{'':8}{'resting':>10}{'traced B':>14}{'actors':>8}{'live':>6}")
    for resting, traced, actors, live in points:
        print(f"{'tether':8}{resting:>10}{traced:>14,}{actors:>8}{live:>6}")
    (n0, b0, *_), (n1, b1, a1, l1) = points
    per_run = (b1 - b0) / (n1 - n0)
    print(f"growth per resting run from {n0} to {n1}: {per_run:,.1f} B traced")
    verdict = "PASS" if per_run <= TARGET_BYTES else "MISS"
    print(f"target memory: bytes per resting run {per_run:,.1f} B (<= {TARGET_BYTES:g} B): {verdict}")
    print(f"target actors: live actors and runs listed live with every run resting {a1 + l1} (= 0): "
          f"{'PASS' if a1 + l1 == 0 else 'MISS'}")  # fmt: skip
    print("wake-up scan, sqlite: median of", ROUNDS, "rounds, index rows written directly (10 due)")
    print(f"{'resting':>10}{'due_waits µs':>15}{'next_wake µs':>15}")
    for size, due, nxt in timings:
        print(f"{size:>10,}{due:>15.1f}{nxt:>15.1f}")
    (s0, d0, x0), (s1, d1, x1) = timings[0], timings[-1]
    print(f"ratio {s1:,} / {s0:,} resting runs: due_waits {d1 / d0:.2f}x, next_wake {x1 / x0:.2f}x")
    print(f"correctness: {'ok' if done else 'FAILED'} (a signalled run woke and completed)")


if __name__ == "__main__":
    main()
