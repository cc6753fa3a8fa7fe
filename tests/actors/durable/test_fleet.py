"""The fleet in one process: enqueue and sweep, claim without a runner, max_recoveries, refusals.

The multi-process proofs (workers killed mid-way, racing sweepers) are in ``test_fleet_processes.py``.
"""

from __future__ import annotations

import logging
from pathlib import Path

import anyio
import pytest
from conftest import Backend

from actors import ActorSystem, Agent, Resume, RunExists, idempotent, interrupt, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import RECOVER, AlreadyResumed, Checkpoint, SQLiteStore, new_id

pytestmark = pytest.mark.anyio


def _agent(charges: list[str], *, approve: bool = False, expires_in: float | None = None) -> Agent:
    @idempotent
    async def charge(order: str) -> str:
        charges.append(order)
        return f"charged {order}"

    @tool
    async def refund(order: str) -> str:
        """Refund an order (asking first when ``approve``)."""
        if approve:
            decision = interrupt("approve the refund?", {"order": order}, expires_in=expires_in)
            if not decision.approved:
                return f"refused by {decision.metadata.get('approver', decision.metadata)}"
        return await charge(order)

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"done: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("refund", {"order": messages[-1].content})])

    return Agent("fleet-agent", FunctionModel(model), tools=[refund])


async def test_enqueued_runs_wait_for_a_sweep_which_takes_each_once(store_backend: Backend) -> None:
    charges: list[str] = []
    runner = _agent(charges)
    async with store_backend.open() as store, ActorSystem(store, runners=[runner]) as system:
        ids = [await system.enqueue(runner, f"o{i}") for i in range(5)]
        assert charges == []  # queued: nothing ran
        assert [r.step_type for r in await system.history(ids[0])] == ["llm_call"]
        with pytest.raises(RunExists):
            await system.enqueue(runner, "again", execution_id=ids[0])
        with anyio.fail_after(30):
            assert await system.sweep() == 5
        assert await system.sweep() == 0
        for i, eid in enumerate(ids):
            assert (await system.status(eid)).status == "completed"
            assert (await system.ref(eid).result()).output == f"done: charged o{i}"
        assert sorted(charges) == [f"o{i}" for i in range(5)]


async def test_serve_takes_work_enqueued_while_it_runs(store_backend: Backend) -> None:
    charges: list[str] = []
    runner = _agent(charges)
    async with store_backend.open() as store, ActorSystem(store, runners=[runner]) as system:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: system.serve(concurrency=2, poll=0.05))
            ids = [await system.enqueue(runner, f"s{i}") for i in range(4)]
            with anyio.fail_after(30):
                while len(charges) < 4:  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
        # A run still between two rows when serve was cancelled was handed back to the fleet after
        # its next row (shutdown_grace); one more sweep finishes it.
        with anyio.fail_after(30):
            await system.sweep()
        for eid in ids:
            assert (await system.status(eid)).status == "completed"
        assert sorted(charges) == [f"s{i}" for i in range(4)]


async def test_a_claim_without_the_runner_is_finished_by_a_worker(store_backend: Backend) -> None:
    charges: list[str] = []
    runner = _agent(charges, approve=True)
    async with store_backend.open() as store, ActorSystem(store, runners=[runner]) as system:
        ref = await system.spawn(runner, "o1")
        paused = await ref.result(timeout=10)
        assert paused.status == "paused"
    async with store_backend.open() as store, ActorSystem(store) as approver:  # no runner here
        pending = await approver.claim(
            paused.execution_id, Resume(approved=False, metadata={"approver": "bob"})
        )
        assert pending.reason == "approve the refund?"
        with pytest.raises(AlreadyResumed):
            await approver.claim(paused.execution_id, Resume(approved=True))
        assert await approver.pending() == []
    async with store_backend.open() as store, ActorSystem(store, runners=[runner]) as worker:
        with anyio.fail_after(30):
            assert await worker.sweep() == 1
        result = await worker.ref(paused.execution_id).result()
        assert result.output == "done: refused by bob"  # the claimed decision, not a new one
    assert charges == []


