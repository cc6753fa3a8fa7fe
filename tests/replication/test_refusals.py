"""Poison rows are bisected out and quarantined; conditions of the connection
never quarantine and the timer sends the rows once the plane recovers. Real HTTP on loopback (the
fault layer of ``_plane_support`` in front of the reference plane); both backends for the store."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from _plane_support import Plane, eventually, plane_fixture, synced  # noqa: F401 (fixture)
from conftest import Backend

from actors import ActorSystem
from replication import Replicator
from stores import Checkpoint, Store, utcnow
from stores.testing import make_message, make_row

pytestmark = pytest.mark.anyio

INGEST = "HTTP 422 from /public/v1/checkpoints/ingest: batch refused: a value is longer than its column"


async def written(store: Store, n: int = 8, eid: str = "run-p", **kw: Any) -> list[Checkpoint]:
    """``n`` rows of one run, each adding a message to its conversation."""
    msgs = [make_message(i) for i in range(n + 1)]
    rows = [make_row(eid, i, messages=msgs[: i + 2], **kw) for i in range(n)]
    for row in rows:
        await store.append(row)
    return rows


async def replicate_all(store: Store, plane: Plane, rows: list[Checkpoint], **kw: Any) -> None:
    """Attach a replicator (its start drains) and wait until every row is settled."""

    async def settled() -> bool:
        return all(state is not None and state[0] for state in await synced(store, rows))

    async with ActorSystem(store, replicator=Replicator(plane.url, "key-a", **kw)):
        await eventually(settled)


async def plane_rows(plane: Plane, eid: str) -> list[Checkpoint]:
    remote = plane.tenant_store("alpha")
    try:
        return await remote.history(eid)
    finally:
        await remote.close()


async def test_one_poison_row_among_eight_is_bisected_out(store_backend: Backend, plane: Plane) -> None:
    store = store_backend.open()
    rows = await written(store)
    plane.faults.poison = {rows[3].checkpoint_id}
    await replicate_all(store, plane, rows)
    states = await synced(store, rows)
    assert states[3] == (True, INGEST)
    assert [s for i, s in enumerate(states) if i != 3] == [(True, None)] * 7
    assert plane.faults.posts <= 12
    # the seven others landed, with their messages whole although row 3 never reached the plane
    assert await plane_rows(plane, "run-p") == [r for i, r in enumerate(rows) if i != 3]
    await store.close()


@pytest.mark.parametrize("status", [400, 409, 413, 422])
async def test_every_refusal_on_payload_grounds_quarantines_the_poison_row(
    tmp_path: Any, plane: Plane, status: int
) -> None:
    """Each of the four payload refusals, naming no row, bisects the batch down to the poison row
    and quarantines it with the status; the seven others land."""
    from stores import SQLiteStore

    store = SQLiteStore(tmp_path / "local.db")
    rows = await written(store)
    plane.faults.poison, plane.faults.poison_status = {rows[2].checkpoint_id}, status
    await replicate_all(store, plane, rows)
    states = await synced(store, rows)
    assert states[2] == (True, INGEST.replace("422", str(status)))
    assert [s for i, s in enumerate(states) if i != 2] == [(True, None)] * 7
    assert set(plane.faults.statuses) == {status, 200}
    assert await plane_rows(plane, "run-p") == [r for i, r in enumerate(rows) if i != 2]
    await store.close()


async def test_two_poison_rows_are_both_isolated(store_backend: Backend, plane: Plane) -> None:
    store = store_backend.open()
    rows = await written(store)
    plane.faults.poison = {rows[1].checkpoint_id, rows[6].checkpoint_id}
    await replicate_all(store, plane, rows)
    states = await synced(store, rows)
    assert (states[1], states[6]) == ((True, INGEST), (True, INGEST))
    assert [s for i, s in enumerate(states) if i not in (1, 6)] == [(True, None)] * 6
    assert plane.faults.posts <= 12
    assert await plane_rows(plane, "run-p") == [r for i, r in enumerate(rows) if i not in (1, 6)]
    await store.close()


async def test_a_refusal_that_names_its_rows_isolates_them_directly(
    store_backend: Backend, plane: Plane
) -> None:
    store = store_backend.open()
    rows = await written(store)
    plane.faults.poison = {rows[5].checkpoint_id}
    plane.faults.name_poison = True
    await replicate_all(store, plane, rows)
    states = await synced(store, rows)
    assert states[5] == (True, "HTTP 422: too long")
    assert [s for i, s in enumerate(states) if i != 5] == [(True, None)] * 7
    assert plane.faults.posts <= 3
    await store.close()


async def test_a_per_item_rejection_in_a_2xx_is_quarantined_in_one_post(
    store_backend: Backend, plane: Plane
) -> None:
    store = store_backend.open()
    rows = await written(store, 3)
    big = make_row("run-p", 3, node_output={"blob": "x" * (1024 * 1024 + 10)})
    await store.append(big)
    rows.append(big)
    await replicate_all(store, plane, rows)
    state = await store.sync_state(big.checkpoint_id)  # type: ignore[attr-defined]
    assert state is not None and state[0]
    assert state[1] is not None and state[1].startswith("HTTP 200: plane rejected: item is ")
    assert "over the limit of 1048576" in state[1]
    assert await synced(store, rows[:3]) == [(True, None)] * 3
    assert plane.faults.posts == 1
    await store.close()


@pytest.mark.parametrize("status", [401, 403, 404, 408, 429, 500, 503])
async def test_conditions_of_the_connection_never_quarantine(
    tmp_path: Any, plane: Plane, status: int
) -> None:
    """The plane answers ``status`` once; the timer sends the rows again without a new write."""
    from stores import SQLiteStore

    store = SQLiteStore(tmp_path / "local.db")
    rows = await written(store, 4)
    plane.faults.status, plane.faults.times = status, 1
    await replicate_all(store, plane, rows)
    assert await synced(store, rows) == [(True, None)] * 4
    assert plane.faults.statuses[0] == status and plane.faults.posts == 2
    assert await plane_rows(plane, "run-p") == rows
    await store.close()


async def test_retry_after_is_honoured(tmp_path: Any, plane: Plane) -> None:
    from stores import SQLiteStore

    store = SQLiteStore(tmp_path / "local.db")
    rows = await written(store, 2)
    plane.faults.status, plane.faults.times, plane.faults.retry_after = 429, 1, "2"
    started = time.monotonic()
    await replicate_all(store, plane, rows)
    # the backoff alone would retry after 0.5 s; the plane asked for 2 s
    assert time.monotonic() - started >= 1.9
    assert await synced(store, rows) == [(True, None)] * 2
    await store.close()


async def test_old_rows_of_a_paused_run_stay_buffered_until_the_plane_takes_them(
    store_backend: Backend, plane: Plane
) -> None:
    """Rows a month old, refused with 503 twice in a row, all land afterwards: no age bound."""
    store = store_backend.open()
    rows = await written(store, 3, created_at=utcnow() - timedelta(days=30))
    plane.faults.status, plane.faults.times = 503, 2
    await replicate_all(store, plane, rows)
    assert await synced(store, rows) == [(True, None)] * 3
    assert plane.faults.statuses[:2] == [503] * 2
    assert await plane_rows(plane, "run-p") == rows
    await store.close()


async def test_an_unreachable_plane_keeps_the_rows_buffered(tmp_path: Any) -> None:
    """A transport error (nothing listens) quarantines nothing: the rows wait, unsent."""
    import socket

    from stores import SQLiteStore

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    store = SQLiteStore(tmp_path / "local.db")
    rows = await written(store, 3)
    replicator = Replicator(f"http://127.0.0.1:{port}", "key-a", flush_timeout=0.5)
    async with ActorSystem(store, replicator=replicator):
        report = await replicator.drain()
        assert report.buffered and (report.sent, report.quarantined) == (0, 0)
    assert await synced(store, rows) == [(False, None)] * 3
    assert await store.fetch_unsynced(10) == rows
    await store.close()


async def test_a_200_with_an_empty_body_marks_nothing_synced(store_backend: Backend, plane: Plane) -> None:
    """A middlebox that answers 200 with an empty body and forwards nothing: the rows stay
    buffered (a transport error, retried), and reach the plane once it answers for itself."""
    store = store_backend.open()
    rows = await written(store, 4)
    plane.faults.swallow = True
    replicator = Replicator(plane.url, "key-a")
    async with ActorSystem(store, replicator=replicator):
        done = await replicator.drain()
        assert done.buffered and done.sent == 0
        assert plane.faults.statuses and set(plane.faults.statuses) == {200}
        assert await synced(store, rows) == [(False, None)] * 4
        assert await plane_rows(plane, "run-p") == []
        plane.faults.swallow = False
        await replicator.drain()
        assert await synced(store, rows) == [(True, None)] * 4
    assert await plane_rows(plane, "run-p") == rows
    await store.close()


async def test_an_accepted_post_resets_the_backoff(tmp_path: Any, plane: Plane) -> None:
    """A plane that fails every other POST (slow, timing out now and then) still takes a batch
    about every half second: the backoff counts failures in a row, not failures since the last
    empty outbox (doubling across 7 failures would take over a minute)."""
    from stores import SQLiteStore

    store = SQLiteStore(tmp_path / "local.db")
    rows = await written(store, 8)
    plane.faults.fail_every = 2

    async def settled() -> bool:
        return all(state is not None and state[0] for state in await synced(store, rows))

    started = time.monotonic()
    async with ActorSystem(store, replicator=Replicator(plane.url, "key-a", batch_size=1)):
        await eventually(settled, timeout=25)
    assert time.monotonic() - started < 25
    assert plane.faults.statuses.count(503) >= 7
    assert await plane_rows(plane, "run-p") == rows
    await store.close()


async def test_a_plane_slower_than_the_timeout_gets_smaller_batches(tmp_path: Any, plane: Plane) -> None:
    """A plane that needs 25 ms per item never answers a batch of 64 within a 1 s timeout (nor
    the same batch sent again): the replicator halves its batches until the plane answers in
    time, and every row lands."""
    from stores import SQLiteStore

    store = SQLiteStore(tmp_path / "local.db")
    rows = await written(store, 64)
    plane.faults.stall_per_item = 0.025

    async def settled() -> bool:
        return all(state is not None and state[0] for state in await synced(store, rows))

    async with ActorSystem(store, replicator=Replicator(plane.url, "key-a", batch_size=64, timeout=1.0)):
        await eventually(settled, timeout=40)
    assert min(len(ids) for ids in plane.faults.ids_seen) < 64
    assert await plane_rows(plane, "run-p") == rows
    await store.close()


async def test_a_refused_batch_with_cache_entries_sends_the_entries_first(
    store_backend: Backend, plane: Plane
) -> None:
    """A batch of rows and cache entries refused for a poison row: the entries go alone first,
    then the rows are bisected; the entries land and only the poison row is quarantined."""
    store = store_backend.open()
    rows = await written(store, 4)
    await store.cache_put("run-p", "charge", {"charged": 20})
    plane.faults.poison = {rows[1].checkpoint_id}
    await replicate_all(store, plane, rows)
    states = await synced(store, rows)
    assert states[1] == (True, INGEST)
    assert [s for i, s in enumerate(states) if i != 1] == [(True, None)] * 3
    assert await store.fetch_unsynced_cache(10) == []  # type: ignore[attr-defined]
    seen = plane.faults.ids_seen
    assert seen[0] == [r.checkpoint_id for r in rows] and seen[1] == []  # together, then the entries alone
    remote = plane.tenant_store("alpha")
    try:
        assert [e.value for e in await remote.cache_entries("run-p")] == [{"charged": 20}]  # type: ignore[attr-defined]
    finally:
        await remote.close()
    await store.close()
