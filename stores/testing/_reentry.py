"""Re-entry and fork (rules 8 and 9 of docs/durability.md)."""

from __future__ import annotations

import pytest

from .._errors import (
    AlreadyResumed,
    CheckpointError,
    RunNotFound,
    already_finished,
    marker_not_step,
    no_checkpoint,
    no_step,
)
from .._model import (
    RECOVER,
    REENTRY_SEQ,
    RESUME_KEY,
    ReEntry,
)
from .._protocol import Store
from ._base import ConformanceBase
from ._factories import (
    make_row,
    resume_row,
)

__all__ = ["ReentryTests"]


class ReentryTests(ConformanceBase):
    """Re-entry and fork (rules 8 and 9 of docs/durability.md)."""

    # -- re-entry and fork -------------------------------------------------------------------------

    async def test_reentry_of_a_completed_run_is_refused_and_writes_nothing(self, store: Store) -> None:
        with self.bounded():
            rows = await self.completed_run(store, "run-a")
            with pytest.raises(AlreadyResumed):
                await store.reentry("run-a")
            assert await store.history("run-a") == rows

    async def test_reentry_steps_over_a_failed_run_end(self, store: Store) -> None:
        with self.bounded():
            rows = await self.failed_run(store, "run-a")
            assert await store.reentry("run-a") == ReEntry(step=rows[1], newest=rows[2], resume=None)

    async def test_reentry_of_a_crashed_run_is_its_newest_row(self, store: Store) -> None:
        with self.bounded():
            rows = await self.crashed_run(store, "run-a")
            assert await store.reentry("run-a") == ReEntry(step=rows[2], newest=rows[2], resume=None)

    async def test_reentry_reads_through_resume_and_recover_rows(self, store: Store) -> None:
        with self.bounded():
            rows, _ = await self.paused_run(store, "run-a")
            claim = resume_row("run-a", 3, rows[-1], approved=False, by="dana")
            await store.claim(claim)
            decision = {"approved": False, "metadata": {"by": "dana"}}
            assert await store.reentry("run-a") == ReEntry(step=rows[-1], newest=claim, resume=decision)
            recover = make_row(
                "run-a", 4, claim.node_id, step_type=RECOVER, node_input={REENTRY_SEQ: claim.seq}
            )
            await store.append(recover)
            assert await store.reentry("run-a") == ReEntry(step=rows[-1], newest=recover, resume=decision)

    async def test_reentry_reads_through_a_recover_row(self, store: Store) -> None:
        with self.bounded():
            rows = await self.crashed_run(store, "run-b")
            tool = rows[1]
            extra = make_row("run-b", 3, tool.node_id, step_type=RECOVER, node_input={REENTRY_SEQ: tool.seq})
            await store.append(extra)
            assert await store.reentry("run-b") == ReEntry(step=tool, newest=extra, resume=None)

    async def test_reentry_of_an_unknown_run_raises_run_not_found(self, store: Store) -> None:
        with self.bounded():
            with pytest.raises(RunNotFound, match="ghost-run"):
                await store.reentry("ghost-run")
            assert await store.history("ghost-run") == []

    async def test_forkable_defaults_to_the_newest_step(self, store: Store) -> None:
        with self.bounded():
            rows = await self.completed_run(store, "run-a")
            assert await store.forkable("run-a") == rows[2]
            assert await store.forkable("run-a", rows[1].checkpoint_id) == rows[1]
            crashed = await self.crashed_run(store, "run-b")
            assert await store.forkable("run-b") == crashed[-1]

    async def test_forkable_reads_through_bookkeeping_rows(self, store: Store) -> None:
        with self.bounded():
            rows, _ = await self.paused_run(store, "run-a")
            claim = resume_row("run-a", 3, rows[-1])
            await store.claim(claim)
            assert await store.forkable("run-a") == rows[-1]
            assert await store.forkable("run-a", claim.checkpoint_id) == rows[-1]

    async def test_forkable_refuses_the_marker_and_unknown_ids(self, store: Store) -> None:
        with self.bounded():
            rows = await self.completed_run(store, "run-a")
            with pytest.raises(CheckpointError) as info:
                await store.forkable("run-a", rows[-1].checkpoint_id)
            assert not isinstance(info.value, RunNotFound)
            with pytest.raises(RunNotFound, match="ghost-run"):
                await store.forkable("ghost-run")
            with pytest.raises(RunNotFound):
                await store.forkable("run-a", "no-such-checkpoint")
            with pytest.raises(RunNotFound):
                await store.forkable("ghost-run", rows[0].checkpoint_id)
            assert await store.history("run-a") == rows

    async def test_bookkeeping_rows_with_no_usable_target_read_the_row_below(self, store: Store) -> None:
        with self.bounded():
            # A reentry_seq that is missing, not an int (a str, a bool), the row's own seq or a later
            # one names nothing: the walk reads the row below instead.
            targets: list[object] = ["missing", "2", True, 4, 9]
            for i, target in enumerate(targets):
                eid = f"run-{i}"
                rows = await self.crashed_run(store, eid)
                node_input = {} if target == "missing" else {REENTRY_SEQ: target}
                recover = make_row(eid, 4, rows[1].node_id, step_type=RECOVER, node_input=node_input)
                await self.write(store, [make_row(eid, 3, step_index=2), recover])
                entry = await store.reentry(eid)
                assert entry.step.seq == 3 and entry.newest == recover, target
                assert (await store.forkable(eid)).seq == 3, target

    async def test_the_newest_decision_on_the_way_wins(self, store: Store) -> None:
        with self.bounded():
            rows, _ = await self.paused_run(store, "run-a")
            claim = resume_row("run-a", 3, rows[-1], approved=False, by="dana")
            await store.claim(claim)
            # A recover row carrying a later decision that names the resume row: its decision wins.
            later = {"approved": True, "metadata": {"by": "erin"}}
            recover = make_row(
                "run-a",
                4,
                claim.node_id,
                step_type=RECOVER,
                node_input={REENTRY_SEQ: claim.seq, RESUME_KEY: later},
            )
            await store.append(recover)
            assert await store.reentry("run-a") == ReEntry(step=rows[-1], newest=recover, resume=later)

    async def test_reentry_and_fork_refusals_name_the_run_and_the_checkpoint(self, store: Store) -> None:
        with self.bounded():
            await self.completed_run(store, "done-run")
            with pytest.raises(AlreadyResumed) as finished:
                await store.reentry("done-run")
            assert str(finished.value) == str(already_finished("done-run"))
            marker = (await store.history("done-run"))[-1]
            with pytest.raises(CheckpointError) as on_marker:
                await store.forkable("done-run", marker.checkpoint_id)
            assert str(on_marker.value) == str(marker_not_step("done-run", marker.checkpoint_id))
            with pytest.raises(RunNotFound) as missing:
                await store.forkable("done-run", "no-such-checkpoint")
            assert str(missing.value) == str(no_checkpoint("done-run", "no-such-checkpoint"))
            await self.write(store, [make_row("bare-run", 0, step_type=RECOVER, node_input={REENTRY_SEQ: 0})])
            for call in (store.reentry("bare-run"), store.forkable("bare-run")):
                with pytest.raises(RunNotFound) as bare:
                    await call
                assert str(bare.value) == str(no_step("bare-run"))
