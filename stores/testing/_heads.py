"""How runs stand by their rows (``heads``) and who owns them (``owned``), read without locking."""

from __future__ import annotations

from datetime import timedelta

import msgspec
import pytest

from .._model import FAILED, Checkpoint, utcnow
from .._protocol import Store
from ._base import ConformanceBase
from ._factories import make_row, run_end_row, tool_row

__all__ = ["HeadsTests"]


class HeadsTests(ConformanceBase):
    """Each run's newest row, summarised and filtered, and the ownership read."""

    async def four_runs(self, store: Store) -> None:
        """done (completed), broke (failed), waits (paused), crashed (unfinished), oldest first."""
        base = utcnow() - timedelta(hours=1)

        def at(rows: list[Checkpoint], minute: int) -> list[Checkpoint]:
            return [msgspec.structs.replace(r, created_at=base + timedelta(minutes=minute)) for r in rows]

        done = [make_row("done", 0), tool_row("done", 1), run_end_row("done", 2)]
        done[2].state_snapshot["output"] = "all good"
        await self.write(store, at(done, 1))
        broke = [make_row("broke", 0), run_end_row("broke", 1, FAILED)]
        broke[1].state_snapshot["run_error"] = "ValueError: no"
        await self.write(store, at(broke, 2))
        await self.paused_run(store, "waits")  # written now: the newest
        await self.write(store, at([make_row("crashed", 0), tool_row("crashed", 1)], 3))

    async def test_heads_say_how_each_run_stands_newest_first(self, store: Store) -> None:
        with self.bounded():
            await self.four_runs(store)
            heads = await store.heads()
            assert [(h.execution_id, h.state, h.rows, h.seq) for h in heads] == [
                ("waits", "paused", 3, 2),
                ("crashed", "unfinished", 2, 1),
                ("broke", "failed", 2, 1),
                ("done", "completed", 3, 2),
            ]
            done = heads[-1]
            assert (done.runner, done.node_id, done.step_type, done.agent_path) == (
                "conformance",
                "run_end",
                "run_end",
                "agent:a",
            )
            assert done.snapshot["output"] == "all good" and "messages" not in done.snapshot
            assert heads[-2].snapshot["run_error"] == "ValueError: no"
            assert heads[0].updated_at > heads[1].updated_at > heads[2].updated_at > heads[3].updated_at

    async def test_heads_filter_and_page(self, store: Store) -> None:
        with self.bounded():
            await self.four_runs(store)
            for state, expected in [
                ("completed", ["done"]),
                ("failed", ["broke"]),
                ("paused", ["waits"]),
                ("unfinished", ["crashed"]),
            ]:
                assert [h.execution_id for h in await store.heads(state=state)] == expected, state
            assert [h.execution_id for h in await store.heads(execution_id="broke")] == ["broke"]
            assert await store.heads(execution_id="nobody") == []
            assert await store.heads(runner="someone else") == []
            assert len(await store.heads(runner="conformance")) == 4
            first = await store.heads(limit=3)
            assert [h.execution_id for h in first] == ["waits", "crashed", "broke"]
            last = first[-1]
            rest = await store.heads(limit=3, before=(last.updated_at, last.execution_id))
            assert [h.execution_id for h in rest] == ["done"]

    async def test_heads_refuse_an_unknown_state_and_a_bad_limit(self, store: Store) -> None:
        with self.bounded():
            with pytest.raises(ValueError, match="'running'"):
                await store.heads(state="running")
            with pytest.raises(ValueError, match="limit"):
                await store.heads(limit=0)

    async def test_owned_reads_the_ownership_locks_without_taking_them(self, store: Store) -> None:
        with self.bounded():
            other = await self.open_store()
            assert await store.owned(["run-a", "run-b"]) == set()
            assert await other.try_lock("run-a") is True
            assert await store.owned(["run-a", "run-b"]) == {"run-a"}
            assert await other.owned(["run-a", "run-b"]) == {"run-a"}  # the holder sees its own
            assert await store.try_lock("run-b") is True
            assert await store.owned(["run-a", "run-b", "run-c"]) == {"run-a", "run-b"}
            await other.unlock("run-a")
            assert await store.owned(["run-a"]) == set()
            assert await store.try_lock("run-a") is True  # reading took nothing
            assert await store.owned([]) == set()
