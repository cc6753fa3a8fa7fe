"""Exactly-once claim under races, concurrent migrations and the ownership lock across processes.

Every race repeats ``TETHER_STRESS_REPEAT`` times (default 5). The long loops::

    TETHER_STRESS_REPEAT=50 .venv/bin/python -m pytest -m stress tests/stores/test_races.py
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import ByteReceiveStream, Process
from anyio.streams.buffered import BufferedByteReceiveStream
from conftest import Backend, drop_pg_schema

from stores import REENTRY_SEQ, RESUME, RESUME_KEY, AlreadyResumed, Checkpoint, Store
from stores.testing import make_pending, make_row

REPEAT = int(os.environ.get("TETHER_STRESS_REPEAT", "5"))
ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("_store_child.py")

pytestmark = pytest.mark.anyio


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


async def _seed_pause(store: Store, eid: str) -> Checkpoint:
    await store.append(make_row(eid, 0))
    await store.append(make_row(eid, 1, "turn:0/tool:refund", step_type="tool_call"))
    pause = make_row(
        eid,
        2,
        "turn:0/tool:refund",
        step_type="hitl_pause",
        status="interrupted",
        interrupt_reason="approve",
        interrupt_context={"amount": 120},
    )
    await store.append_pause(pause, make_pending(eid, pause, context={"amount": 120}))
    return pause


def _claim_row(eid: str, seq: int, who: int) -> Checkpoint:
    return Checkpoint(
        execution_id=eid,
        seq=seq,
        runner="race",
        node_id="turn:0/tool:refund",
        step_type=RESUME,
        node_input={REENTRY_SEQ: 2, RESUME_KEY: {"approved": True, "metadata": {"by": who}}},
    )


async def _check_claimed_once(store: Store, eid: str) -> None:
    history = await store.history(eid)
    assert [r.step_type for r in history].count(RESUME) == 1, [(r.seq, r.step_type) for r in history]
    assert await store.pending(eid) == []


async def _open(backend: Backend, stores: list[Store]) -> Store:
    store = backend.open()
    stores.append(store)
    await store.setup()
    return store


async def _close_all(stores: list[Store]) -> None:
    for store in stores:
        with anyio.move_on_after(10):
            await store.close()


@pytest.mark.stress
@pytest.mark.parametrize("tasks", [5, 50])
async def test_claim_race_between_tasks(store_backend: Backend, tasks: int) -> None:
    """``tasks`` claimers, each on one of up to 10 store instances, race for one pause."""
    stores: list[Store] = []
    try:
        with anyio.fail_after(60 + 5 * REPEAT):
            instances = [await _open(store_backend, stores) for _ in range(min(tasks, 10))]
            for rnd in range(REPEAT):
                eid = f"race-{tasks}-{rnd}"
                await _seed_pause(instances[0], eid)
                go = anyio.Event()
                outcomes: list[Any] = []

                async def claimer(
                    i: int, eid: str = eid, go: anyio.Event = go, outcomes: list[Any] = outcomes
                ) -> None:
                    await go.wait()
                    try:
                        pending = await instances[i % len(instances)].claim(_claim_row(eid, 3 + i % 3, i))
                        outcomes.append(("won", pending.context))
                    except Exception as exc:
                        outcomes.append(exc)

                async with anyio.create_task_group() as tg:
                    for i in range(tasks):
                        tg.start_soon(claimer, i)
                    await anyio.sleep(0.01)
                    go.set()
                winners = [o for o in outcomes if isinstance(o, tuple)]
                losers = [o for o in outcomes if not isinstance(o, tuple)]
                assert winners == [("won", {"amount": 120})], outcomes
                bad = [repr(o) for o in losers if not isinstance(o, AlreadyResumed)]
                assert bad == [], bad
                assert len(losers) == tasks - 1
                await _check_claimed_once(instances[-1], eid)
    finally:
        await _close_all(stores)


async def _spawn(args: list[str]) -> Process:
    return await anyio.open_process(
        [sys.executable, str(CHILD), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_child_env()
    )


async def _communicate(proc: Process) -> tuple[bytes, bytes]:
    """Everything the child writes to stdout and to stderr until it exits; then its exit."""
    out, err = bytearray(), bytearray()

    async def drain(stream: ByteReceiveStream | None, into: bytearray) -> None:
        assert stream is not None
        async for chunk in stream:
            into += chunk

    async with anyio.create_task_group() as tg:
        tg.start_soon(drain, proc.stdout, out)
        tg.start_soon(drain, proc.stderr, err)
    await proc.wait()
    return bytes(out), bytes(err)


def _count(workdir: Path, pattern: str) -> int:
    return len(list(workdir.glob(pattern)))


async def _wait_ready(workdir: Path, procs: list[Process], pattern: str) -> None:
    while _count(workdir, pattern) < len(procs):
        for proc in procs:
            if proc.returncode is not None:
                _, err = await _communicate(proc)
                pytest.fail(f"a child died early: {err.decode()[-2000:]}")
        await anyio.sleep(0.002)


async def _results(procs: list[Process]) -> list[dict[str, Any]]:
    results = []
    for proc in procs:
        out, err = await _communicate(proc)
        assert proc.returncode == 0, err.decode()[-2000:]
        results.append(json.loads(out.decode().strip().splitlines()[-1]))
    return results


async def _release_together(workdir: Path, procs: list[Process]) -> list[dict[str, Any]]:
    """Wait until every child is ready, let them go at once, and collect their JSON results."""
    await _wait_ready(workdir, procs, "ready-*")
    (workdir / "go").touch()
    return await _results(procs)


@pytest.mark.stress
async def test_claim_race_between_processes(store_backend: Backend, tmp_path: Path) -> None:
    """Eight processes, each with its own store, claim one pause at once (per round); one wins."""
    store = store_backend.open()
    await store.setup()
    procs: list[Process] = []
    try:
        with anyio.fail_after(60 + 5 * REPEAT):
            eids = [f"proc-race-{rnd}" for rnd in range(REPEAT)]
            for eid in eids:
                await _seed_pause(store, eid)
            for i in range(8):
                seqs = ",".join(str(3 + (i + rnd) % 2) for rnd in range(REPEAT))
                args = ["claim", *store_backend.child_args(), str(tmp_path), str(i), ",".join(eids), seqs]
                procs.append(await _spawn(args))
            for rnd in range(REPEAT):
                await _wait_ready(tmp_path, procs, f"ready-r{rnd}-*")
                (tmp_path / f"go-r{rnd}").touch()
            results = await _results(procs)
            for rnd, eid in enumerate(eids):
                outcomes = [r["rounds"][rnd] for r in results]
                kinds = [o["outcome"] for o in outcomes]
                assert kinds.count("won") == 1, (rnd, outcomes)
                assert all(k in ("AlreadyResumed", "WriteConflict") for k in kinds if k != "won"), (
                    rnd,
                    outcomes,
                )
                assert next(o for o in outcomes if o["outcome"] == "won")["context"] == {"amount": 120}
                await _check_claimed_once(store, eid)
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        with anyio.move_on_after(10):
            await store.close()


@pytest.mark.stress
async def test_two_processes_migrate_a_fresh_database_at_once(store_backend: Backend, tmp_path: Path) -> None:
    """Two processes set up the same fresh SQLite file / PostgreSQL schema at once; both succeed."""
    rounds = max(3, REPEAT // 2)
    extra_schemas: list[str] = []
    try:
        with anyio.fail_after(60 + 15 * rounds):
            for rnd in range(rounds):
                if store_backend.name == "sqlite":
                    backend = Backend("sqlite", str(tmp_path / f"fresh-{rnd}.db"))
                else:
                    backend = Backend("postgres", store_backend.target, f"{store_backend.schema}_{rnd}")
                    extra_schemas.append(backend.schema)
                workdir = tmp_path / f"migrate-{rnd}"
                workdir.mkdir()
                procs = [
                    await _spawn(["migrate", *backend.child_args(), str(workdir), str(i)]) for i in range(2)
                ]
                results = await _release_together(workdir, procs)
                assert [r["outcome"] for r in results] == ["ok", "ok"], results
                store = backend.open()
                try:
                    await store.setup()
                    row = make_row("after-migrate", 0)
                    await store.append(row)
                    assert await store.history("after-migrate") == [row]
                finally:
                    await store.close()
    finally:
        for schema in extra_schemas:
            await anyio.to_thread.run_sync(drop_pg_schema, schema)


async def test_ownership_lock_is_released_when_the_holder_is_killed(
    store_backend: Backend, tmp_path: Path
) -> None:
    """A child takes the run's lock; ours fails; SIGKILL the child; ours succeeds within a second."""
    store = store_backend.open()
    await store.setup()
    proc = await _spawn(["lock", *store_backend.child_args(), str(tmp_path), "0", "owned-run"])
    try:
        with anyio.fail_after(60):
            assert proc.stdout is not None
            line = await BufferedByteReceiveStream(proc.stdout).receive_until(b"\n", 65536)
            assert json.loads(line) == {"outcome": "locked"}, line
            assert await store.try_lock("owned-run") is False
            assert await store.try_lock("other-run") is True
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
            killed = time.monotonic()
            while not await store.try_lock("owned-run"):
                assert time.monotonic() - killed < 1.0, "the lock outlived its dead holder by over 1 s"
                await anyio.sleep(0.01)
            other = store_backend.open()
            await other.setup()
            try:
                assert await other.try_lock("owned-run") is False
            finally:
                await other.close()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await store.close()
