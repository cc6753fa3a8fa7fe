"""A cancel from another process reaches the owner's step in flight, on both stores.

The owner (a real process, ``_cancel_child.py``) runs a tool that sleeps 3 s before it charges
through ``@idempotent``. This process cancels the run meanwhile (``system.cancel``): the owner hears
of the cancel's marker from the store (PostgreSQL's notices, SQLite's row watch), stops the step
within about a second (an async tool is cancelled, a sync one's thread abandoned and refused its
charge when it gets there), and no charge happens; the run has one failed marker.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import anyio
import pytest
from _cancel_child import agent
from conftest import Backend

from actors import ActorSystem
from stores import RUN_END

pytestmark = pytest.mark.anyio

CHILD = Path(__file__).with_name("_cancel_child.py")
ROOT = Path(__file__).resolve().parents[3]
#: How soon after the cancel the owner must have stopped its tool (seconds; "about a second").
STOPPED_WITHIN = 1.5


@pytest.mark.parametrize("kind", ["async", "sync", "sync-keyed"])
async def test_a_cancel_from_another_process_stops_the_owners_tool(
    store_backend: Backend, tmp_path: Path, kind: str
) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests"), str(CHILD.parent)]),
        "CANCEL_TOOL": kind,
    }
    command = [sys.executable, str(CHILD), *store_backend.child_args(), str(tmp_path)]
    async with await anyio.open_process(command, env=env) as owner:
        with anyio.fail_after(30):
            while not (tmp_path / "entered").exists():  # noqa: ASYNC110
                await anyio.sleep(0.01)
        async with store_backend.open() as store, ActorSystem(store, runners=[agent(tmp_path)]) as system:
            cancelled_at = time.time()
            result = await system.cancel("run-c", "operator")
            assert result.status == "failed"
            assert owner.stdout is not None
            with anyio.fail_after(30):
                line = json.loads((await owner.stdout.receive()).split(b"\n")[0])
            assert line["outcome"] == "WriteConflict", line  # stopped by the cancel, nothing written
            print(
                f"{store_backend.name}: the owner stopped {line['stopped_at'] - cancelled_at:.3f} s after the cancel"
            )
            assert line["stopped_at"] - cancelled_at < STOPPED_WITHIN, line
            with anyio.fail_after(30):
                await owner.wait()
            assert owner.returncode == 0
            rows = await system.history("run-c")
            assert [r.seq for r in rows] == list(range(len(rows)))
            assert [(r.step_type, r.status) for r in rows if r.step_type == RUN_END] == [(RUN_END, "failed")]
    assert not (tmp_path / "charges").exists()  # the tool never reached its charge
