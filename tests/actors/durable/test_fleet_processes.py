"""The fleet with real processes (``_fleet_child.py``): workers killed mid-way, racing sweepers.

* 60 enqueued runs, 3 worker processes, one SIGKILLed mid-way (it serves alone first, charges 4
  runs, then holds the next ones inside their tool until the others are at work and it is killed):
  every run completes once, with one charge each as a deduplicating payment service records it
  (its ``idempotency_key()``), and the killed worker's runs, the held ones among them, are taken
  over within 1 s of its death.
* 4 processes sweep at once: each orphan (crashed mid-tool in a SIGKILLed process, or mid-model-call
  under an owner whose lock went) is taken exactly once, and no run a live process owns is touched.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
from _fleet_child import NAME, agent
from anyio.abc import Process
from conftest import Backend, until_ended

from actors import ActorSystem
from stores import LLM_CALL, RECOVER, RUN_END, Checkpoint

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[3]
CHILD = Path(__file__).with_name("_fleet_child.py")
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests"), str(CHILD.parent)])}


def _child(mode: str, backend: Backend, workdir: Path, *rest: str) -> list[str]:
    return [sys.executable, str(CHILD), mode, *backend.child_args(), str(workdir), *rest]


async def _line(stream: Any) -> dict[str, Any]:
    buffered = b""
    with anyio.fail_after(60):
        while b"\n" not in buffered:
            buffered += await stream.receive()
    return dict(json.loads(buffered.split(b"\n", 1)[0]))


def _charges(workdir: Path) -> list[list[str]]:
    path = workdir / "charges"
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def _charged_by(workdir: Path) -> collections.Counter[str]:
    """How many charges each worker process (by pid) has made."""
    return collections.Counter(pid for _order, _key, pid in _charges(workdir))


def _held(workdir: Path, pid: int) -> set[str]:
    """The runs whose tool call is held in process ``pid`` (see ``_fleet_child.agent``)."""
    return {path.name.removeprefix(f"held-{pid}-") for path in workdir.glob(f"held-{pid}-*")}


async def _start_workers(
    workers: list[Process], count: int, backend: Backend, workdir: Path, *rest: str
) -> list[Process]:
    """Start ``count`` worker processes at once (kept in ``workers`` for the clean-up) and wait
    until each serves."""
    started = []
    for _ in range(count):
        started.append(await anyio.open_process(_child("worker", backend, workdir, "0.1", *rest), env=ENV))
        workers.append(started[-1])
    for worker in started:
        assert worker.stdout is not None
        await _line(worker.stdout)
    return started


async def test_workers_finish_every_run_when_one_is_killed(store_backend: Backend, tmp_path: Path) -> None:
    runner = agent(tmp_path)
    async with store_backend.open() as store:
        async with ActorSystem(store, runners=[runner]) as system:
            ids = [await system.enqueue(runner, f"q{i:02d}", execution_id=f"q{i:02d}") for i in range(60)]
        workers: list[Process] = []
        try:
            # The victim serves alone first, so the queue still has runs for it once its first 4
            # calls have charged: it takes more, and holds each inside its tool call.
            [victim] = await _start_workers(workers, 1, store_backend, tmp_path, "4")
            with anyio.fail_after(60):
                while _charged_by(tmp_path)[str(victim.pid)] < 4 or not _held(tmp_path, victim.pid):  # noqa: ASYNC110
                    await anyio.sleep(0.005)
            # The other two join, and are at work (one of them has charged a run; the victim,
            # holding, takes at most 12 of the 60) before a held call gives up (60 s).
            with anyio.fail_after(45):
                others = await _start_workers(workers, 2, store_backend, tmp_path)
                while not {str(worker.pid) for worker in others} & set(_charged_by(tmp_path)):  # noqa: ASYNC110
                    await anyio.sleep(0.005)
            victim.send_signal(signal.SIGKILL)
            killed = datetime.now(UTC)
            await victim.wait()
            held = _held(tmp_path, victim.pid)  # runs the kill caught inside their tool call
            await until_ended(store, ids, timeout=180)
            histories = {eid: await store.history(eid) for eid in ids}
        finally:
            for worker in workers:
                if worker.returncode is None:
                    worker.kill()
                await worker.wait()
    for eid, rows in histories.items():
        ends = [r for r in rows if r.step_type == RUN_END]
        assert len(ends) == 1 and ends[0].status == "completed", (eid, [r.node_id for r in rows])
    ledger = collections.defaultdict(set)  # what a payment API deduplicating by the key records
    for order, key, _pid in _charges(tmp_path):
        ledger[order].add(key)
    assert {order: len(keys) for order, keys in ledger.items()} == {eid: 1 for eid in ids}
    # The killed worker's runs: taken over (their recover row written) within 1 s of its death.
    takeovers = sorted(
        (_after(rows, killed).created_at - killed).total_seconds()
        for rows in histories.values()
        if _after(rows, killed) is not None
    )
    assert takeovers, "the kill caught no run mid-way"
    assert takeovers[-1] < 1.0, takeovers
    taken_over = {eid for eid, rows in histories.items() if _after(rows, killed) is not None}
    assert held and held <= taken_over, (held, taken_over)
    (tmp_path / "takeovers.json").write_text(json.dumps(takeovers))


def _after(rows: list[Checkpoint], killed: datetime) -> Checkpoint | None:
    """The first recover row written after the kill by a run some worker had taken before it (a
    takeover; a run still queued at the kill has no recover row before it)."""
    taken = [r for r in rows if r.step_type == RECOVER and r.created_at > killed]
    before = [r for r in rows if r.created_at <= killed]
    if not taken or not any(r.step_type == RECOVER for r in before):
        return None
    return taken[0]


async def test_four_sweepers_take_each_orphan_once_and_no_live_run(
    store_backend: Backend, tmp_path: Path
) -> None:
    dead_dir, live_dir, sweep_dir = (tmp_path / name for name in ("dead", "live", "sweep"))
    for folder in (dead_dir, live_dir, sweep_dir):
        folder.mkdir()
    (dead_dir / "hold").touch()
    (live_dir / "hold").touch()
    store = store_backend.open()
    await store.setup()
    live = await anyio.open_process(_child("hold", store_backend, live_dir, "5", "live"), env=ENV)
    try:
        dead = await anyio.open_process(_child("hold", store_backend, dead_dir, "10", "dead"), env=ENV)
        async with dead:
            assert dead.stdout is not None
            assert await _line(dead.stdout) == {"holding": 10}
            dead.send_signal(signal.SIGKILL)  # 10 runs die mid-tool
            await dead.wait()
        for i in range(2):  # 2 runs die mid-model-call: their owner's lock goes with its store
            owner = store_backend.open()
            eid = f"model-{i}"
            assert await owner.try_lock(eid)
            await owner.append(
                Checkpoint(
                    execution_id=eid,
                    seq=0,
                    runner=NAME,
                    node_id="turn:0",
                    step_type=LLM_CALL,
                    agent_path=f"agent:{NAME}",
                    state_snapshot={"messages": [{"role": "user", "content": eid}], "turn": 0},
                )
            )
            await owner.close()
        assert live.stdout is not None
        assert await _line(live.stdout) == {"holding": 5}
        sweepers = [
            await anyio.open_process(_child("sweep", store_backend, sweep_dir), env=ENV) for _ in range(4)
        ]
        (sweep_dir / "start").touch()
        took = []
        for sweeper in sweepers:
            assert sweeper.stdout is not None
            took.append((await _line(sweeper.stdout))["took"])
            with anyio.fail_after(60):
                await sweeper.wait()
        orphans = [f"dead-{i}" for i in range(10)] + ["model-0", "model-1"]
        assert sum(took) == len(orphans), took
        for eid in orphans:
            rows = await store.history(eid)
            assert [r.step_type for r in rows].count(RECOVER) == 1, (eid, [r.node_id for r in rows])
            assert rows[-1].step_type == RUN_END and rows[-1].status == "completed"
        for i in range(5):
            rows = await store.history(f"live-{i}")
            assert [r.step_type for r in rows] == [LLM_CALL, "tool_call"]  # untouched
        assert await store.owned([f"live-{i}" for i in range(5)]) == {f"live-{i}" for i in range(5)}
        charged = collections.Counter(order for order, _key, _pid in _charges(sweep_dir))
        assert charged == dict.fromkeys(orphans, 1)
    finally:
        live.kill()
        await live.wait()
        await store.close()
