"""SQLite: another process holds the write lock for 75 s under two ``tether worker`` processes (stress).

30 queued runs whose tool charges through ``@idempotent`` (the runner of the PostgreSQL restart
test, ``tests/stores/postgres/_outage_runner.py``). Once some have finished, a process takes the
database's write lock (``BEGIN IMMEDIATE``) and freezes for 75 s: every write of the workers waits
behind it. A store outage is a pause, not a failure: no run gets a failed marker, both workers keep
running, and every run completes after the freeze, each charge once and no gap in ``seq``.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from types import ModuleType

import anyio
import pytest
from conftest import stop_processes

from actors import ActorSystem
from stores import RUN_END, SQLiteStore

pytestmark = [pytest.mark.anyio, pytest.mark.stress]

RUNS = 30
FREEZE = 75.0
TETHER = Path(sys.executable).parent / "tether"
RUNNERS = Path(__file__).resolve().parents[2] / "stores" / "postgres"
FREEZER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("ROLLBACK")
"""


def _runner_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_outage_runner", RUNNERS / "_outage_runner.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def _ended(store: SQLiteStore, ids: list[str]) -> int:
    count = 0
    for eid in ids:
        newest = await store.latest(eid)
        count += newest is not None and newest.step_type == RUN_END
    return count


async def test_runs_complete_after_a_75_s_write_lock_of_another_process(tmp_path: Path) -> None:
    runner = _runner_module()
    path, ledger = tmp_path / "tether.db", tmp_path / "ledger"
    async with SQLiteStore(path) as store, ActorSystem(store) as system:
        ids = [await system.enqueue(runner.agent, f"o{i}", execution_id=f"run-{i}") for i in range(RUNS)]
    env = {
        **{k: v for k, v in os.environ.items() if k != "TETHER_STORE"},
        "PYTHONPATH": str(RUNNERS),
        "TETHER_TEST_LEDGER": str(ledger),
    }
    command = [str(TETHER), "worker", "--runner", "_outage_runner:agent", "--concurrency", "4"]
    command += ["--poll", "0.2", "--store", f"sqlite:///{path}"]
    logs = [(tmp_path / f"worker-{n}.err").open("wb") for n in range(2)]
    workers = [
        await anyio.open_process(command, env=env, stdout=subprocess.DEVNULL, stderr=log) for log in logs
    ]
    try:
        async with SQLiteStore(path) as store:
            with anyio.fail_after(60):
                while await _ended(store, ids) < 5:  # noqa: ASYNC110
                    await anyio.sleep(0.1)
            async with await anyio.open_process(
                [sys.executable, "-c", FREEZER, str(path), str(FREEZE)]
            ) as freezer:
                assert freezer.stdout is not None
                assert (await freezer.stdout.receive()).startswith(b"locked")
                frozen_at = time.monotonic()
                before = await _ended(store, ids)
                with anyio.fail_after(FREEZE + 30):
                    await freezer.wait()
            print(
                f"froze the writers for {time.monotonic() - frozen_at:.1f} s with {before} of {RUNS} runs ended"
            )
            for worker in workers:
                assert worker.returncode is None, "a worker exited during the freeze"
            with anyio.fail_after(180):
                while await _ended(store, ids) < RUNS:  # noqa: ASYNC110
                    await anyio.sleep(0.2)
            for worker in workers:
                assert worker.returncode is None, "a worker exited"
            for eid in ids:
                rows = await store.history(eid)
                assert [r.seq for r in rows] == list(range(len(rows))), eid
                assert rows[-1].step_type == RUN_END and rows[-1].status == "completed", (
                    eid,
                    rows[-1].state_snapshot.get("run_error"),
                )
    finally:
        await stop_processes(workers)
        for log in logs:
            log.close()
    charges = Counter(line.split()[0] for line in ledger.read_text().splitlines())
    assert sorted(charges) == sorted(f"o{i}" for i in range(RUNS))
    assert max(charges.values()) == 1, charges
