"""Workers and runner versions, with real processes (``_versions_child.py``), on SQLite and PostgreSQL.

A worker that has only version "2" leaves every queued or orphaned run of version "1" as it is for
as long as it serves (no row written, never failed), while it still takes the "2" runs behind them
(more "1" runs wait than it has room for); a worker with "1" then finishes them.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import anyio
import pytest
from _versions_child import build
from conftest import Backend, until_ended

from actors import ActorSystem
from stores import TOOL_CALL, Store

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[3]
CHILD = Path(__file__).with_name("_versions_child.py")
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests"), str(CHILD.parent)])}


def _child(backend: Backend, workdir: Path, mode: str, builds: str, *rest: str) -> list[str]:
    return [sys.executable, str(CHILD), mode, *backend.child_args(), str(workdir), builds, *rest]


async def _snapshot(store: Store, ids: list[str]) -> dict[str, list[str]]:
    return {eid: [row.checkpoint_id for row in await store.history(eid)] for eid in ids}


async def test_a_worker_leaves_runs_of_another_version_alone(store_backend: Backend, tmp_path: Path) -> None:
    v1, v2 = build(tmp_path, "1"), build(tmp_path, "2")
    # A run of "1" that crashed inside its tool: its process is killed there.
    (tmp_path / "hold").touch()
    spawner = await anyio.open_process(
        _child(store_backend, tmp_path, "spawn", "1", "crashed", "o0"), env=ENV
    )
    try:
        with anyio.fail_after(60):
            while not (tmp_path / "entered-o0").exists():  # noqa: ASYNC110
                await anyio.sleep(0.01)
    finally:
        spawner.send_signal(signal.SIGKILL)
        await spawner.wait()
    (tmp_path / "hold").unlink()
    async with store_backend.open() as store:
        async with ActorSystem(store, runners=[v1, v2]) as system:
            old = ["crashed"] + [
                await system.enqueue(v1, f"o{i}", execution_id=f"old-{i}") for i in range(1, 6)
            ]
            new = await system.enqueue(v2, "n1", execution_id="new")
            assert (await store.latest("crashed")).step_type == TOOL_CALL  # type: ignore[union-attr]
            before = await _snapshot(store, old)
            standing = {eid: (await system.status(eid)).status for eid in old}
            assert standing == {"crashed": "orphaned", **{eid: "queued" for eid in old[1:]}}

        # A worker with only "2" (room for 4 runs, 6 of "1" waiting) serves for 3 s.
        with anyio.fail_after(90):
            served = await anyio.run_process(_child(store_backend, tmp_path, "serve", "2", "3"), env=ENV)
        assert b'"served": true' in served.stdout, served.stderr.decode()
        async with ActorSystem(store, runners=[v2]) as system:
            assert (await system.ref(new).result(timeout=10)).output == "done: 2 refunded n1"
            assert await _snapshot(store, old) == before  # nothing written for the "1" runs
            after = {eid: await system.status(eid) for eid in old}
            assert {eid: s.status for eid, s in after.items()} == standing
            assert {s.version for s in after.values()} == {"1"}

        # A worker with "1" finishes them.
        worker = await anyio.open_process(_child(store_backend, tmp_path, "serve", "1", "60"), env=ENV)
        try:
            await until_ended(store, old, timeout=60)
        finally:
            worker.send_signal(signal.SIGKILL)
            await worker.wait()
        async with ActorSystem(store, runners=[v1]) as system:
            outputs = {eid: (await system.ref(eid).result(timeout=10)).output for eid in old}
        assert outputs == {
            "crashed": "done: 1 refunded o0",
            **{f"old-{i}": f"done: 1 refunded o{i}" for i in range(1, 6)},
        }
