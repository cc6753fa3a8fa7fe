"""A run's rows reach the plane in seq order, once; a second drain sends nothing;
without a replicator nothing is sent. Real HTTP on loopback, both backends for the local store."""

from __future__ import annotations

import anyio
import pytest
from _plane_support import Plane, eventually, plane_fixture, synced  # noqa: F401 (fixture)
from conftest import Backend

from actors import ActorSystem
from replication import Replicator
from tether.lowlevel import RefundBot

pytestmark = pytest.mark.anyio


async def test_rows_reach_the_plane_in_seq_order_once(store_backend: Backend, plane: Plane) -> None:
    store = store_backend.open()
    agent = RefundBot().agent()
    replicator = Replicator(plane.url, "key-a")
    async with ActorSystem(store, runners=[agent], replicator=replicator) as system:
        ref = await system.spawn(agent, "Refund order 1042 for 20")
        result = await ref.result(timeout=10)
        assert result.status == "completed"
        local = await system.history(ref.execution_id)
        remote = plane.tenant_store("alpha")
        try:

            async def landed() -> bool:
                return await synced(store, local) == [(True, None)] * len(local)

            await eventually(landed)
            assert await remote.history(ref.execution_id) == local
            posts = plane.faults.posts
            again = await replicator.drain()
            assert (again.sent, again.posts) == (0, 0)
            assert plane.faults.posts == posts
            sent = [cid for batch in plane.faults.ids_seen for cid in batch]
            assert sent == [r.checkpoint_id for r in local]  # in seq order, each once
        finally:
            await remote.close()
    await store.close()


async def test_no_replicator_sends_nothing(store_backend: Backend, plane: Plane) -> None:
    store = store_backend.open()
    agent = RefundBot().agent()
    async with ActorSystem(store, runners=[agent]) as system:
        ref = await system.spawn(agent, "Refund order 1042 for 20")
        assert (await ref.result(timeout=10)).status == "completed"
    await store.close()
    await anyio.sleep(0.2)
    assert plane.faults.posts == 0


class FlakyStore:
    """A SQLite store whose outbox read fails once with an unexpected error (a bug, say)."""

    def __init__(self, path: object) -> None:
        from stores import SQLiteStore

        self.store = SQLiteStore(path)  # type: ignore[arg-type]
        self.failures = 1

    def __getattr__(self, name: str) -> object:
        return getattr(self.store, name)

    async def fetch_unsynced_stored(self, limit: int) -> object:
        if self.failures:
            self.failures -= 1
            raise RuntimeError("an unexpected failure in the outbox read")
        return await self.store.fetch_unsynced_stored(limit)


async def test_a_crashed_replicator_is_restarted_and_drains(plane: Plane, tmp_path: object) -> None:
    from pathlib import Path

    from stores.testing import make_row

    flaky = FlakyStore(Path(str(tmp_path)) / "local.db")
    rows = [make_row("run-f", i) for i in range(3)]
    for row in rows:
        await flaky.store.append(row)
    replicator = Replicator(plane.url, "key-a")
    async with ActorSystem(flaky, replicator=replicator) as system:  # type: ignore[arg-type]

        async def landed() -> bool:
            return await synced(flaky.store, rows) == [(True, None)] * 3

        await eventually(landed)
        assert flaky.failures == 0 and not system.escalations
    await flaky.store.close()