async def test_a_run_recovered_too_often_without_a_step_gets_the_failed_marker(
    store_backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="tether")
    charges: list[str] = []
    runner = _agent(charges)
    eid = new_id()
    dead = store_backend.open()  # an owner that recorded 2 recoveries, then died
    await dead.setup()
    assert await dead.try_lock(eid)
    rows = [
        Checkpoint(
            execution_id=eid,
            seq=0,
            runner=runner.name,
            node_id="turn:0",
            step_type="llm_call",
            agent_path=runner.label,
            state_snapshot={"messages": [{"role": "user", "content": "x"}]},
        ),
    ]
    for seq in (1, 2):
        rows.append(
            Checkpoint(
                execution_id=eid,
                seq=seq,
                runner=runner.name,
                node_id="turn:0",
                step_type=RECOVER,
                agent_path=runner.label,
                node_input={"reentry_seq": 0},
            )
        )
    for row in rows:
        await dead.append(row)
    await dead.close()
    async with (
        store_backend.open() as store,
        ActorSystem(store, runners=[runner], max_recoveries=2) as system,
    ):
        with anyio.fail_after(30):
            assert await system.sweep() == 1
        status = await system.status(eid)
        assert status.status == "failed"
        history = await system.history(eid)
        assert history[-1].state_snapshot["run_error"] == "gave up after 2 recoveries at turn:0"
        assert history[-1].state_snapshot["run_reason"] == "max_recoveries"
        assert await system.sweep() == 0
    assert charges == []
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("event='run given up'")]
    assert len(said) == 1 and f"execution_id={eid!r}" in said[0], said
    assert "error='gave up after 2 recoveries at turn:0'" in said[0], said


async def test_an_expired_pause_is_refused_exactly_once(store_backend: Backend) -> None:
    charges: list[str] = []
    runner = _agent(charges, approve=True, expires_in=0.3)
    async with store_backend.open() as store, ActorSystem(store, runners=[runner]) as system:
        paused = await (await system.spawn(runner, "o9")).result(timeout=10)
        assert paused.pending is not None and paused.pending.expires_at is not None
        assert (paused.pending.expires_at - paused.pending.created_at).total_seconds() == 0.3
        assert (await system.pending())[0].expires_at == paused.pending.expires_at
        assert await system.sweep() == 0  # not yet
        await anyio.sleep(0.4)
        other_store = store_backend.open()
        async with other_store, ActorSystem(other_store, runners=[runner]) as other:
            with anyio.fail_after(30):
                taken = [0, 0]

                async def sweep(i: int, sweeper: ActorSystem) -> None:
                    taken[i] = await sweeper.sweep()

                async with anyio.create_task_group() as tg:
                    tg.start_soon(sweep, 0, system)
                    tg.start_soon(sweep, 1, other)
        assert sorted(taken) == [0, 1]
        result = await system.ref(paused.execution_id).result()
        assert result.output == "done: refused by {'expired': True}"
        rows = await system.history(paused.execution_id)
        assert [r.step_type for r in rows].count("resume") == 1
        with pytest.raises(AlreadyResumed):
            await system.resume(paused.execution_id, Resume(approved=True))
    assert charges == []
    with pytest.raises(ValueError, match="expires_in"):
        interrupt("x", expires_in=0)


async def test_sweep_and_serve_refuse_bad_arguments(tmp_path: Path) -> None:
    async with ActorSystem() as system:
        with anyio.fail_after(5):  # refusals are at once
            for bad in (0, -1, True, 1.5):
                with pytest.raises(ValueError, match="limit"):
                    await system.sweep(limit=bad)  # type: ignore[arg-type]
                with pytest.raises(ValueError, match="concurrency"):
                    await system.serve(concurrency=bad)  # type: ignore[arg-type]
            with pytest.raises(ValueError, match="poll"):
                await system.serve(poll=0)
            with pytest.raises(TypeError, match="Resume"):
                await system.claim("r", {"approved": True})  # type: ignore[arg-type]


