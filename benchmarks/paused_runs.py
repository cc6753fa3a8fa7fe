"""Paused runs: what 10,000 runs waiting for a human cost a process, tether beside the bare store.

    python -m benchmarks.paused_runs [--runs 10000] [--first 1000] [--backend sqlite|postgres] [--tiny]

The work: tether's refund example asked for a refund over its approval limit, so its tool calls
``interrupt("manager_approval", ...)`` and the run pauses (rows ``turn:0``, ``turn:0/tool:refund``,
its ``hitl_pause`` row, and a pending interrupt). ``--runs`` runs are spawned, ``--batch`` at
once, and each is awaited until it reports ``paused``; the caller keeps no ref. At ``--first`` and at
``--runs`` paused runs the process is measured after ``gc.collect()``: Python memory (``tracemalloc``,
current, traced from the start of the
measuring process's work), resident set size (``/proc/self/statm``), live actor tasks
(``ActorRuntime.live_actors``), registry entries, runs listed live by the durable half and asyncio
tasks.

The raw counterpart is the bare store holding the same rows: a fresh process writes, for each run,
the rows of one tether run (the template, read back from tether's store) through ``Store.append``
and ``Store.append_pause`` between ``try_lock`` and ``unlock``, as the run actor does, ``--batch`` runs
at once, and is measured the same way. Whatever both grow by per run is the store's (its bounded
memory of each run's message log, SQLite's page cache); what tether grows by beyond the bare store
is the framework's.

Targets: no live actor, no registry entry, no run listed live and no task beyond the bare store's with every run paused,
and the framework's memory per paused run (tether's growth from ``--first`` to ``--runs`` minus the
bare store's, per run) at most :data:`TARGET_BYTES`, a few bytes of allocator and ``tracemalloc``
noise. Verified afterwards: every run is paused (its pending interrupt is in the store, its newest
row is the pause) and one of them still resumes (approved: the refund is charged once, the run
completes with its answer); RSS is shown, not checked (the allocator keeps freed pages).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import tempfile
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, NamedTuple

import asyncpg
import msgspec

from actors import ActorSystem, Resume
from benchmarks._common import PG_DSN, measure_child
from stores import HITL_PAUSE, Checkpoint, PendingInterrupt, PostgresStore, SQLiteStore, Store, new_id, utcnow
from tether.lowlevel import RefundBot

PROMPT = "Refund order 1042 for 5000"  # over the approval limit: the tool interrupts
PAUSED_ROWS = [
    ("turn:0", "llm_call"),
    ("turn:0/tool:refund", "tool_call"),
    ("turn:0/tool:refund", "hitl_pause"),
]
ANSWER = 'Done: {"refunded":true,"order":"1042","amount":5000}'
#: The framework's memory per paused run, beyond the bare store's, at most this many bytes.
TARGET_BYTES = 16.0
WARMUP = 2
CHILD_TIMEOUT = 1800.0


class Sample(NamedTuple):
    """One measurement of the process with ``paused`` runs paused."""

    paused: int
    traced: int  #: bytes, tracemalloc current after gc
    rss: int  #: bytes resident
    actors: int  #: live actor tasks
    registry: int  #: registry entries
    listed: int  #: runs the system's durable half reports driving (read from the registry)
    tasks: int  #: asyncio tasks


def _rss() -> int:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # not Linux: shown as 0
        return 0


def sample(paused: int, system: ActorSystem | None) -> Sample:
    gc.collect()
    traced = tracemalloc.get_traced_memory()[0]
    actors = system.runtime.live_actors if system is not None else 0
    registry = len(system.runtime.registry) if system is not None else 0
    listed = len(system._runs.driving()) if system is not None else 0
    return Sample(paused, traced, _rss(), actors, registry, listed, len(asyncio.all_tasks()))


def open_store(backend: str, workdir: Path, tag: str) -> Store:
    if backend == "sqlite":
        return SQLiteStore(workdir / f"{tag}.db")
    return PostgresStore(PG_DSN, schema=f"bench_paused_{os.getpid()}_{tag}")


async def drop(store: Store) -> None:
    if isinstance(store, PostgresStore):
        conn = await asyncpg.connect(PG_DSN)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{store.schema}" CASCADE')
        finally:
            await conn.close()


class Charges:
    """Refunds charged (none until a run is resumed)."""

    count = 0


class _Bot(RefundBot):
    def charge(self, order: str, amount: int, approver: str | None) -> None:
        Charges.count += 1


async def in_batches(ids: list[str], batch: int, one: Callable[[str], Awaitable[None]]) -> None:
    for first in range(0, len(ids), batch):
        await asyncio.gather(*(one(run_id) for run_id in ids[first : first + batch]))


async def verify_paused(store: Store, ids: list[str], rows: list[tuple[str, str]]) -> None:
    """Every run of ``ids`` has its pending interrupt and ends on its pause row; a sample holds ``rows``."""
    pending = {p.execution_id for p in await store.pending()}
    missing = set(ids) - pending
    assert not missing, f"{len(missing)} runs are not paused, e.g. {sorted(missing)[:3]}"
    for run_id in ids:
        newest = await store.latest(run_id)
        assert newest is not None and newest.step_type == HITL_PAUSE, (run_id, newest)
    for run_id in (ids[0], ids[len(ids) // 2], ids[-1]):
        found = [(row.node_id, row.step_type) for row in await store.history(run_id)]
        assert found == rows, (run_id, found)


# -------------------------------------------------------------------------------- the two sides


async def tether_side(backend: str, workdir: Path, first: int, runs: int, batch: int) -> dict[str, Any]:
    """Pause ``runs`` tether runs, measured at ``first`` and at ``runs``; verified; one resumed."""
    agent = _Bot().agent()
    store = open_store(backend, workdir, "tether")
    try:
        async with store, ActorSystem(store, runners=[agent]) as system:

            async def one(run_id: str) -> None:
                result = await (await system.spawn(agent, PROMPT, execution_id=run_id)).result()
                if result.status != "paused":
                    raise AssertionError(f"run {run_id} did not pause: {result}")

            await in_batches([f"warm-{i}" for i in range(WARMUP)], batch, one)
            ids = [f"run-{i}" for i in range(runs)]
            await in_batches(ids[:first], batch, one)
            at_first = sample(first, system)
            await in_batches(ids[first:], batch, one)
            at_runs = sample(runs, system)
            await verify_paused(store, ids, PAUSED_ROWS)
            history = await store.history(ids[0])
            pending = (await store.pending(ids[0]))[0]
            if Charges.count:
                raise AssertionError(f"{Charges.count} refunds charged before any approval")
            resumed = await system.resume(ids[-1], Resume(approved=True, metadata={"approver": "bench"}))
            if resumed.status != "completed" or resumed.output != ANSWER or Charges.count != 1:
                raise AssertionError(f"the resumed run: {resumed} ({Charges.count} charges)")
            after = sample(runs - 1, system)
            if after.actors or after.registry or after.listed:
                raise AssertionError(f"live actors after the resume: {after}")
    finally:
        await drop(store)
    return {
        "samples": [at_first, at_runs],
        "template": msgspec.json.encode([history, pending]).decode(),
    }


async def raw_side(
    backend: str, workdir: Path, first: int, runs: int, batch: int, template: str
) -> dict[str, Any]:
    """The bare store given the rows of ``runs`` paused runs (those of ``template``), measured alike."""
    rows_json, pending_json = json.loads(template)
    rows = [msgspec.convert(row, Checkpoint) for row in rows_json]
    pending = msgspec.convert(pending_json, PendingInterrupt)
    store = open_store(backend, workdir, "raw")
    try:
        async with store:

            async def one(run_id: str) -> None:
                if not await store.try_lock(run_id):
                    raise AssertionError(f"raw: {run_id} is locked")
                try:
                    parent = None
                    for row in rows:
                        copy = msgspec.structs.replace(
                            row,
                            execution_id=run_id,
                            checkpoint_id=new_id(),
                            parent_checkpoint_id=parent,
                            created_at=utcnow(),
                        )
                        parent = copy.checkpoint_id
                        if copy.step_type == HITL_PAUSE:
                            paused = msgspec.structs.replace(
                                pending, execution_id=run_id, created_at=utcnow()
                            )
                            await store.append_pause(copy, paused)
                        else:
                            await store.append(copy)
                finally:
                    await store.unlock(run_id)

            await in_batches([f"warm-{i}" for i in range(WARMUP)], batch, one)
            ids = [f"run-{i}" for i in range(runs)]
            await in_batches(ids[:first], batch, one)
            at_first = sample(first, None)
            await in_batches(ids[first:], batch, one)
            at_runs = sample(runs, None)
            await verify_paused(store, ids, [(row.node_id, row.step_type) for row in rows])
    finally:
        await drop(store)
    return {"samples": [at_first, at_runs]}


# -------------------------------------------------------------------------------- the run


async def in_child(spec: list[Any]) -> dict[str, Any]:
    """One side, measured in a fresh process of this module (it prints its JSON as its last line)."""
    last = await measure_child("benchmarks.paused_runs", spec, timeout=CHILD_TIMEOUT, what=str(spec[0]))
    found: dict[str, Any] = json.loads(last)
    return found


def _measure_here(spec: str) -> None:
    side, backend, workdir, first, runs, batch, template = json.loads(spec)
    tracemalloc.start()
    if side == "tether":
        found = asyncio.run(tether_side(backend, Path(workdir), first, runs, batch))
    else:
        found = asyncio.run(raw_side(backend, Path(workdir), first, runs, batch, template))
    print(json.dumps(found))


def report(tether: list[Sample], raw: list[Sample], backend: str, batch: int) -> bool:
    """Print both sides and the targets; return whether they hold."""
    print(f"paused runs, {backend}: spawned {batch} at once, each awaited until paused; after gc.collect()")
    header = (
        f"{'side':<12}{'paused':>8}{'traced KiB':>12}{'RSS KiB':>10}"
        f"{'live actors':>13}{'registry':>10}{'listed':>8}{'tasks':>7}"
    )
    print(header)
    print("-" * len(header))
    for name, samples in (("tether", tether), ("bare store", raw)):
        for s in samples:
            print(
                f"{name:<12}{s.paused:>8,}{s.traced / 1024:>12,.0f}{s.rss / 1024:>10,.0f}"
                f"{s.actors:>13}{s.registry:>10}{s.listed:>8}{s.tasks:>7}"
            )
    runs = tether[1].paused - tether[0].paused
    ours = (tether[1].traced - tether[0].traced) / runs
    base = (raw[1].traced - raw[0].traced) / runs
    ours_rss = (tether[1].rss - tether[0].rss) / runs
    base_rss = (raw[1].rss - raw[0].rss) / runs
    print(
        f"growth per paused run from {tether[0].paused:,} to {tether[1].paused:,}: tether {ours:,.1f} B "
        f"traced ({ours_rss:,.0f} B RSS), bare store {base:,.1f} B traced ({base_rss:,.0f} B RSS)"
    )
    framework = ours - base
    memory_ok = framework <= TARGET_BYTES
    print(
        f"target memory: framework bytes per paused run (tether - bare store, traced) {framework:,.1f} B "
        f"(<= {TARGET_BYTES:.0f} B): {'PASS' if memory_ok else 'MISS'}"
    )
    extra_tasks = max(t.tasks - r.tasks for t, r in zip(tether, raw, strict=True))
    actors = max(s.actors + s.registry + s.listed for s in tether)
    actors_ok = actors == 0 and extra_tasks <= 0
    print(
        f"target actors: live actors, registry entries and runs listed with every run paused {actors}, "
        f"tasks beyond "
        f"the bare store's {extra_tasks} (= 0): {'PASS' if actors_ok else 'MISS'}"
    )
    print(
        "correctness: ok (every run paused with its pending interrupt and its rows, one resumed and "
        "completed with one charge)"
    )
    return memory_ok and actors_ok


async def run(backend: str, first: int, runs: int, batch: int) -> bool:
    with tempfile.TemporaryDirectory(prefix="bench-paused-") as tmp:
        ours = await in_child(["tether", backend, tmp, first, runs, batch, ""])
        base = await in_child(["raw", backend, tmp, first, runs, batch, ours["template"]])
    return report(
        [Sample(*s) for s in ours["samples"]], [Sample(*s) for s in base["samples"]], backend, batch
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000, help="paused runs at the second measurement")
    parser.add_argument("--first", type=int, default=1_000, help="paused runs at the first measurement")
    parser.add_argument("--batch", type=int, default=250, help="runs spawned at once")
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--tiny", action="store_true", help="a fast smoke size for CI")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # the child of in_child
    args = parser.parse_args(argv)
    if args.measure:
        _measure_here(args.measure)
        return
    first, runs = (50, 200) if args.tiny else (args.first, args.runs)
    if not 0 < first < runs:
        parser.error("--first must be above 0 and below --runs")
    asyncio.run(run(args.backend, first, runs, args.batch))


if __name__ == "__main__":
    main()
