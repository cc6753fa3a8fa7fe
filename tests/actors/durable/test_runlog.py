"""The rows half of a run: ``seq`` allocation and the four writes, against a real store."""

from __future__ import annotations

import logging

import anyio
import pytest
from conftest import Backend

from actors import AlreadyResumed, WriteConflict
from actors.lowlevel import RunLog, StepLog
from stores import COMPLETED, HITL_PAUSE, INTERRUPTED, RESUME, RESUME_KEY, RUN_END, TOOL_CALL


def run_log(store: object, execution_id: str, **options: object) -> RunLog:
    return RunLog(store, execution_id, runner="agent-a", log=StepLog(), **options)  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_rows_take_consecutive_seqs_and_a_stale_writer_loses(store_backend: Backend) -> None:
    store = store_backend.open()
    await store.setup()
    try:
        with anyio.fail_after(10):
            started: list[int] = []
            rows = run_log(store, "r1", on_first_row=lambda: started.append(1))
            rows.start_at(0)
            first = rows.row(
                node_id="turn:0", step_type="llm_call", step_index=0, snapshot={}, agent_path="agent:a"
            )
            await rows.append(first)
            await rows.append(
                rows.row(
                    node_id="turn:0/tool:t",
                    step_type=TOOL_CALL,
                    step_index=0,
                    snapshot={"tool_name": "t"},
                    agent_path="agent:a/tool:t",
                    node_input={"x": 1},
                    parent=first.checkpoint_id,
                )
            )
            assert started == [1]  # once, after the first row only
            history = await store.history("r1")
            assert [(r.seq, r.node_id, r.runner, r.agent_path) for r in history] == [
                (0, "turn:0", "agent-a", "agent:a"),
                (1, "turn:0/tool:t", "agent-a", "agent:a/tool:t"),
            ]
            assert history[1].node_input == {"x": 1}
            assert history[1].parent_checkpoint_id == first.checkpoint_id
            stale = run_log(store, "r1")
            stale.start_at(1)  # read the same newest row as a writer that already moved on
            with pytest.raises(WriteConflict):
                await stale.append(
                    stale.row(
                        node_id="turn:1",
                        step_type="llm_call",
                        step_index=1,
                        snapshot={},
                        agent_path="agent:a",
                    )
                )
            assert len(await store.history("r1")) == 2
    finally:
        await store.close()


@pytest.mark.anyio
async def test_pause_claim_and_end(store_backend: Backend, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="tether")
    store = store_backend.open()
    await store.setup()
    try:
        with anyio.fail_after(10):
            rows = run_log(store, "r2")
            rows.start_at(0)
            step = rows.row(
                node_id="turn:0/tool:t",
                step_type=TOOL_CALL,
                step_index=0,
                snapshot={},
                agent_path="agent:a/tool:t",
            )
            await rows.append(step)
            pending = await rows.pause(step, "approval", {"amount": 5})
            assert (pending.reason, pending.context, pending.node_id) == (
                "approval",
                {"amount": 5},
                step.node_id,
            )
            assert [p.execution_id for p in await store.pending("r2")] == ["r2"]
            paused = (await store.history("r2"))[-1]
            assert (paused.seq, paused.step_type, paused.status) == (1, HITL_PAUSE, INTERRUPTED)

            claimer = run_log(store, "r2")
            claimer.start_at(2)
            await claimer.claim(claimer.bookkeeping(RESUME, paused, {"approved": True, "metadata": {}}))
            assert await store.pending("r2") == []
            resumed = (await store.history("r2"))[-1]
            assert (resumed.seq, resumed.step_type, resumed.node_id) == (2, RESUME, step.node_id)
            assert resumed.node_input[RESUME_KEY] == {"approved": True, "metadata": {}}
            late = run_log(store, "r2")
            late.start_at(3)
            with pytest.raises(AlreadyResumed):  # the pause was already claimed
                await late.claim(late.bookkeeping(RESUME, paused, {"approved": False, "metadata": {}}))

            end = claimer.row(
                node_id=RUN_END, step_type=RUN_END, step_index=1, snapshot={}, agent_path="agent:a"
            )
            with anyio.CancelScope() as scope:
                scope.cancel()  # the marker is written even inside a cancelled scope
                await claimer.end(end)
            newest = await store.latest("r2")
            assert newest is not None and (newest.seq, newest.step_type, newest.status) == (
                3,
                RUN_END,
                COMPLETED,
            )
        logged = [r.getMessage() for r in caplog.records if r.name == "tether"]
        assert [(m.split("' ")[0], m.split("step_type=")[1].split()[0]) for m in logged] == [
            ("event='step started", "'tool_call'"),
            ("event='run paused", "'hitl_pause'"),
            ("event='step started", "'resume'"),
            ("event='run ended", "'run_end'"),
        ]
    finally:
        await store.close()
