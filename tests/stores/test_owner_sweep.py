"""The sweep of dead owners and the queue, on SQLite and PostgreSQL: runs of owners whose process died
(two owner ids, so more than one dead owner at once) come before runs handed to the fleet, and
``owned()`` reads past its 500-id chunks.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import anyio
import pytest
from conftest import Backend

from stores import Checkpoint, Store

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 60.0

#: Two stores (two owner ids) in one process take a run each, write its first row, and the process
#: is killed: both owners are dead with their runs mid-step.
DIE = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from stores import Checkpoint, PostgresStore, SQLiteStore

    def opened(backend, target, schema):
        return SQLiteStore(target) if backend == "sqlite" else PostgresStore(target, schema=schema)

    async def main(backend, target, schema):
        for run in ("dead-a", "dead-b"):
            store = opened(backend, target, schema)
            await store.setup()
            assert await store.try_lock(run)
            await store.append(Checkpoint(execution_id=run, seq=0, runner="a", node_id="turn:0", state_snapshot={}))
        print("ready", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

    asyncio.run(main(*sys.argv[1:]))
    """
)


def first_row(execution_id: str) -> Checkpoint:
    return Checkpoint(execution_id=execution_id, seq=0, runner="a", node_id="turn:0", state_snapshot={})


async def test_the_sweep_finds_every_dead_owners_runs_before_the_queue(store_backend: Backend) -> None:
    store: Store = store_backend.open()
    await store.setup()
    try:
        assert await store.try_lock("queued")
        await store.append(first_row("queued"))
        await store.unlock("queued")  # left mid-step: handed to the fleet, no owner
        assert await store.unowned(["queued", "dead-a"]) == {"queued"}
        with anyio.fail_after(LIMIT):
            child = await anyio.run_process(
                [sys.executable, "-c", DIE, *store_backend.child_args()], cwd=ROOT, check=False
            )
        assert child.stdout.decode().strip() == "ready", child.stderr.decode()
        assert child.returncode == -9
        with anyio.fail_after(LIMIT):
            # A dead PostgreSQL session goes within milliseconds: poll the store until it has.
            while len(found := await store.orphans()) < 3:  # noqa: ASYNC110 (another process's death)
                await anyio.sleep(0.02)
        assert sorted(found[:2]) == ["dead-a", "dead-b"] and found[2] == "queued", found
        assert await store.orphans(limit=1) in (["dead-a"], ["dead-b"])  # recovery first
        assert await store.owned(["dead-a", "dead-b", "queued"]) == set()  # dead owners own nothing
        assert await store.unowned(["queued", "dead-a", "dead-b"]) == {"queued"}
        assert await store.try_lock("dead-b")  # a sweep takes a dead owner's run
        assert await store.owned(["dead-a", "dead-b"]) == {"dead-b"}
        assert await store.orphans() == ["dead-a", "queued"]
    finally:
        await store.close()


async def test_owned_reads_past_500_ids(store_backend: Backend) -> None:
    ids = [f"run-{i:04d}" for i in range(1001)]
    taken = [ids[0], ids[499], ids[500], ids[999], ids[1000]]
    store: Store = store_backend.open()
    await store.setup()
    try:
        with anyio.fail_after(LIMIT):
            for run in taken:
                assert await store.try_lock(run)
                await store.append(first_row(run))
            assert await store.owned(ids) == set(taken)
            assert await store.owned(ids[::-1]) == set(taken)
    finally:
        await store.close()
