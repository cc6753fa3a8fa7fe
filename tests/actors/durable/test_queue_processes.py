"""Queues across real worker processes (``tether worker --queue ...``, the runner of ``_queue_child``).

What the tools did is read from their fsynced ledger of start and end times, so each count below is
of tools that ran, in whichever process:

* 60 runs in 4 keys, ``concurrency=3, per_key=1``, 3 workers of ``--concurrency 8``: never more
  than 3 at once (and 3 at some point), never 2 of one key, every run once.
* ``rate=5/2s``: no 6 starts within 2 s, and 15 runs through in about 6 s.
* A worker holding both slots of a queue is SIGKILLed: the other worker recovers its runs and starts
  the next ones within 1.5 s (the slots are free as soon as its liveness lock goes: no lease).
* With ``concurrency=1``, runs enqueued with priorities 0, 5 and 1 start in the order 5, 1, 0.
* A queue full: a ``spawn`` and a person's resume run at once; ``runs(status="queued")``,
  ``RunSummary.queue``/``key`` and ``tether runs --queue`` say how the runs stand.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from _queue_child import agent, ledger
from conftest import Backend, on_asyncpg, stop_processes, until_ended

from actors import ActorSystem, Resume
from stores import RUN_END, Store

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[3]
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests"), str(Path(__file__).parent)]),
}
LIMIT = 120.0


def url_of(backend: Backend) -> str:
    return (
        f"sqlite:///{backend.target}"
        if backend.name == "sqlite"
        else f"{backend.target}?schema={backend.schema}"
    )


async def start_workers(
    backend: Backend,
    workdir: Path,
    count: int,
    *queues: str,
    first: float = 0.05,
    again: float = 0.05,
    concurrency: int = 8,
) -> list[Any]:
    """``count`` worker processes serving ``queues`` (``--concurrency`` ``concurrency``, ``--poll 0.05``),
    each ready."""
    env = {**ENV, "QUEUE_WORKDIR": str(workdir), "QUEUE_FIRST": str(first), "QUEUE_AGAIN": str(again)}
    command = [sys.executable, "-m", "tether", "worker", "--runner", "_queue_child:cli_agent"]
    command += ["--concurrency", str(concurrency), "--poll", "0.05", "--store", url_of(backend)]
    for queue in queues:
        command += ["--queue", queue]
    started = []
    for _ in range(count):
        started.append(await anyio.open_process(command, env=env, cwd=workdir, stderr=None))
    for process in started:
        assert process.stdout is not None
        line = b""
        with anyio.fail_after(60):
            while b"\n" not in line:
                line += await process.stdout.receive()
        assert line.startswith(b"worker serving queued-step"), line
    return started


async def until(check: Callable[[], Any], timeout: float = LIMIT) -> None:
    with anyio.fail_after(timeout):
        while not await check():  # noqa: ASYNC110 (the ledger other processes write; the rate's starts, sampled)
            await anyio.sleep(0.02)


async def all_ended(store: Store, ids: list[str]) -> bool:
    for eid in ids:
        newest = await store.latest(eid)
        if newest is None or newest.step_type != RUN_END:
            return False
    return True


def most_at_once(
    events: list[dict[str, Any]], group: Callable[[str], str] = lambda order: ""
) -> dict[str, int]:
    """The most tools that ran at once (by ``group`` of their order), from the ledger: an end at the
    same instant as a start counts first."""
    now: dict[str, int] = {}
    most: dict[str, int] = {}
    for e in sorted(events, key=lambda e: (e["t"], e["event"] == "start")):
        g = group(e["order"])
        now[g] = now.get(g, 0) + (1 if e["event"] == "start" else -1)
        most[g] = max(most.get(g, 0), now[g])
    return most


async def test_a_limited_queue_holds_its_concurrency_and_per_key_across_workers(
    store_backend: Backend, tmp_path: Path
) -> None:
    runner = agent(tmp_path)
    key_of = {f"o{i:02d}": f"k{i % 4}" for i in range(60)}
    async with store_backend.open() as store:
        # The workers serve before the runs are enqueued: all three see the queue from its first run.
        # Each takes at most 2 runs at once: together they could run 6, so the queue's 3 is what
        # holds them, and 3 at once needs two workers (one alone would re-take every slot it frees).
        workers = await start_workers(
            store_backend, tmp_path, 3, "llm:concurrency=3,per_key=1", first=0.1, concurrency=2
        )
        try:
            async with ActorSystem(store, runners=[runner]) as system:
                ids = [
                    await system.enqueue(runner, o, execution_id=o, queue="llm", key=k)
                    for o, k in key_of.items()
                ]
            await until_ended(store, ids, timeout=LIMIT)
        finally:
            await stop_processes(workers)
        histories = {eid: await store.history(eid) for eid in ids}
    events = ledger(tmp_path)
    for kind in ("start", "end"):
        assert sorted(e["order"] for e in events if e["event"] == kind) == sorted(key_of), kind  # once each
    assert most_at_once(events) == {"": 3}  # at most 3 at once, and 3 at some point
    assert set(most_at_once(events, key_of.__getitem__).values()) == {1}  # never 2 of one key
    assert len({e["pid"] for e in events}) > 1  # more than one worker took runs (3 at once needs two)
    for eid, rows in histories.items():
        ends = [r for r in rows if r.step_type == RUN_END]
        assert len(ends) == 1 and ends[0].status == "completed", eid


async def _recorded_starts(backend: Backend) -> set[tuple[int, float]]:
    """The starts the store records for queue ``paced`` now (a slot keeps a start for at least the
    rate's window, so reading every 20 ms sees each)."""
    if backend.name == "sqlite":

        def read() -> set[tuple[int, float]]:
            with contextlib.closing(sqlite3.connect(f"file:{backend.target}?mode=ro", uri=True)) as conn:
                return set(conn.execute("SELECT slot, at FROM queue_starts WHERE queue = 'paced'"))

        return await anyio.to_thread.run_sync(read)

    found = await on_asyncpg(
        backend.target,
        lambda conn: conn.fetch(
            f'SELECT slot, at FROM "{backend.schema}".queue_starts WHERE queue = $1', "paced"
        ),
    )
    return {(r[0], r[1]) for r in found}


async def test_a_rate_starts_at_most_n_runs_in_any_window(store_backend: Backend, tmp_path: Path) -> None:
    runner = agent(tmp_path)
    takes: set[tuple[int, float]] = set()
    async with store_backend.open() as store:
        async with ActorSystem(store, runners=[runner]) as system:
            ids = [await system.enqueue(runner, f"r{i:02d}", queue="paced") for i in range(15)]
        workers = await start_workers(store_backend, tmp_path, 2, "paced:rate=5/2s", first=0.1)

        async def ended() -> bool:
            takes.update(await _recorded_starts(store_backend))
            return await all_ended(store, ids)

        try:
            await until(ended)
        finally:
            await stop_processes(workers)
    # The takes, as the store recorded them: no 6 within any 2 s.
    taken = sorted(at for _, at in takes)
    assert len(taken) == 15, taken
    assert min(b - a for a, b in zip(taken, taken[5:], strict=False)) >= 2.0, taken
    starts = sorted(e["t"] for e in ledger(tmp_path) if e["event"] == "start")
    ends = sorted(e["t"] for e in ledger(tmp_path) if e["event"] == "end")
    assert len(starts) == len(ends) == 15
    # Three waves of 5: the third taken 4 s after the first.
    assert 4.0 <= taken[-1] - taken[0] < 5.0, taken
    # The tools (the ledger): the k-th to start never starts before the k-th take, however late the
    # tools run (a tool starts after its run's activation, reads and model call: 5 ms to 0.2 s
    # after its take measured, the most with the whole suite running), and all 15 are through in
    # about 6 s.
    assert all(start >= take for start, take in zip(starts, taken, strict=True)), (starts, taken)
    gaps = [b - a for a, b in zip(starts, starts[5:], strict=False)]
    assert ends[-1] - taken[0] < 6.0, (taken, ends)
    (tmp_path / "rate.json").write_text(
        json.dumps({"takes": taken, "gaps": gaps, "through": ends[-1] - taken[0]})
    )


async def test_a_killed_workers_slots_are_free_at_once(store_backend: Backend, tmp_path: Path) -> None:
    runner = agent(tmp_path)
    orders = [f"o{i}" for i in range(6)]
    async with store_backend.open() as store:
        async with ActorSystem(store, runners=[runner]) as system:
            ids = [await system.enqueue(runner, o, execution_id=o, queue="pair") for o in orders]
        # The victim's first attempts take a minute: it holds both slots when it is killed.
        (victim,) = await start_workers(store_backend, tmp_path, 1, "pair:concurrency=2", first=60)
        try:
            await until(lambda: _started(tmp_path, 2))
            (survivor,) = await start_workers(store_backend, tmp_path, 1, "pair:concurrency=2", first=0.1)
            await anyio.sleep(0.3)
            assert len([e for e in ledger(tmp_path) if e["event"] == "start"]) == 2  # the queue is full
            held = {e["order"] for e in ledger(tmp_path)}
            victim.send_signal(signal.SIGKILL)
            killed = time.time()
            await victim.wait()
            await until_ended(store, ids, timeout=LIMIT)
        finally:
            await stop_processes([victim, survivor])
    after = [e for e in ledger(tmp_path) if e["t"] > killed]
    assert {e["pid"] for e in after} == {survivor.pid}
    starts = [e for e in after if e["event"] == "start"]
    recovered = [e["t"] - killed for e in starts if e["order"] in held]
    fresh = [e["t"] - killed for e in starts if e["order"] not in held]
    assert len(recovered) == 2 and max(recovered) < 1.5, recovered  # the killed runs, taken over
    assert len(fresh) == 4 and min(fresh) < 1.5, fresh  # the next runs, in the freed slots
    assert most_at_once(after) == {"": 2}
    (tmp_path / "takeover.json").write_text(json.dumps({"recovered": recovered, "fresh": fresh}))


async def _started(workdir: Path, count: int) -> bool:
    return len([e for e in ledger(workdir) if e["event"] == "start"]) >= count


async def test_higher_priority_starts_first(store_backend: Backend, tmp_path: Path) -> None:
    runner = agent(tmp_path)
    async with store_backend.open() as store:
        async with ActorSystem(store, runners=[runner]) as system:
            ids = [
                await system.enqueue(runner, f"p{priority}", queue="one", priority=priority)
                for priority in (0, 5, 1)
            ]
        workers = await start_workers(store_backend, tmp_path, 2, "one:concurrency=1")
        try:
            await until_ended(store, ids, timeout=LIMIT)
        finally:
            await stop_processes(workers)
    assert [e["order"] for e in ledger(tmp_path) if e["event"] == "start"] == ["p5", "p1", "p0"]


async def test_spawn_and_a_persons_resume_are_not_throttled(store_backend: Backend, tmp_path: Path) -> None:
    runner = agent(tmp_path)
    async with store_backend.open() as store, ActorSystem(store, runners=[runner]) as system:
        asked = await system.enqueue(runner, "ask-x", queue="busy", key="t0", priority=9)
        held = await system.enqueue(runner, "long-a", queue="busy", key="t1", priority=5)
        waiting = [
            await system.enqueue(runner, o, queue="busy", key=k) for o, k in [("b", "t2"), ("c", None)]
        ]
        (worker,) = await start_workers(store_backend, tmp_path, 1, "busy:concurrency=1")
        try:
            await until(lambda: _started(tmp_path, 1))  # long-a runs: the queue is full
            assert (await system.status(asked)).status == "paused"
            with anyio.fail_after(10):
                spawned = await (await system.spawn(runner, "spawned")).result()
                resumed = await system.resume(asked, Resume(approved=True))
            assert spawned.status == resumed.status == "completed"
            queued = await system.runs(status="queued")
            assert sorted((s.execution_id, s.queue, s.key) for s in queued) == sorted(
                [(waiting[0], "busy", "t2"), (waiting[1], "busy", None)]
            )
            running = await system.status(held)
            assert (running.status, running.queue, running.key) == ("running", "busy", "t1")
            assert (await system.status(spawned.execution_id)).queue is None
            assert {s.execution_id for s in await system.runs(queue="busy")} == {asked, held, *waiting}
            assert await system.runs(queue="elsewhere") == []
            listed = await anyio.run_process(
                [
                    sys.executable,
                    "-m",
                    "tether",
                    "runs",
                    "--queue",
                    "busy",
                    "--status",
                    "queued",
                    "--json",
                    "--store",
                    url_of(store_backend),
                ],
                env=ENV,
            )
            assert sorted(s["execution_id"] for s in json.loads(listed.stdout)) == sorted(waiting)
            (tmp_path / "go").touch()
            await until_ended(store, [held, *waiting], timeout=LIMIT)
        finally:
            await stop_processes([worker])
    events = ledger(tmp_path)
    order = [e["order"] for e in events if e["event"] == "start"]
    assert order[:3] == ["long-a", "spawned", "ask-x"], order  # both ran while long-a held the queue
    long_end = next(e["t"] for e in events if e["event"] == "end" and e["order"] == "long-a")
    assert all(e["t"] < long_end for e in events if e["order"] in ("spawned", "ask-x"))
