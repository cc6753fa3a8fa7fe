"""Two systems with two stores and two keys in one process never mix rows at
the plane; a slow plane (2 s per POST) does not slow the runs. Real HTTP on loopback."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import anyio
import pytest
from _plane_support import Plane, eventually, plane_fixture, synced  # noqa: F401 (fixture)
from conftest import Backend

from actors import ActorSystem
from replication import Replicator
from stores import SQLiteStore
from tether.lowlevel import RefundBot

pytestmark = pytest.mark.anyio


async def test_two_systems_two_stores_two_keys_never_mix(
    store_backend: Backend, plane: Plane, tmp_path: Path
) -> None:
    stores = {"alpha": store_backend.open(), "beta": SQLiteStore(tmp_path / "beta.db")}
    keys = {"alpha": "key-a", "beta": "key-b"}
    agents = {name: RefundBot().agent() for name in stores}
    written: dict[str, list[str]] = {}

    async def tenant(name: str) -> None:
        store, agent = stores[name], agents[name]
        async with ActorSystem(
            store, runners=[agent], replicator=Replicator(plane.url, keys[name])
        ) as system:
            ids = []
            for i in range(5):  # the same ids in both stores: the tenants keep them apart
                ref = await system.spawn(agent, f"Refund order 1042 for {i + 1}", execution_id=f"run-{i}")
                assert (await ref.result(timeout=10)).status == "completed"
                ids.append(ref.execution_id)
            rows = [r for eid in ids for r in await system.history(eid)]

            async def settled() -> bool:
                return await synced(store, rows) == [(True, None)] * len(rows)

            await eventually(settled)
            written[name] = [r.checkpoint_id for r in rows]

    async with anyio.create_task_group() as tg:
        for name in stores:
            tg.start_soon(tenant, name)
    for name, store in stores.items():
        remote = plane.tenant_store(name)
        try:
            found = [r for i in range(5) for r in await remote.history(f"run-{i}")]
            assert [r.checkpoint_id for r in found] == written[name]
            assert found == [r for i in range(5) for r in await store.history(f"run-{i}")]
        finally:
            await remote.close()
        await store.close()
    assert not set(written["alpha"]) & set(written["beta"])


async def test_a_slow_plane_does_not_slow_the_run(plane: Plane, tmp_path: Path) -> None:
    """20 sequential small refunds, with a replicator whose plane takes 2 s per POST, take under
    1.2x their time without one (plus 0.5 s of margin for a loaded machine); a run that waited on
    the plane would take 40 s or more."""
    plane.faults.stall = 2.0
    agent = RefundBot().agent()

    async def twenty(store: SQLiteStore, replicator: Replicator | None) -> float:
        async with ActorSystem(store, runners=[agent], replicator=replicator) as system:
            await anyio.sleep(0.1)  # the replicator's first drain is under way
            started = time.perf_counter()
            for _ in range(20):
                ref = await system.spawn(agent, "Refund order 1042 for 20")
                assert (await ref.result(timeout=10)).status == "completed"
            return time.perf_counter() - started

    plain = []
    for i in range(3):
        store = SQLiteStore(tmp_path / f"plain-{i}.db")
        plain.append(await twenty(store, None))
        await store.close()
    store = SQLiteStore(tmp_path / "replicated.db")
    connected = await twenty(store, Replicator(plane.url, "key-a", flush_timeout=0.2))
    await store.close()
    baseline = statistics.median(plain)
    assert plane.faults.posts >= 1  # the plane was being talked to
    assert connected < 1.2 * baseline + 0.5, (connected, plain)
