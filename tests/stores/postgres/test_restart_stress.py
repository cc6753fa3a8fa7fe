"""PostgreSQL restarted under three ``tether worker`` processes serving 200 queued runs (stress).

Each round enqueues 200 runs whose tool charges through ``@idempotent`` (a ledger file, fsynced),
starts three real workers, restarts the server (``pg_ctlcluster ... restart``) once about a third of
the runs are done, and waits for the rest. A store outage is a pause, not a failure: every worker
keeps running, every run completes with no human, no run has a failed marker or a gap in ``seq``,
and each charge ran once. Three rounds. It restarts the machine's PostgreSQL: run it alone with
``pytest -m stress tests/stores/postgres/test_restart_stress.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import anyio
import anyio.to_thread
import asyncpg
import pytest
from _outage_runner import NAME, agent
from anyio.abc import Process
from conftest import PgSchema, stop_processes

from actors import ActorSystem
from stores import RUN_END, PostgresStore

pytestmark = [pytest.mark.anyio, pytest.mark.postgres, pytest.mark.stress]


@pytest.fixture
def anyio_backend() -> str:
    """asyncio: the test itself talks to PostgreSQL through asyncpg, an asyncio driver."""
    return "asyncio"


RUNS = 200
WORKERS = 3
TETHER = Path(sys.executable).parent / "tether"
HERE = Path(__file__).resolve().parent


def _restart_postgres() -> float:
    """Restart the local cluster; seconds until it answers again."""
    version = sorted(os.listdir("/etc/postgresql"))[-1]
    started = time.monotonic()
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return time.monotonic() - started


async def _ended(dsn: str, schema: str) -> int:
    """How many runs have a run_end row (0 while the server does not answer)."""
    try:
        conn = await asyncpg.connect(dsn, timeout=5)
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
        return 0
    try:
        count: int = await conn.fetchval(
            f'SELECT count(*) FROM "{schema}".checkpoints WHERE step_type = $1', RUN_END
        )
        return count
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
        return 0
    finally:
        await conn.close()


async def _until_ended(dsn: str, schema: str, count: int, workers: list[Process], limit: float) -> None:
    with anyio.fail_after(limit):
        while await _ended(dsn, schema) < count:
            for worker in workers:
                assert worker.returncode is None, f"a worker exited with status {worker.returncode}"
            await anyio.sleep(0.2)


@pytest.mark.parametrize("round_", range(3))
async def test_every_run_completes_once_across_a_postgres_restart(
    pg_schema: PgSchema, tmp_path: Path, round_: int
) -> None:
    ledger = tmp_path / "ledger"
    async with PostgresStore(pg_schema.dsn, schema=pg_schema.schema) as store, ActorSystem(store) as system:
        ids = [await system.enqueue(agent, f"r{round_}-o{i}", execution_id=f"run-{i}") for i in range(RUNS)]
    url = f"{pg_schema.dsn}?schema={pg_schema.schema}"
    env = {
        **{k: v for k, v in os.environ.items() if k != "TETHER_STORE"},
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        "TETHER_TEST_LEDGER": str(ledger),
    }
    command = [str(TETHER), "worker", "--runner", "_outage_runner:agent", "--poll", "0.2", "--store", url]
    logs = [(tmp_path / f"worker-{n}.err").open("wb") for n in range(WORKERS)]
    workers = [
        await anyio.open_process(command, env=env, stdout=subprocess.DEVNULL, stderr=logs[n])
        for n in range(WORKERS)
    ]
    try:
        await _until_ended(pg_schema.dsn, pg_schema.schema, RUNS // 3, workers, 120)
        downtime = await anyio.to_thread.run_sync(_restart_postgres)
        print(f"round {round_}: restarted PostgreSQL in {downtime:.2f} s")
        await _until_ended(pg_schema.dsn, pg_schema.schema, RUNS, workers, 240)
        for worker in workers:
            assert worker.returncode is None, f"a worker exited with status {worker.returncode}"
    finally:
        await stop_processes(workers)
        for log in logs:
            log.close()
    logged = "\n".join((tmp_path / f"worker-{n}.err").read_text() for n in range(WORKERS))
    assert "run failed" not in logged and "run given up" not in logged, logged
    async with PostgresStore(pg_schema.dsn, schema=pg_schema.schema) as store:
        for eid in ids:
            rows = await store.history(eid)
            assert [r.seq for r in rows] == list(range(len(rows))), eid  # no gap
            ends = [r for r in rows if r.step_type == RUN_END]
            assert len(ends) == 1 and ends[0] is rows[-1], eid
            assert ends[0].status == "completed", (eid, ends[0].state_snapshot.get("run_error"))
            assert rows[0].runner == NAME
        assert await store.pending() == []  # no human was needed
    charges = Counter(line.split()[0] for line in ledger.read_text().splitlines())
    assert sorted(charges) == sorted(f"r{round_}-o{i}" for i in range(RUNS))
    twice = {order: n for order, n in charges.items() if n > 1}
    assert not twice, twice
