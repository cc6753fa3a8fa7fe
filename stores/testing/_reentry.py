"""Re-entry and fork (rules 8 and 9 of docs/durability.md)."""

from __future__ import annotations

import pytest

from .._errors import (
    AlreadyResumed,
    CheckpointError,
    RunNotFound,
)
from .._model import (
    RECOVER,
    REENTRY_SEQ,
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
