"""A Supervisor -> Swarm -> Agent run killed and paused at its inner boundaries, on both backends.

Real child processes (``_team.py``) run the topology and die by ``os._exit(17)`` at a crash point,
or pause at an ``interrupt()`` gate; recovery and resumes happen in other processes. Per-agent
counters of model calls and tool runs (the ledger) prove that recovery re-ran only the step in
flight: nothing that completed ran again, and the manager's earlier turns were not re-issued.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest
from _team import BASELINE, OUTPUT, counts, team
from conftest import Backend

from actors import ActorSystem, Resume
from stores import HANDOFF, RECOVER, RESUME, RUN_END

pytestmark = pytest.mark.anyio

TEAM = Path(__file__).with_name("_team.py")
#: Bound on one child process (an interpreter start, a store, a run).
CHILD_LIMIT = 90.0


async def child(
    backend: Backend, ledger: Path, mode: str, execution_id: str, *extra: str, **env: str
) -> dict[str, Any]:
    """Run ``_team.py`` in a fresh interpreter; its JSON line, or ``{"exit": code}`` when it died."""
    with anyio.fail_after(CHILD_LIMIT):
        done = await anyio.run_process(
            [
                sys.executable,
                str(TEAM),
                mode,
                *backend.child_args()[:2],
                backend.schema or "-",
                execution_id,
                *extra,
            ],
            env={**os.environ, "TEAM_LEDGER": str(ledger), **env},
            check=False,
        )
    if done.returncode != 0:
        return {"exit": done.returncode, "stderr": done.stderr.decode()[-2000:]}
    line: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return line


async def wait_unlocked(backend: Backend, execution_id: str) -> None:
    """Wait (at most 5 s) until the dead child's ownership lock is free (PostgreSQL sees the
    disconnect a few ms after the process is reaped)."""
    async with backend.open() as probe:
        for _ in range(500):
            if await probe.try_lock(execution_id):
                await probe.unlock(execution_id)
                return
            await anyio.sleep(0.01)
    pytest.fail(f"the lock of {execution_id!r} is still held 5 s after its owner died")


@pytest.mark.parametrize(
    ("point", "path"),
    [
        ("worker_tool", "supervisor:ops/worker:clerk/tool:file_report"),
        ("manager_after_delegation", "supervisor:ops"),
        ("between_handoffs", "supervisor:ops/worker:support/agent:billing/tool:refund"),
        ("member_model", "supervisor:ops/worker:support/agent:closer"),
    ],
)
async def test_a_crash_inside_a_topology_reruns_only_the_step_in_flight(
    store_backend: Backend, tmp_path: Path, point: str, path: str
) -> None:
    ledger = tmp_path / "ledger"
    died = await child(store_backend, ledger, "spawn", "ops-1", TEAM_CRASH=point)
    assert died.get("exit") == 17, died
    before = counts(ledger)
    await wait_unlocked(store_backend, "ops-1")

    # Recovery in this process (another one than the one that died), with a fresh build of the runner.
    os.environ["TEAM_LEDGER"] = str(ledger)
    runner = team()
    async with store_backend.open() as store, ActorSystem(store, runners=[runner]) as system:
        with anyio.fail_after(30):
            result = await system.resume("ops-1")
        rows = await system.history("ops-1")
    assert result.status == "completed", result
    assert result.output == OUTPUT

    # Exactly one bookkeeping row, at the deepest step in flight, and nothing written twice.
    recovers = [row for row in rows if row.step_type == RECOVER]
    assert [row.agent_path for row in recovers] == [path]
    assert [row.seq for row in rows] == list(range(len(rows)))
    assert [row.step_type for row in rows].count(RUN_END) == 1
    assert [(row.node_id, row.node_input) for row in rows if row.step_type == HANDOFF] == [
        ("handoff:0", {"from": "triage", "to": "billing", "reason": "a refund"}),
        ("handoff:1", {"from": "billing", "to": "closer", "reason": "refunded"}),
    ]
    # The crashed step ran once more; everything that had completed, never again.
    crashed = {
        "worker_tool": "tool file_report",
        "manager_after_delegation": "model boss",
        "between_handoffs": "tool refund",
        "member_model": "model closer",
    }[point]
    assert counts(ledger) == BASELINE + Counter({crashed: 1, "charge 1042": 1}), (before, counts(ledger))


async def test_shared_written_by_a_member_is_read_by_a_later_member_after_a_crash(
    store_backend: Backend, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    died = await child(store_backend, ledger, "spawn", "ops-2", TEAM_CRASH="member_model")
    assert died.get("exit") == 17, died
    await wait_unlocked(store_backend, "ops-2")
    done = await child(store_backend, ledger, "recover", "ops-2")
    assert done == {"status": "completed", "output": OUTPUT, "pending": None}
    async with store_backend.open() as store:
        rows = await store.history("ops-2")
    confirm = next(row for row in rows if row.node_id == "turn:0/tool:confirm")
    assert confirm.state_snapshot["shared"] == {"order": "1042", "refunded": "1042"}


async def test_a_deep_pause_resumes_from_another_process_once(store_backend: Backend, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    paused = await child(store_backend, ledger, "spawn", "ops-3", TEAM_GATES="billing")
    deep = "supervisor:ops/worker:support/agent:billing/tool:refund"
    assert paused == {"status": "paused", "output": None, "pending": deep}
    async with store_backend.open() as store:
        pending = await store.pending("ops-3")
    assert [(p.agent_path, p.node_id, p.reason) for p in pending] == [
        (deep, "turn:0/tool:refund", "approve refund")
    ]

    # Five resumer processes race for the pause: one wins, the others are refused.
    outcomes: list[dict[str, Any]] = []

    async def resume(n: int) -> None:
        outcomes.append(
            await child(store_backend, ledger, "resume", "ops-3", f"alice-{n}", TEAM_GATES="billing")
        )

    async with anyio.create_task_group() as tg:
        for n in range(5):
            tg.start_soon(resume, n)
    statuses = sorted(o.get("status", str(o)) for o in outcomes)
    assert statuses == ["completed"] + ["refused"] * 4, outcomes
    assert {o["error"] for o in outcomes if o["status"] == "refused"} == {"AlreadyResumed"}
    winner = next(o for o in outcomes if o["status"] == "completed")
    assert winner["output"].startswith("ops: clerk: filed 1042 (-) | closed: confirmed refund of 1042")

    async with store_backend.open() as store:
        rows = await store.history("ops-3")
        assert await store.pending("ops-3") == []
    assert [row.agent_path for row in rows if row.step_type == RESUME] == [deep]
    # The charge before interrupt() ran once; nothing before the pause ran twice; the refund tool
    # ran twice (its pass that paused, and its pass with the decision).
    assert counts(ledger) == BASELINE + Counter({"tool refund": 1, "charge 1042": 1})


async def test_two_gates_in_two_workers_need_two_resumes(store_backend: Backend, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    os.environ["TEAM_LEDGER"] = str(ledger)
    os.environ["TEAM_GATES"] = "both"
    try:
        runner = team()
        async with store_backend.open() as store, ActorSystem(store, runners=[runner]) as system:
            with anyio.fail_after(30):
                first = await (await system.spawn(runner, "run ops", execution_id="ops-4")).result()
                assert first.pending is not None
                assert first.pending.agent_path == "supervisor:ops/worker:clerk/tool:file_report"
                second = await system.resume("ops-4", Resume(approved=True, metadata={"approver": "ann"}))
                # The first decision approved only the clerk's gate: billing's gate pauses again.
                assert second.status == "paused"
                assert second.pending is not None
                assert second.pending.agent_path == "supervisor:ops/worker:support/agent:billing/tool:refund"
                third = await system.resume("ops-4", Resume(approved=True, metadata={"approver": "bob"}))
            rows = await system.history("ops-4")
    finally:
        del os.environ["TEAM_GATES"]
    assert third.status == "completed"
    assert third.output == "ops: clerk: filed 1042 (ann) | closed: confirmed refund of 1042 for order 1042"
    refund = next(row for row in rows if row.node_id == "turn:0/tool:confirm")
    assert refund.state_snapshot["shared"]["refunded"] == "1042"
    assert [row.node_input["resume"]["metadata"] for row in rows if row.step_type == RESUME] == [
        {"approver": "ann"},
        {"approver": "bob"},
    ]
