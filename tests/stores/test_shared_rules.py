"""What both backends share, checked once: one wording per refusal, one re-plan budget, one prune rule."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Backend

from stores import AlreadyResumed, RunExists, WriteConflict
from stores.lowlevel import REPLAN_BUDGET, BaseStore, LogMoved, Plan, PruneRow, doomed
from stores.testing import make_pending, make_row, run_end_row

pytestmark = pytest.mark.anyio


async def test_refusals_are_worded_the_same_on_both_backends(store_backend: Backend) -> None:
    async with store_backend.open() as store:
        await store.append(make_row("used", 0))
        with pytest.raises(RunExists) as exists:
            await store.append(make_row("used", 0))
        text = str(exists.value)
        assert "'used'" in text and "pick another execution_id" in text and "fork or resume" in text
        await store.append(make_row("used", 1))
        with pytest.raises(WriteConflict) as taken:
            await store.append(make_row("used", 1))
        assert (
            str(taken.value) == "seq 1 of run 'used' is already taken (writing 'turn:1'): a stale writer lost"
        )
        with pytest.raises(AlreadyResumed) as no_pause:
            await store.claim(make_row("used", 2, step_type="resume"))
        assert str(no_pause.value) == (
            "run 'used' has no pending interrupt to claim: another resumer claimed it, or the run is not paused"
        )
        pause = make_row("p", 0, step_type="hitl_pause", status="interrupted")
        await store.append_pause(pause, make_pending("p", pause))
        with pytest.raises(WriteConflict) as twice:
            again = make_row("p", 1, step_type="hitl_pause", status="interrupted")
            await store.append_pause(again, make_pending("p", again))
        assert str(twice.value) == "run 'p' already has a pending interrupt"
        await store.append(make_row("done", 0))
        await store.append(run_end_row("done", 1))
        with pytest.raises(AlreadyResumed, match="already finished"):
            await store.reentry("done")


class _Stale(BaseStore):
    """A store whose database log never matches the plan."""

    def __init__(self) -> None:
        super().__init__(max_row_bytes=1 << 20, recall=self.recall)
        self.attempts: list[Plan] = []
        self.recalls = 0

    async def setup(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def recall(self, row: Any) -> None:
        self.recalls += 1

    async def attempt(self, plan: Plan) -> None:
        self.attempts.append(plan)
        raise LogMoved


async def test_the_replan_budget_is_one_number_and_then_write_conflict() -> None:
    store = _Stale()
    row = make_row("r", 3, messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(WriteConflict, match="kept changing while writing 'turn:3'"):
        await store._planned(row, store.attempt)
    assert len(store.attempts) == REPLAN_BUDGET == 3
    assert store.recalls == REPLAN_BUDGET
    first = store._logs.plan(row)  # a plan made before the loop is used as its first attempt
    store.attempts.clear()
    with pytest.raises(WriteConflict):
        await store._planned(row, store.attempt, first)
    assert store.attempts[0] is first and len(store.attempts) == REPLAN_BUDGET


async def test_a_failed_attempt_forgets_the_run_and_passes_its_error_on() -> None:
    store = _Stale()
    row = make_row("r", 0, messages=[{"role": "user", "content": "hi"}])

    async def refuse(plan: Plan) -> None:
        raise RunExists("no")

    with pytest.raises(RunExists):
        await store._planned(row, refuse)
    assert not store._logs.known("r", "agent:a")


def _row(
    seq: int, step_type: str = "llm_call", status: str = "completed", old: bool = True, **node_input: Any
) -> PruneRow:
    return PruneRow(seq, step_type, status, old, node_input)


def test_prune_rule_for_a_completed_run_takes_every_old_row() -> None:
    rows = [_row(0), _row(1, "hitl_pause", "interrupted"), _row(2, old=False), _row(3, "run_end")]
    assert doomed("r", rows) == (True, [0, 1, 3])


def test_prune_rule_keeps_what_reentry_reads_and_every_pause() -> None:
    rows = [
        _row(0),
        _row(1, "tool_call"),
        _row(2, "hitl_pause", "interrupted"),
        _row(3, "resume", reentry_seq=1),
        _row(4, "run_end", "failed"),
    ]
    # re-entry: run_end -> resume -> the tool row it names; the pause is never deleted.
    assert doomed("r", rows) == (False, [0])
    assert doomed("r", [_row(0), _row(1, old=False)]) == (False, [0])
    assert doomed("r", [_row(0, "run_end", "failed")]) == (False, [])
    assert doomed("r", []) == (False, [])


def test_prune_rule_keeps_the_newest_row_of_each_level_above_a_nested_step() -> None:
    def at(seq: int, path: str, step_type: str = "llm_call") -> PruneRow:
        return PruneRow(seq, step_type, "completed", True, {}, path)

    rows = [
        at(0, "supervisor:ops"),
        at(1, "supervisor:ops/tool:delegate_to_support", "tool_call"),
        at(2, "supervisor:ops/worker:support/agent:a"),
        at(3, "supervisor:ops/worker:support/agent:a/tool:handoff_to_b", "tool_call"),
        at(4, "supervisor:ops/worker:support", "handoff"),
        at(5, "supervisor:ops/worker:support/agent:b"),
        at(6, "supervisor:ops/worker:support/agent:b/tool:refund", "tool_call"),
    ]
    # The step in flight (6), the worker swarm's newest hop (4), the manager's delegation row (1).
    assert doomed("r", rows) == (False, [0, 2, 3, 5])
    # A plain agent keeps only its re-entry row, as before.
    assert doomed("r", [at(0, "agent:a"), at(1, "agent:a/tool:t", "tool_call")]) == (False, [0])
