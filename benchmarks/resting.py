"""Resting runs: what runs waiting for a signal cost a process, beside the bare store, and what a
worker's wake-up scan costs.

    python -m benchmarks.resting [--runs 10000] [--first 2000] [--batch 250]
                                 [--sizes 1000,10000,100000] [--tiny]

Memory. Two sides, each measured in a fresh process of its own with ``tracemalloc`` on from its
start, on SQLite (``synchronous=NORMAL``):

* tether: one ``ActorSystem`` spawns ``--runs`` runs whose tool calls ``wait_signal("go")`` (rows
  ``turn:0``, ``turn:0/tool:wait_for_go`` and its ``wait`` row), ``--batch`` at once, each awaited
  until it reports ``waiting``. Their ids are made from a counter: the benchmark keeps none of them.
* bare store: the same rows for each run (those of one tether run, read back and decoded afresh
  for each run) written through ``Store.append`` and ``Store.append_wait`` between ``try_lock`` and
  ``unlock``, as the run actor does, ``--batch`` runs at once.

Each side is measured at ``--first`` resting runs, at ``--runs``, and at two counts evenly between
(:data:`SEGMENTS` segments), once its work has settled (no
run actor left, and on the tether side the activations' release bounds passed: asyncio keeps a
cancelled timer, and the context it was set in, until its time) and after ``gc.collect()``: Python memory (``tracemalloc``, current), the runs whose
message logs the store remembers (its cache, at most 1,024 runs; SQLite's own page cache is outside
Python), live actor tasks and runs listed live. A side's growth per run is the median of its
segments' growths, so one allocation made once while a segment ran (a table resized, a thread's
first job) does not pass for a cost per run: a cost per run shows in every segment. What the bare
store grows by per run is the store's; what tether grows by beyond it is the system's, whose target is at most :data:`TARGET_BYTES` per
resting run: allocator and ``tracemalloc`` noise, below the cost of a dict or set entry per run (30
B or more). With ``--first`` past 1,024 the store's cache is full at both measurements. Then one
tether run is signalled and completes.

Scan. A worker finds due runs by ``Store.due_waits`` and its next wake by ``Store.next_wake``: one
range of the ``run_waits`` index each. The store is filled with ``--sizes`` resting runs (index rows
written directly, none due but ten) and both reads are timed, median of :data:`ROUNDS` rounds; the
ratio of the largest size's time to the smallest's is printed, flat when it stays near 1.00x.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import os
import sqlite3
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, Final, NamedTuple

import anyio
import msgspec

from actors import ActorSystem, Agent, tool, wait_signal
from actors.lowlevel import run_actor_module
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from benchmarks._common import measure_child
from stores import WAIT, Checkpoint, SQLiteStore, new_id, utcnow

#: The system's memory per resting run beyond the bare store's, at most this many bytes.
TARGET_BYTES: Final = 8.0
#: Segments between ``--first`` and ``--runs``; each side's growth per run is their median.
SEGMENTS: Final = 3
#: Rounds of each timed read (the median is printed).
ROUNDS: Final = 21
#: How long one side may take: a measurement that takes this long is broken, not slow.
CHILD_TIMEOUT: Final = 1800.0
#: The signal each run waits for.
SIGNAL: Final = "go"
#: Seconds a side rests before it is measured, for what runs on other threads to end.
_SETTLE: Final = 0.2
#: How many cursors of a connection Python's sqlite3 makes between two drops of the dead ones' weak
#: references (and one more).
_CURSORS: Final = 201


class Sample(NamedTuple):
    """One side measured with ``resting`` runs resting."""

    resting: int
    traced: int  #: bytes, tracemalloc current after gc
    cached: int  #: runs whose message logs the store remembers
    actors: int  #: live actor tasks
    live: int  #: keyed actors (runs) the runtime's registry lists live


def _agent() -> Agent:
    @tool
    async def wait_for_go() -> str:
        """Wait for the signal go."""
        got = await wait_signal(SIGNAL)
        return f"went {got.payload if got else None}"

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return messages[-1].content
        return ModelReply(tool_calls=[ToolCall("wait_for_go", {})])

    return Agent("rester", FunctionModel(model), tools=[wait_for_go])


def _run_id(n: int) -> str:
    return f"rest-{n:07d}"


async def _cursors_settled(store: SQLiteStore) -> None:
    """Python's sqlite3 keeps a weak reference to each cursor a connection made and drops the dead
    ones every :data:`_CURSORS` cursors, so a measurement finds up to that many by chance (some
    16 KB a connection: the store's, bounded). Making that many cursors at once on each of the
    store's connections leaves exactly those, whatever was made before."""

    def make(conn: sqlite3.Connection) -> None:
        cursors = [conn.cursor() for _ in range(_CURSORS)]
        for cursor in cursors:
            cursor.close()

    await store._read(make)
    await store._write(make)


def _sample(resting: int, store: SQLiteStore, system: ActorSystem | None) -> Sample:
    gc.collect()
    traced = tracemalloc.get_traced_memory()[0]
    cached = len(store._logs._runs)
    if system is None:
        return Sample(resting, traced, cached, 0, 0)
    return Sample(resting, traced, cached, system.runtime.live_actors, len(system.runtime.live_keyed()))


async def _batches(start: int, stop: int, batch: int, one: Callable[[int], Awaitable[None]]) -> None:
    """``one(n)`` for each ``n`` from ``start`` to ``stop``, ``batch`` at once."""
    for first in range(start, stop, batch):
        async with anyio.create_task_group() as tg:
            for n in range(first, min(first + batch, stop)):
                tg.start_soon(one, n)


async def _settled(system: ActorSystem | None) -> None:
    """Until every run actor has passivated (bounded), then until what the last ones left behind
    is gone: the store's threads let go of the last transaction they ran, and the timers of the
    activations' bounded releases (cancelled, each holding its task's context, so its actor, until
    asyncio drops it at its time) have passed."""
    with anyio.fail_after(60):
        while system is not None and system.runtime.live_actors:  # noqa: ASYNC110
            await anyio.sleep(0.01)
    await anyio.sleep(_SETTLE if system is None else _SETTLE + run_actor_module._UNLOCK_TIMEOUT)


def _marks(first: int, runs: int) -> list[int]:
    """The counts of resting runs a side is measured at: ``first``, ``runs`` and evenly between."""
    return [first + (runs - first) * k // SEGMENTS for k in range(SEGMENTS + 1)]


async def tether_side(path: Path, first: int, runs: int, batch: int) -> dict[str, Any]:
    """Rest ``runs`` tether runs, measured at each of :func:`_marks`; one of them then signalled."""
    agent = _agent()
    samples: list[Sample] = []
    async with (
        SQLiteStore(path, synchronous="NORMAL") as store,
        ActorSystem(store, runners=[agent]) as system,
    ):

        async def one(n: int) -> None:
            result = await (await system.spawn(agent, "wait", execution_id=_run_id(n))).result()
            if result.status != "waiting":
                raise AssertionError(f"run {n} did not rest: {result}")

        done = 0
        for target in _marks(first, runs):
            await _batches(done, target, batch, one)
            done = target
            await _settled(system)
            await _cursors_settled(store)
            samples.append(_sample(target, store, system))
        template = msgspec.json.encode(await store.history(_run_id(0))).decode()
        await system.signal(_run_id(0), SIGNAL, 1)
        with anyio.fail_after(30):
            while (await system.status(_run_id(0))).status != "completed":  # noqa: ASYNC110
                await anyio.sleep(0.02)
        woke = (await system.ref(_run_id(0)).result()).output == "went 1"
    return {"samples": samples, "template": template, "woke": woke}


async def bare_side(path: Path, first: int, runs: int, batch: int, template: str) -> dict[str, Any]:
    """The bare store given the rows of ``runs`` resting runs (those of ``template``), measured alike."""
    raw = template.encode()
    samples: list[Sample] = []
    async with SQLiteStore(path, synchronous="NORMAL") as store:

        async def one(n: int) -> None:
            eid = _run_id(n)
            if not await store.try_lock(eid):
                raise AssertionError(f"bare store: {eid} is locked")
            try:
                parent = None
                for row in msgspec.json.decode(raw, type=list[Checkpoint]):  # fresh objects per run
                    copy = msgspec.structs.replace(
                        row,
                        execution_id=eid,
                        checkpoint_id=new_id(),
                        parent_checkpoint_id=parent,
                        created_at=utcnow(),
                    )
                    parent = copy.checkpoint_id
                    if copy.step_type == WAIT:
                        await store.append_wait(copy, SIGNAL, None)
                    else:
                        await store.append(copy)
            finally:
                await store.unlock(eid)  # as the run actor lets go of a run that rests

        done = 0
        for target in _marks(first, runs):
            await _batches(done, target, batch, one)
            done = target
            await _settled(None)
            await _cursors_settled(store)
            samples.append(_sample(target, store, None))
        for n in (0, runs // 2, runs - 1):
            newest = await store.latest(_run_id(n))
            if newest is None or newest.step_type != WAIT:
                raise AssertionError(f"bare store: run {n} does not rest: {newest}")
    return {"samples": samples}


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


def _measure_here(spec: str) -> None:
    side, workdir, first, runs, batch, template = json.loads(spec)
    tracemalloc.start()
    path = Path(workdir) / f"{side}.db"
    if side == "tether":
        found = anyio.run(tether_side, path, first, runs, batch)
    else:
        found = anyio.run(bare_side, path, first, runs, batch, template)
    print(msgspec.json.encode(found).decode())


def _in_child(spec: list[Any]) -> dict[str, Any]:
    """One side, measured in a fresh process of this module (it prints its JSON as its last line)."""
    last = asyncio.run(measure_child("benchmarks.resting", spec, timeout=CHILD_TIMEOUT, what=str(spec[0])))
    found: dict[str, Any] = json.loads(last)
    return found


def _growth(samples: list[Sample]) -> float:
    """Bytes per run: the median of the growths per run between consecutive samples."""
    return statistics.median(
        (later.traced - earlier.traced) / (later.resting - earlier.resting)
        for earlier, later in itertools.pairwise(samples)
    )


def report(tether: list[Sample], bare: list[Sample], batch: int) -> None:
    """Print both sides' samples, the growth per run of each and the targets."""
    print(f"resting runs, sqlite: spawned {batch} at once, each awaited until waiting; after gc.collect()")
    print(f"{'side':<12}{'resting':>9}{'traced B':>14}{'cached runs':>13}{'actors':>8}{'live':>6}")
    for name, samples in (("tether", tether), ("bare store", bare)):
        for s in samples:
            print(f"{name:<12}{s.resting:>9}{s.traced:>14,}{s.cached:>13,}{s.actors:>8}{s.live:>6}")
    ours, store = _growth(tether), _growth(bare)
    print(
        f"growth per resting run from {tether[0].resting} to {tether[-1].resting}, median of "
        f"{len(tether) - 1} segments: tether {ours:,.1f} B traced, bare store {store:,.1f} B traced "
        f"(the store's cache: {bare[0].cached:,} then {bare[-1].cached:,} runs)"
    )
    system = ours - store
    verdict = "PASS" if system <= TARGET_BYTES else "MISS"
    print(
        f"target memory: the system's bytes per resting run beyond the bare store's {system:,.1f} B "
        f"(<= {TARGET_BYTES:g} B): {verdict}"
    )
    actors = max(s.actors + s.live for s in tether)
    print(f"target actors: live actors and runs listed live with every run resting {actors} (= 0): "
          f"{'PASS' if actors == 0 else 'MISS'}")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--first", type=int, default=2_000)
    parser.add_argument("--batch", type=int, default=250)
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--tiny", action="store_true", help="a fast smoke size for CI")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # the child of measure_child
    args = parser.parse_args(argv)
    if args.measure:
        _measure_here(args.measure)
        return
    if args.tiny:
        args.runs, args.first, args.batch, args.sizes = 2_700, 1_500, 250, "1000,5000"
    if not 0 < args.first or args.runs - args.first < SEGMENTS:
        parser.error(f"--first must be above 0 and at least {SEGMENTS} below --runs")
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        ours = _in_child(["tether", tmp, args.first, args.runs, args.batch, ""])
        bare = _in_child(["bare", tmp, args.first, args.runs, args.batch, ours["template"]])
        timings = anyio.run(scan, Path(tmp) / "scan.db", sizes)
        os.sync()
    report([Sample(*s) for s in ours["samples"]], [Sample(*s) for s in bare["samples"]], args.batch)
    print("wake-up scan, sqlite: median of", ROUNDS, "rounds, index rows written directly (10 due)")
    print(f"{'resting':>10}{'due_waits µs':>15}{'next_wake µs':>15}")
    for size, due, nxt in timings:
        print(f"{size:>10,}{due:>15.1f}{nxt:>15.1f}")
    (s0, d0, x0), (s1, d1, x1) = timings[0], timings[-1]
    print(f"ratio {s1:,} / {s0:,} resting runs: due_waits {d1 / d0:.2f}x, next_wake {x1 / x0:.2f}x")
    print(f"correctness: {'ok' if ours['woke'] else 'FAILED'} (a signalled run woke and completed)")


if __name__ == "__main__":
    main()
