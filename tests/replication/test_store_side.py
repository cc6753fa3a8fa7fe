"""The store's side of replication on both backends: a store at the previous schema opens in place
with its cache entries to send, and a replicator sends cache entries and marks the store attached."""

from __future__ import annotations

import sqlite3

import asyncpg
import pytest
from _plane_support import Plane, eventually, plane_fixture  # noqa: F401 (fixture)
from conftest import Backend

from actors import ActorSystem
from replication import Replicator
from stores.testing import make_row

pytestmark = pytest.mark.anyio


async def downgrade(backend: Backend) -> None:
    """Take the database back to the schema before the cache entries' outbox: that migration's
    objects go, and so do those of the later migrations that are not written to apply again."""
    if backend.name == "sqlite":
        conn = sqlite3.connect(backend.target)
        conn.execute("DROP INDEX idempotency_cache_unsynced")
        conn.execute("ALTER TABLE idempotency_cache DROP COLUMN synced")
        conn.execute("DROP TABLE replica")
        _undo_queues(conn)
        conn.execute("PRAGMA user_version = 5")
        conn.commit()
        conn.close()
        return
    conn = await asyncpg.connect(backend.target)
    try:
        s = f'"{backend.schema}"'
        await conn.execute(
            f"ALTER TABLE {s}.idempotency_cache DROP COLUMN synced; DROP TABLE {s}.replica; "
            f"DELETE FROM {s}.schema_version WHERE version >= 5"
        )
        await conn.execute(
            f"DROP INDEX {s}.run_owners_waiting_idx; DROP INDEX {s}.run_owners_queue_idx; "
            f"ALTER TABLE {s}.run_owners DROP COLUMN queue, DROP COLUMN key, DROP COLUMN priority; "
            f"CREATE INDEX run_owners_queued_idx ON {s}.run_owners (since) WHERE owner IS NULL; "
            f"DROP TABLE {s}.queues; DROP TABLE {s}.run_queues; DROP TABLE {s}.queue_starts"
        )
    finally:
        await conn.close()


def _undo_queues(conn: sqlite3.Connection) -> None:
    """SQLite: drop the queues' columns, indexes and tables (their migration adds columns)."""
    for statement in (
        "DROP INDEX run_owners_waiting",
        "DROP INDEX run_owners_queue",
        "ALTER TABLE run_owners DROP COLUMN queue",
        "ALTER TABLE run_owners DROP COLUMN key",
        "ALTER TABLE run_owners DROP COLUMN priority",
        "CREATE INDEX run_owners_queued ON run_owners (since) WHERE owner IS NULL",
        "DROP TABLE queues",
        "DROP TABLE queue_starts",
        "DROP TABLE run_queues",
    ):
        conn.execute(statement)


async def test_an_older_store_opens_with_its_cache_entries_to_send(
    store_backend: Backend, plane: Plane
) -> None:
    store = store_backend.open()
    await store.append(make_row("run-old", 0))
    await store.cache_put("run-old", "charge", {"charged": 5})
    await store.close()
    await downgrade(store_backend)

    store = store_backend.open()
    assert [e.key for e in await store.fetch_unsynced_cache(10)] == ["charge"]  # type: ignore[attr-defined]
    replicator = Replicator(plane.url, "key-a")
    async with ActorSystem(store, replicator=replicator):

        async def sent() -> bool:
            return not await store.fetch_unsynced_cache(10) and not await store.fetch_unsynced(10)  # type: ignore[attr-defined]

        await eventually(sent)
    await store.close()
    remote = plane.tenant_store("alpha")
    try:
        assert [(e.key, e.value) for e in await remote.cache_entries("run-old")] == [
            ("charge", {"charged": 5})
        ]  # type: ignore[attr-defined]
        assert [r.seq for r in await remote.history("run-old")] == [0]
    finally:
        await remote.close()
