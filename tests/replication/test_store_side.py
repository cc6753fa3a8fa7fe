"""The store's side of replication on both backends: a store at the schema before the cache entries'
outbox opens in place with its cache entries and its inbox entries to send (the later migrations
undone too), and a replicator sends them and marks the store attached."""

from __future__ import annotations

import sqlite3
from typing import Any

import asyncpg
import pytest
from _plane_support import Plane, eventually, plane_fixture  # noqa: F401 (fixture)
from conftest import Backend, on_asyncpg

from actors import ActorSystem
from replication import Replicator
from stores import CONSUMES, SIGNAL
from stores.testing import make_row

pytestmark = pytest.mark.anyio


async def downgrade(backend: Backend) -> None:
    """Take the database back to the schema before the cache entries' outbox: that migration's
    objects go, and so do those of the later migrations that are not written to apply again."""
    if backend.name == "sqlite":
        conn = sqlite3.connect(backend.target)
        for statement in (  # the inbox entries' outbox (its columns cannot be added twice)
            "DROP INDEX signals_signal_id",
            "DROP INDEX signals_unsynced",
            "ALTER TABLE signals DROP COLUMN signal_id",
            "ALTER TABLE signals DROP COLUMN synced",
            "ALTER TABLE signals DROP COLUMN sync_error",
        ):
            conn.execute(statement)
        conn.execute("DROP INDEX idempotency_cache_unsynced")
        conn.execute("ALTER TABLE idempotency_cache DROP COLUMN synced")
        conn.execute("DROP TABLE replica")
        _undo_queues(conn)
        conn.execute("PRAGMA user_version = 5")
        conn.commit()
        conn.close()
        return
    s = f'"{backend.schema}"'

    async def undo(conn: asyncpg.Connection) -> None:
        await conn.execute(
            f"ALTER TABLE {s}.idempotency_cache DROP COLUMN synced; DROP TABLE {s}.replica; "
            f"DELETE FROM {s}.schema_version WHERE version >= 5"
        )
        await conn.execute(
            f"DROP INDEX {s}.signals_signal_id_idx; DROP INDEX {s}.signals_unsynced_idx; "
            f"ALTER TABLE {s}.signals DROP COLUMN signal_id, DROP COLUMN synced, DROP COLUMN sync_error"
        )
        await conn.execute(
            f"DROP INDEX {s}.run_owners_waiting_idx; DROP INDEX {s}.run_owners_queue_idx; "
            f"ALTER TABLE {s}.run_owners DROP COLUMN queue, DROP COLUMN key, DROP COLUMN priority; "
            f"CREATE INDEX run_owners_queued_idx ON {s}.run_owners (since) WHERE owner IS NULL; "
            f"DROP TABLE {s}.queues; DROP TABLE {s}.run_queues; DROP TABLE {s}.queue_starts"
        )

    await on_asyncpg(backend.target, undo)


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


async def test_an_older_store_opens_with_its_cache_and_inbox_entries_to_send(
    store_backend: Backend, plane: Plane
) -> None:
    store = store_backend.open()
    await store.append(make_row("run-old", 0))
    await store.cache_put("run-old", "charge", {"charged": 5})
    first = await store.signal("run-old", "note", {"k": 1})
    await store.signal("run-old", "note", {"k": 2})
    await store.append(make_row("run-old", 1, step_type=SIGNAL, node_input={CONSUMES: [first]}))
    await store.close()
    await downgrade(store_backend)

    store = store_backend.open()
    box: Any = store
    assert [e.key for e in await box.fetch_unsynced_cache(10)] == ["charge"]
    waiting = await box.fetch_unsynced_signals(10)  # each named by the migration, to send
    assert [(e.payload, e.consumed_seq) for e in waiting] == [({"k": 1}, 1), ({"k": 2}, None)]
    assert all(e.signal_id for e in waiting) and waiting[0].signal_id != waiting[1].signal_id
    replicator = Replicator(plane.url, "key-a")
    async with ActorSystem(store, replicator=replicator):

        async def sent() -> bool:
            return not (
                await box.fetch_unsynced_cache(10)
                or await box.fetch_unsynced(10)
                or await box.fetch_unsynced_signals(10)
            )

        await eventually(sent)
    await store.signal("run-old", "note", {"k": 3})  # a signal sent after the upgrade is named too
    assert (await store.signals("run-old"))[-1].signal_id
    await store.close()
    remote: Any = plane.tenant_store("alpha")
    try:
        assert [(e.key, e.value) for e in await remote.cache_entries("run-old")] == [
            ("charge", {"charged": 5})
        ]
        assert [r.seq for r in await remote.history("run-old")] == [0, 1]
        assert [(e.signal_id, e.consumed_seq) for e in await remote.signal_entries("run-old")] == [
            (e.signal_id, e.consumed_seq) for e in waiting
        ]
    finally:
        await remote.close()
