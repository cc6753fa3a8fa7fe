"""The run ownership lock, and what the fleet reads of it (orphans, expired pauses)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from .._model import utcnow
from .._protocol import Store
from ._base import ConformanceBase
from ._factories import make_pending, make_row, pause_row, run_end_row

__all__ = ["LockTests"]


class LockTests(ConformanceBase):
    """The run ownership lock."""

    # -- ownership lock --------------------------------------------------------------------------

    async def test_ownership_lock(self, store: Store) -> None:
        with self.bounded():
            if not self.lock_across_instances:
                pytest.skip("this store's lock is per process only")
            other = await self.open_store()
            assert await store.try_lock("run-a") is True
            assert await other.try_lock("run-a") is False
            assert await other.try_lock("run-b") is True
            assert await store.try_lock("run-b") is False
            await store.unlock("run-a")
            assert await other.try_lock("run-a") is True
            assert await store.try_lock("run-a") is False
            await other.unlock("run-a")
            await other.unlock("run-b")
            assert await store.try_lock("run-a") is True
            assert await store.try_lock("run-b") is True

    async def test_close_releases_ownership_locks(self, store: Store) -> None:
        with self.bounded():
            holder = await self.open_store()
            assert await holder.try_lock("run-a") is True
            assert await store.try_lock("run-a") is False
            await self.close_store(holder)
            assert await store.try_lock("run-a") is True

    # -- the fleet: orphans and expired pauses -------------------------------------------------------

    async def test_the_store_records_run_ownership(self, store: Store) -> None:
        """The surface a fleet and lock loss need (``stores.OwnedStore``): a store without it drives
        runs but cannot serve a fleet; the backends must have it (``require_ownership``)."""
        fleet = self.ownership(store)
        assert callable(fleet.check_owner) and callable(fleet.on_ownership_lost)

    async def test_orphans_are_runs_of_dead_owners_and_queued_runs(self, store: Store) -> None:
        with self.bounded():
            fleet = self.ownership(store)
            dying = await self.open_store()
            for eid in ("mid-step", "rested", "queued"):
                assert await dying.try_lock(eid)
                await dying.append(make_row(eid, 0))
            await dying.append(run_end_row("rested", 1))
            await dying.unlock("rested")  # rested: no one's
            await dying.unlock("queued")  # released mid-step: the fleet's
            assert await store.try_lock("live")  # this store lives: never an orphan
            await store.append(make_row("live", 0))
            found = fleet.orphans
            assert await found() == ["queued"]
            await self.close_store(dying)  # its owner dies with "mid-step" held
            assert await found() == ["mid-step", "queued"]  # dead owners' runs first
            assert await found(limit=1) == ["mid-step"]
            assert await store.try_lock("mid-step") and await store.try_lock("queued")
            assert await found() == []

    async def test_ownership_reads_the_live_owners_and_the_queue_together(self, store: Store) -> None:
        """``ownership(ids)`` is ``owned(ids)`` and ``unowned(ids)`` in one read: a run held by a
        live owner in the first set, a run handed to the fleet in the second, a rested run or a
        dead owner's in neither."""
        with self.bounded():
            fleet = self.ownership(store)
            ids = ["held", "queued", "rested", "dead", "unknown"]
            dying = await self.open_store()
            for eid in ("held", "queued", "rested"):
                assert await store.try_lock(eid)
                await store.append(make_row(eid, 0))
            await store.append(run_end_row("rested", 1))
            await store.unlock("rested")
            await store.unlock("queued")  # released mid-step: the fleet's
            assert await dying.try_lock("dead")
            await dying.append(make_row("dead", 0))
            await self.close_store(dying)
            found = await fleet.ownership(ids)
            assert found == ({"held"}, {"queued"})
            assert found == (await store.owned(ids), await fleet.unowned(ids))
            assert await fleet.ownership([]) == (set(), set())
            assert await store.try_lock("queued") and await store.try_lock("dead")  # a sweep's takes
            assert await fleet.ownership(ids) == ({"held", "queued", "dead"}, set())

    async def test_expired_lists_pauses_past_their_deadline(self, store: Store) -> None:
        with self.bounded():
            fleet = self.ownership(store)
            now = utcnow()
            for eid, expires in (
                ("soon", now - timedelta(seconds=1)),
                ("later", now + timedelta(hours=1)),
                ("never", None),
            ):
                pause = pause_row(eid, 0)
                pending = make_pending(eid, pause)
                pending.expires_at = expires
                await store.append_pause(pause, pending)
            found = fleet.expired
            assert await found() == ["soon"]
            stored = {p.execution_id: p.expires_at for p in await store.pending()}
            assert stored["soon"] == now - timedelta(seconds=1) and stored["never"] is None
