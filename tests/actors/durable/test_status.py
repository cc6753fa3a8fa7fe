"""``system.status(id)`` and ``system.runs(...)``: how runs stand, for runs of any process.

Completed, failed, paused (with its pending row) in this process; ``running`` for a run a live child
process owns mid-tool, ``orphaned`` for one whose child died with ``os._exit`` mid-tool. Reading a
status takes no lock: the live owner finishes its run after being read, and the orphan is recovered
by the reader right after. Both backends.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest
from conftest import Backend

from actors import ActorSystem, Agent, Resume, RunNotFound, RunSummary, interrupt, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall

pytestmark = pytest.mark.anyio

LIMIT = 60.0
CHILD = Path(__file__).with_name("_status_child.py")


def approval_agent() -> Agent:
    @tool
    def refund(amount: int) -> str:
        """Refund, after a manager's approval."""
        return f"approved={interrupt('manager_approval', {'amount': amount}).approved}"

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"Done: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("refund", {"amount": 500})])

    return Agent("approver", FunctionModel(model), tools=[refund])


def failing_agent() -> Agent:
    def model(messages: list[Message]) -> str:
        raise RuntimeError("the model broke")

    return Agent("breaker", FunctionModel(model))


async def child(mode: str, backend: Backend, workdir: Path, execution_id: str) -> anyio.abc.Process:
    return await anyio.open_process(
        [sys.executable, str(CHILD), mode, *backend.child_args(), str(workdir), execution_id]
    )


async def test_status_and_runs_of_finished_and_paused_runs(store_backend: Backend) -> None:
    approver, breaker = approval_agent(), failing_agent()
    done = Agent("answerer", FunctionModel(lambda messages: "forty-two"))
    store = store_backend.open()
    with anyio.fail_after(LIMIT):
        async with store, ActorSystem(store, runners=[approver, breaker, done]) as system:
            await (await system.spawn(done, "q", execution_id="r-done")).result(timeout=10)
            await (await system.spawn(breaker, "q", execution_id="r-failed")).result(timeout=10)
            await (await system.spawn(approver, "q", execution_id="r-paused")).result(timeout=10)
            await (await system.spawn(approver, "q", execution_id="r-cancelled")).result(timeout=10)
            await system.cancel("r-cancelled", reason="no longer needed")

            completed = await system.status("r-done")
            assert isinstance(completed, RunSummary)
            assert (completed.status, completed.runner, completed.output, completed.error) == (
                "completed",
                "answerer",
                "forty-two",
                None,
            )
            assert (completed.node_id, completed.agent_path, completed.rows) == (
                "run_end",
                "agent:answerer",
                2,
            )
            failed = await system.status("r-failed")
            assert failed.status == "failed" and "the model broke" in (failed.error or ""), failed
            paused = await system.status("r-paused")
            assert paused.status == "paused" and paused.pending is not None
            assert (paused.pending.reason, paused.pending.context) == ("manager_approval", {"amount": 500})
            assert (paused.node_id, paused.rows) == ("turn:0/tool:refund", 3)
            cancelled = await system.status("r-cancelled")
            assert (cancelled.status, cancelled.error, cancelled.pending) == (
                "failed",
                "cancelled: no longer needed",
                None,
            )

            everything = await system.runs()
            assert [s.execution_id for s in everything] == ["r-cancelled", "r-paused", "r-failed", "r-done"]
            assert [s.execution_id for s in await system.runs(status="paused")] == ["r-paused"]
            assert [s.execution_id for s in await system.runs(status="failed")] == ["r-cancelled", "r-failed"]
            assert [s.execution_id for s in await system.runs(runner="approver")] == [
                "r-cancelled",
                "r-paused",
            ]
            assert [s.execution_id for s in await system.runs(limit=2)] == ["r-cancelled", "r-paused"]
            assert await system.runs(status="running") == [] == await system.runs(status="orphaned")

            # Resuming the pause moves it to completed.
            await system.resume("r-paused", Resume(approved=True), timeout=10)
            assert (await system.status("r-paused")).output == "Done: approved=True"

            with pytest.raises(RunNotFound, match="'nobody'"):
                await system.status("nobody")
            with pytest.raises(ValueError, match="'finished'"):
                await system.runs(status="finished")
            with pytest.raises(ValueError, match="limit"):
                await system.runs(limit=0)


async def test_a_run_owned_by_a_live_process_is_running(store_backend: Backend, tmp_path: Path) -> None:
    with anyio.fail_after(LIMIT):
        proc = await child("hold", store_backend, tmp_path, "held")
        try:
            while not (tmp_path / "entered").exists():
                assert proc.returncode is None, "the child ended before its tool started"
                await anyio.sleep(0.01)
            store = store_backend.open()
            async with store, ActorSystem(store) as system:
                summary = await system.status("held")
                assert (summary.status, summary.runner, summary.node_id) == (
                    "running",
                    "status-child",
                    "turn:0/tool:work",
                )
                assert [s.execution_id for s in await system.runs(status="running")] == ["held"]
                assert await system.runs(status="orphaned") == []
                # Reading took nothing the owner needs: it finishes its run.
                (tmp_path / "release").touch()
                assert await proc.wait() == 0
                finished = await system.status("held")
                assert (finished.status, finished.output) == ("completed", "done: released")
        finally:
            if proc.returncode is None:
                proc.kill()
            await proc.aclose()


async def test_a_run_whose_process_died_mid_step_is_orphaned(store_backend: Backend, tmp_path: Path) -> None:
    with anyio.fail_after(LIMIT):
        proc = await child("crash", store_backend, tmp_path, "crashed")
        try:
            assert await proc.wait() == 17
        finally:
            await proc.aclose()
        store = store_backend.open()
        async with store, ActorSystem(store) as system:
            # PostgreSQL frees a dead session's advisory lock once it has seen the disconnect
            # (measured: within ~10 ms of the child being reaped), so wait for that, bounded.
            for _ in range(500):
                summary = await system.status("crashed")
                if summary.status != "running":
                    break
                await anyio.sleep(0.01)
            assert (summary.status, summary.node_id, summary.agent_path) == (
                "orphaned",
                "turn:0/tool:work",
                "agent:status-child/tool:work",
            )
            assert [s.execution_id for s in await system.runs(status="orphaned")] == ["crashed"]
            assert await system.runs(status="running") == []
            # The read left the run's ownership free: this process takes it at once.
            assert await store.try_lock("crashed") is True
            await store.unlock("crashed")


async def test_an_enqueued_run_is_queued_until_a_sweep_takes_it(store_backend: Backend) -> None:
    answerer = Agent("answerer", FunctionModel(lambda messages: "forty-two"))
    store = store_backend.open()
    with anyio.fail_after(LIMIT):
        async with store, ActorSystem(store, runners=[answerer]) as system:
            queued = await system.enqueue(answerer, "q", execution_id="in-queue")
            summary = await system.status(queued)
            assert (summary.status, summary.rows, summary.node_id) == ("queued", 1, "turn:0")
            assert [s.execution_id for s in await system.runs(status="queued")] == ["in-queue"]
            assert await system.runs(status="orphaned") == [] == await system.runs(status="running")
            assert await system.sweep() == 1
            assert (await system.status(queued)).status == "completed"
            assert await system.runs(status="queued") == []
