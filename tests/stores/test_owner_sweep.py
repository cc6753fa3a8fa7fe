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

from stores import Checkpoint, PendingInterrupt, RunExists, Store

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
        assert await store.ownership(["queued", "dead-a", "dead-b"]) == (set(), {"queued"})
        assert await store.try_lock("dead-b")  # a sweep takes a dead owner's run
        assert await store.owned(["dead-a", "dead-b"]) == {"dead-b"}
        assert await store.ownership(["queued", "dead-a", "dead-b"]) == ({"dead-b"}, {"queued"})
        assert await store.ownership([]) == (set(), set())
        assert await store.orphans() == ["dead-a", "queued"]
    finally:
        await store.close()


async def test_owned_unowned_and_ownership_read_past_500_ids(store_backend: Backend) -> None:
    ids = [f"run-{i:04d}" for i in range(1002)]
    held = [ids[0], ids[500], ids[1000]]  # the first of a chunk, or of no chunk if they were 501
    queued = [ids[499], ids[501], ids[1001]]
    store: Store = store_backend.open()
    await store.setup()
    try:
        with anyio.fail_after(LIMIT):
            for run in held + queued:
                assert await store.try_lock(run)
                await store.append(first_row(run))
            for run in queued:
                await store.unlock(run)  # left mid-step: handed to the fleet
            for order in (ids, ids[::-1]):
                assert await store.owned(order) == set(held)
                assert await store.unowned(order) == set(queued)
                assert await store.ownership(order) == (set(held), set(queued))  # one read of both
    finally:
        await store.close()


async def test_a_first_row_records_the_take_and_a_pause_rests_the_run(store_backend: Backend) -> None:
    """The take of a run created with its first row is written by that row; a pause deletes it."""
    store: Store = store_backend.open()
    other: Store = store_backend.open()  # another owner id
    await store.setup()
    await other.setup()
    try:
        with anyio.fail_after(LIMIT):
            assert await store.try_lock_with_first_row("r")
            await store.append(first_row("r"))
            assert await other.owned(["r"]) == {"r"} and await other.unowned(["r"]) == set()
            assert await other.ownership(["r"]) == ({"r"}, set())
            assert not await other.try_lock("r")
            assert await other.try_lock_with_first_row("r")  # the take is checked in the row's write
            with pytest.raises(RunExists) as caught:
                await other.append(first_row("r"))
            assert str(caught.value) == "run 'r' is owned by another live process or actor"
            await other.unlock("r")
            pause = Checkpoint(
                execution_id="r",
                seq=1,
                runner="a",
                node_id="turn:1",
                step_type="hitl_pause",
                status="interrupted",
                state_snapshot={},
            )
            await store.append_pause(pause, PendingInterrupt(execution_id="r", reason="approve?"))
            await store.unlock("r")  # (SQLite deleted the take with the pause row already)
            # A paused run rests: no one's, not handed to the fleet, not an orphan.
            assert await other.owned(["r"]) == set() and await other.unowned(["r"]) == set()
            assert await other.orphans() == []
            assert await store.try_lock("s")
            await store.append(first_row("s"))
            step = Checkpoint(
                execution_id="s",
                seq=1,
                runner="a",
                node_id="turn:0/tool:t",
                step_type="tool_call",
                status="interrupted",
                state_snapshot={},
            )
            await store.append(step)
            await store.unlock("s")  # an interrupted tool step does not rest: the fleet takes it
            assert await other.unowned(["s"]) == {"s"} and await other.orphans() == ["s"]
            assert await other.ownership(["s"]) == (set(), {"s"})
    finally:
        await other.close()
        await store.close()
