"""A topology is cancelled, pruned and forked like an Agent, on both backends."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import anyio
import pytest
from _team import BASELINE, OUTPUT, counts, team
from conftest import Backend

from actors import ActorSystem, Agent, Resume, Supervisor, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import FORK_ORIGIN, RUN_END

pytestmark = pytest.mark.anyio

DEEP = "supervisor:ops/worker:support/agent:billing/tool:refund"


@pytest.fixture
def gated(tmp_path: Path) -> Iterator[Path]:
    """Billing's refund pauses for a decision; counts go to a ledger in the test's directory."""
    ledger = tmp_path / "ledger"
    saved = {key: os.environ.get(key) for key in ("TEAM_LEDGER", "TEAM_GATES")}
    os.environ.update(TEAM_LEDGER=str(ledger), TEAM_GATES="billing")
    yield ledger
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


async def test_cancel_of_a_paused_nested_run_drops_its_pending_row(
    store_backend: Backend, gated: Path
) -> None:
    runner = team()
    async with store_backend.open() as store, ActorSystem(store, runners=[runner]) as system:
        with anyio.fail_after(30):
            paused = await (await system.spawn(runner, "run ops", execution_id="c1")).result()
            assert paused.pending is not None and paused.pending.agent_path == DEEP
            cancelled = await system.cancel("c1", reason="customer withdrew")
            assert await store.pending("c1") == []
            rows = await system.history("c1")
    assert cancelled.status == "failed" and cancelled.error == "cancelled: customer withdrew"
    assert rows[-1].step_type == RUN_END and rows[-1].agent_path == "supervisor:ops"
    assert rows[-1].state_snapshot["run_reason"] == "customer withdrew"


async def test_prune_keeps_a_paused_topology_resumable(store_backend: Backend, gated: Path) -> None:
    runner = team()
    async with store_backend.open() as store, ActorSystem(store, runners=[runner]) as system:
        with anyio.fail_after(30):
            await (await system.spawn(runner, "run ops", execution_id="p1")).result()
            before = await system.history("p1")
            pruned = await system.prune(timedelta(0))
            kept = await system.history("p1")
            done = await system.resume("p1", Resume(approved=True, metadata={"approver": "ann"}))
    assert pruned > 0 and len(kept) < len(before)
    assert done.status == "completed"
    assert done.output == OUTPUT
    # Nothing that completed before the pause ran again after the prune.
    assert counts(gated) == BASELINE + Counter({"tool refund": 1, "charge 1042": 1})


async def test_fork_from_the_newest_step_and_from_a_checkpoint_inside_a_worker(
    store_backend: Backend, gated: Path
) -> None:
    runner = team()
    async with store_backend.open() as store, ActorSystem(store, runners=[runner]) as system:
        with anyio.fail_after(30):
            await (await system.spawn(runner, "run ops", execution_id="f1")).result()
            base = await system.history("f1")
            # From the newest step (the deep pause): the fork re-runs that tool, which pauses again.
            fork = await (await system.fork("f1")).result()
            assert fork.status == "paused" and fork.pending is not None and fork.pending.agent_path == DEEP
            resumed = await system.resume(
                fork.execution_id, Resume(approved=True, metadata={"approver": "f"})
            )
            assert resumed.status == "completed" and resumed.output == OUTPUT
            # From the clerk's model call: the clerk's turn is issued again; the run goes on from there.
            clerk_turn = next(
                r for r in base if r.agent_path == "supervisor:ops/worker:clerk" and r.node_id == "turn:0"
            )
            second = await (await system.fork("f1", checkpoint_id=clerk_turn.checkpoint_id)).result()
            assert (
                second.status == "paused" and second.pending is not None and second.pending.agent_path == DEEP
            )
            rows = await system.history(second.execution_id)
            original = await system.history("f1")
    origin = next(r for r in rows if r.step_type == FORK_ORIGIN)
    assert origin.parent_checkpoint_id == clerk_turn.checkpoint_id
    assert next(r.agent_path for r in rows if r.seq > origin.seq) == "supervisor:ops/worker:clerk"
    assert original == base  # the base run is untouched


async def test_cancel_of_a_running_nested_run_stops_the_deep_tool(store_backend: Backend) -> None:
    entered, stopped = anyio.Event(), anyio.Event()

    @tool
    async def wait() -> str:
        """Waits until cancelled."""
        entered.set()
        try:
            await anyio.sleep(30)
        finally:
            stopped.set()
        return "never"

    def worker(messages: list[Message]) -> str | ModelReply:
        return ModelReply(tool_calls=[ToolCall("wait", {})])

    def manager(messages: list[Message]) -> str | ModelReply:
        return ModelReply(tool_calls=[ToolCall("delegate_to_w", {"task": "wait"})])

    sup = Supervisor(
        "s", Agent("m", FunctionModel(manager)), {"w": Agent("w", FunctionModel(worker), tools=[wait])}
    )
    async with store_backend.open() as store, ActorSystem(store) as system:
        with anyio.fail_after(20):
            ref = await system.spawn(sup, "go", execution_id="running")
            await entered.wait()
            cancelled = await system.cancel("running", reason="stop")
            await stopped.wait()  # the child actor's tool was cancelled, not left running
            result = await ref.result()
            rows = await system.history("running")
            for _ in range(500):  # the run's actor passivates (its child stopped before it)
                if system.runtime.registry.lookup("running") is None:
                    break
                await anyio.sleep(0.01)
            assert system.runtime.registry.lookup("running") is None
    assert cancelled.status == "failed" and result.status == "failed"
    assert result.error == "cancelled: stop"
    assert [r.step_type for r in rows].count(RUN_END) == 1 and rows[-1].agent_path == "supervisor:s"
    assert rows[-2].agent_path == "supervisor:s/worker:w/tool:wait"
