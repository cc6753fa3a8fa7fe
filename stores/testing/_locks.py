"""The run ownership lock."""

from __future__ import annotations

import pytest

from .._protocol import Store
from ._base import ConformanceBase

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
