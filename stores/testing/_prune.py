"""Delete and prune (rule 10 of docs/durability.md)."""

from __future__ import annotations

from datetime import timedelta

import anyio

from .._model import (
    FAILED,
    HITL_PAUSE,
    RECOVER,
    REENTRY_SEQ,
    Cached,
    utcnow,
)
from .._protocol import Store
from ._base import ConformanceBase
from ._factories import (
    make_message,
    make_row,
    resume_row,
    run_end_row,
)

__all__ = ["PruneTests"]


class PruneTests(ConformanceBase):
    """Delete and prune (rule 10 of docs/durability.md)."""

    # -- delete and prune ------------------------------------------------------------------------

    async def test_delete_run_removes_everything_of_that_run_only(self, store: Store) -> None:
        with self.bounded():
            rows, _ = await self.paused_run(store, "run-a")
            other, other_pending = await self.paused_run(store, "run-b")
            await store.cache_put("run-a", "k", {"v": 1})
            await store.cache_put("run-b", "k", {"v": 2})
            assert await store.delete_run("run-a") == len(rows)
            assert await store.history("run-a") == []
            assert await store.latest("run-a") is None
            assert await store.pending("run-a") == []
            assert await store.cache_get("run-a", "k") is None
            assert await store.history("run-b") == other
            assert await store.pending() == [other_pending]
            assert await store.cache_get("run-b", "k") == Cached({"v": 2})
            again = make_row("run-a", 0, messages=[make_message(9)])
            await store.append(again)
            assert await store.history("run-a") == [again]
            assert await store.delete_run("nobody") == 0

    async def test_prune_follows_rule_10(self, store: Store) -> None:
        with self.bounded():
            completed = await self.completed_run(store, "done")
            crashed = await self.crashed_run(store, "crashed")
            failed = await self.failed_run(store, "failed")
            paused, pending = await self.paused_run(store, "paused")
            for eid in ("done", "crashed", "failed", "paused"):
                await store.cache_put(eid, "side-effect", {"eid": eid})
            before = {eid: await store.reentry(eid) for eid in ("crashed", "failed", "paused")}
            await anyio.sleep(0.01)
            deleted = await store.prune(timedelta(0))
            assert await store.history("done") == []
            assert await store.cache_get("done", "side-effect") is None
            assert await store.history("crashed") == [crashed[2]]
            assert await store.history("failed") == [failed[1], failed[2]]
            assert await store.history("paused") == [paused[2]]
            assert deleted == len(completed) + 2 + 1 + 2
            assert await store.pending("paused") == [pending]
            for eid, entry in before.items():
                assert await store.reentry(eid) == entry
                assert await store.cache_get(eid, "side-effect") == Cached({"eid": eid})
            assert await store.prune(timedelta(0)) == 0

    async def test_prune_keeps_the_rows_reentry_reads_through(self, store: Store) -> None:
        with self.bounded():
            crashed = await self.crashed_run(store, "recovered")
            recover = make_row(
                "recovered", 3, crashed[1].node_id, step_type=RECOVER, node_input={REENTRY_SEQ: 1}
            )
            await store.append(recover)
            paused, _ = await self.paused_run(store, "claimed")
            await store.claim(resume_row("claimed", 3, paused[-1]))
            before = {eid: await store.reentry(eid) for eid in ("recovered", "claimed")}
            await anyio.sleep(0.01)
            await store.prune(timedelta(0))
            for eid, entry in before.items():
                assert await store.reentry(eid) == entry

    async def test_prune_spares_what_is_newer_than_the_cutoff(self, store: Store) -> None:
        with self.bounded():
            old = utcnow() - timedelta(days=30)
            aged = [make_row("old", seq, created_at=old) for seq in range(3)]
            await self.write(store, [*aged, run_end_row("old", 3)])
            fresh = await self.completed_run(store, "fresh")
            crashed = await self.crashed_run(store, "crashed")
            assert await store.prune(timedelta(days=1)) == 3
            assert [r.seq for r in await store.history("old")] == [3]  # the marker is not old
            assert await store.history("fresh") == fresh
            assert await store.history("crashed") == crashed
            assert await store.prune(timedelta(days=365)) == 0

    async def test_prune_never_deletes_a_pause_the_walk_no_longer_reads(self, store: Store) -> None:
        with self.bounded():
            # Paused, claimed, went on and crashed (or failed): the old pause is off the re-entry
            # walk, and still prune keeps it, in both shapes of a run that has not completed.
            for eid, end in (("crashed", None), ("failed", FAILED)):
                rows, _ = await self.paused_run(store, eid)
                claim = resume_row(eid, 3, rows[-1])
                await store.claim(claim)
                later = [make_row(eid, 4, step_index=1)]
                if end is not None:
                    later.append(run_end_row(eid, 5, end))
                await self.write(store, later)
            await anyio.sleep(0.01)
            await store.prune(timedelta(0))
            for eid in ("crashed", "failed"):
                kept = await store.history(eid)
                assert [r.step_type for r in kept if r.step_type == HITL_PAUSE] == [HITL_PAUSE], eid
            assert [r.seq for r in await store.history("crashed")] == [2, 4]
            assert [r.seq for r in await store.history("failed")] == [2, 4, 5]

    async def test_prune_keeps_messages_of_surviving_rows(self, store: Store) -> None:
        with self.bounded():
            msgs = [make_message(i) for i in range(8)]
            rows = [make_row("run-a", seq, messages=msgs[: 2 * seq + 2]) for seq in range(4)]
            await self.write(store, rows)
            await anyio.sleep(0.01)
            await store.prune(timedelta(0))
            assert await store.history("run-a") == [rows[-1]]
            fresh = await self.open_store()
            assert await fresh.history("run-a") == [rows[-1]]
            nxt = make_row("run-a", 4, messages=[*msgs, make_message(8)])
            await fresh.append(nxt)
            assert await store.history("run-a") == [rows[-1], nxt]

    async def test_prune_of_old_rows_keeps_the_messages_newer_rows_read(self, store: Store) -> None:
        with self.bounded():
            old = utcnow() - timedelta(days=30)
            msgs = [make_message(i) for i in range(6)]
            aged = [make_row("done", seq, messages=msgs[: seq + 2], created_at=old) for seq in range(3)]
            young = [make_row("done", 3, messages=msgs[:5]), make_row("done", 4, messages=msgs)]
            end = run_end_row("done", 5)
            await self.write(store, [*aged, *young, end])
            assert await store.prune(timedelta(days=1)) == 3
            assert await store.history("done") == [*young, end]
            fresh = await self.open_store()
            assert await fresh.history("done") == [*young, end]
