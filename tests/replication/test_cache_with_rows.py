"""A run's ``@idempotent`` results reach the plane no later than the row that follows the step that
produced them, so a restore never repeats a side effect whose step the plane holds: through a slow
plane (restored the moment the pause lands) and through a plane that refuses every POST carrying
cache entries. Real HTTP on loopback; both backends for the store that replicates."""

from __future__ import annotations

from pathlib import Path

import pytest
from _plane_support import Plane, eventually, plane_fixture  # noqa: F401 (fixture)
from conftest import Backend
from test_restore import charging_agent

from actors import ActorSystem, Resume
from replication import Replicator
from stores import HITL_PAUSE, SQLiteStore, Store

pytestmark = pytest.mark.anyio

EID = "charge-1"


async def held(plane: Plane) -> tuple[list[str], list[str]]:
    """The step types of the run's rows on the plane, and its cache keys there."""
    remote: Store = plane.tenant_store("alpha")
    try:
        rows = await remote.history(EID)
        cache = await remote.cache_entries(EID)  # type: ignore[attr-defined]
    finally:
        await remote.close()
    return [r.step_type for r in rows], [e.key for e in cache]


async def resume_elsewhere(plane: Plane, tmp_path: Path, charges: list[int]) -> None:
    """Restore the paused run on a fresh store from the plane and finish it."""
    agent = charging_agent(charges)
    elsewhere = SQLiteStore(tmp_path / "elsewhere.db")
    async with ActorSystem(elsewhere, runners=[agent], replicator=Replicator(plane.url, "key-a")) as system:
        done = await system.resume(EID, Resume(approved=True), timeout=20)
        assert done.status == "completed"
        assert '"n":1' in (done.output or "")  # the receipt of the first charge, from the cache
    await elsewhere.close()


async def test_a_slow_plane_never_holds_the_pause_without_the_charge(
    store_backend: Backend, plane: Plane, tmp_path: Path
) -> None:
    """Every POST takes a second; the run is restored elsewhere the moment its pause reaches the
    plane (while the first process still runs): nothing is charged again."""
    charges: list[int] = []
    agent = charging_agent(charges)
    plane.faults.stall = 1.0
    here = store_backend.open()
    async with ActorSystem(here, runners=[agent], replicator=Replicator(plane.url, "key-a")) as system:
        paused = await (await system.spawn(agent, "refund 2000", execution_id=EID)).result(timeout=20)
        assert paused.status == "paused" and charges == [2000]

        async def pause_landed() -> bool:
            return HITL_PAUSE in (await held(plane))[0]

        await eventually(pause_landed, timeout=30)
        steps, keys = await held(plane)
        assert len(keys) == 1, (steps, keys)  # the charge's result came with (or before) the pause
        await resume_elsewhere(plane, tmp_path, charges)
    assert charges == [2000]
    await here.close()


async def test_a_plane_that_refuses_the_cache_never_holds_the_pause_without_it(
    store_backend: Backend, plane: Plane, tmp_path: Path
) -> None:
    """Every POST that carries cache entries is answered 503: no row after the charge reaches the
    plane meanwhile. Once the plane takes them, the run restored elsewhere charges nothing again."""
    charges: list[int] = []
    agent = charging_agent(charges)
    plane.faults.refuse_cache = 503
    here = store_backend.open()
    replicator = Replicator(plane.url, "key-a")
    async with ActorSystem(here, runners=[agent], replicator=replicator) as system:
        paused = await (await system.spawn(agent, "refund 2000", execution_id=EID)).result(timeout=20)
        assert paused.status == "paused" and charges == [2000]

        async def refused() -> bool:
            return 503 in plane.faults.statuses

        await eventually(refused)
        await replicator.drain()  # whatever goes without the cache entry has gone
        steps, keys = await held(plane)
        assert keys == [] and HITL_PAUSE not in steps, steps
        plane.faults.refuse_cache = None
        await replicator.drain()
        steps, keys = await held(plane)
        assert HITL_PAUSE in steps and len(keys) == 1
    await here.delete_run(EID)
    await here.close()
    await resume_elsewhere(plane, tmp_path, charges)
    assert charges == [2000]