def _waiting_agent(release: anyio.Event, started: list[str]) -> Agent:
    @tool
    async def slow(order: str) -> str:
        """Work on an order until the test lets it finish."""
        started.append(order)
        await release.wait()
        return f"done {order}"

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"answer: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("slow", {"order": messages[-1].content})])

    return Agent("grace-agent", FunctionModel(model), tools=[slow])


async def _serve_until_started(system: ActorSystem, started: list[str], grace: float) -> float:
    """Serve until a tool started, then cancel serve; how long the cancelled serve took to return."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: system.serve(concurrency=2, poll=0.05, shutdown_grace=grace))
        with anyio.fail_after(30):
            while not started:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        cancelled_at = anyio.current_time()
        tg.cancel_scope.cancel()
    return anyio.current_time() - cancelled_at


async def test_a_cancelled_serve_hands_a_hung_run_to_the_fleet_after_its_grace(
    store_backend: Backend,
) -> None:
    release, started = anyio.Event(), []
    runner = _waiting_agent(release, started)
    async with store_backend.open() as store, ActorSystem(store, runners=[runner]) as system:
        eid = await system.enqueue(runner, "g1")
        took = await _serve_until_started(system, started, grace=0.3)
        assert 0.3 <= took < 15, took  # the grace, then the hung tool is stopped
        assert (await system.history(eid))[-1].step_type != "run_end"  # not a cancel: nothing written
        assert (await system.status(eid)).status in ("queued", "orphaned")  # the fleet's to take
        release.set()
        with anyio.fail_after(30):
            assert await system.sweep() == 1
        assert (await system.ref(eid).result()).output == "answer: done g1"
    assert started == ["g1", "g1"]  # the step stopped in flight runs again


class _SlowRelease(SQLiteStore):
    """A SQLite store whose ownership release takes a while (a busy disk, a loaded machine)."""

    async def unlock(self, execution_id: str) -> None:
        await anyio.sleep(0.5)
        await super().unlock(execution_id)


async def test_a_cancelled_serve_returns_after_the_handed_runs_are_released(tmp_path: Path) -> None:
    # The activation counts as live until its ownership is released, not only until its steps
    # stop: a serve that returned has handed its runs over, whatever the release costs.
    release, started = anyio.Event(), []
    runner = _waiting_agent(release, started)
    async with _SlowRelease(tmp_path / "slow.db") as store, ActorSystem(store, runners=[runner]) as system:
        eid = await system.enqueue(runner, "g3")
        took = await _serve_until_started(system, started, grace=0.1)
        assert took >= 0.5, took  # the grace, then the slow release
        assert (await system.status(eid)).status in ("queued", "orphaned")
        release.set()
        with anyio.fail_after(30):
            assert await system.sweep() == 1
        assert (await system.ref(eid).result()).output == "answer: done g3"


async def test_a_cancelled_serve_lets_a_step_in_flight_reach_its_next_row(store_backend: Backend) -> None:
    release, started = anyio.Event(), []
    runner = _waiting_agent(release, started)
    async with store_backend.open() as store, ActorSystem(store, runners=[runner]) as system:
        eid = await system.enqueue(runner, "g2")

        async def finish_soon() -> None:
            await anyio.sleep(0.2)
            release.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(finish_soon)
            took = await _serve_until_started(system, started, grace=30)
        assert took < 15, took  # it returned once the step reached its row, not at the grace's end
        rows = await system.history(eid)
        newest = rows[-1]
        assert newest.step_type == "llm_call" and newest.node_id == "turn:1"  # the tool's result is in
        assert (await system.status(eid)).status in ("queued", "orphaned")
        with anyio.fail_after(30):
            assert await system.sweep() == 1
        assert (await system.ref(eid).result()).output == "answer: done g2"
    assert started == ["g2"]  # the step that finished in the grace is not run again
