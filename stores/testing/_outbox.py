"""The outbox (when the store is a ReplicatedStore)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import anyio
import msgspec
import pytest

from .._errors import RunExists, SerializationError
from .._model import (
    CacheEntry,
    utcnow,
)
from .._protocol import Store
from ._base import ConformanceBase
from ._factories import (
    make_message,
    make_pending,
    make_row,
    pause_row,
)

__all__ = ["OutboxTests"]


class OutboxTests(ConformanceBase):
    """The outbox (when the store is a ReplicatedStore)."""

    # -- outbox ----------------------------------------------------------------------------------

    async def test_outbox_fetches_new_rows_oldest_write_first(self, store: Store) -> None:
        with self.bounded():
            box = self.outbox(store)
            base = utcnow() - timedelta(hours=1)
            rows = [
                make_row(
                    f"run-{i % 3}", i // 3, created_at=base - timedelta(minutes=i), messages=[make_message(i)]
                )
                for i in range(9)
            ]
            await self.write(store, rows)
            assert await box.fetch_unsynced(100) == rows
            assert await box.fetch_unsynced(4) == rows[:4]
            await box.mark_synced([r.checkpoint_id for r in rows[:4]])
            assert await box.fetch_unsynced(100) == rows[4:]
            assert await box.sync_state(rows[0].checkpoint_id) == (True, None)
            assert await box.sync_state(rows[5].checkpoint_id) == (False, None)
            assert await box.sync_state("no-such-row") is None
            await box.mark_synced([r.checkpoint_id for r in rows[:5]])
            assert await box.fetch_unsynced(100) == rows[5:]

    async def test_outbox_sends_rows_written_after_the_newest_rows_were_deleted(self, store: Store) -> None:
        """Deleting the newest (synced) rows must not hide the rows written next from the outbox."""
        with self.bounded():
            box = self.outbox(store)
            old = await self.crashed_run(store, "run-a")
            newest = await self.crashed_run(store, "run-b")
            await box.mark_synced([r.checkpoint_id for r in [*old, *newest]])
            assert await box.fetch_unsynced(100) == []
            assert await store.delete_run("run-b") == len(newest)
            again = [make_row("run-c", 0), make_row("run-c", 1)]
            await self.write(store, again)
            assert await box.fetch_unsynced(100) == again
            await box.mark_synced([again[0].checkpoint_id])
            assert await box.fetch_unsynced(100) == again[1:]

    async def test_outbox_quarantine(self, store: Store) -> None:
        with self.bounded():
            box = self.outbox(store)
            rows = await self.crashed_run(store, "run-a")
            await box.mark_synced([])
            await box.mark_quarantined({})
            assert await box.fetch_unsynced(100) == rows
            poison = rows[1].checkpoint_id
            await box.mark_quarantined({poison: "422: too large"})
            await box.mark_quarantined({poison: "422: too large"})
            assert await box.sync_state(poison) == (True, "422: too large")
            await box.mark_quarantined({poison: "400: refused"})
            assert await box.sync_state(poison) == (True, "400: refused")
            assert await box.fetch_unsynced(100) == [rows[0], rows[2]]
            assert await box.sync_state(rows[0].checkpoint_id) == (False, None)
            await box.mark_synced([rows[0].checkpoint_id, rows[2].checkpoint_id])
            assert await box.fetch_unsynced(100) == []
            assert await box.sync_state(rows[2].checkpoint_id) == (True, None)
            assert await store.history("run-a") == rows

    async def test_outbox_import_rows(self, store: Store) -> None:
        with self.bounded():
            box = self.outbox(store)
            local = await self.crashed_run(store, "run-a")
            msgs = [make_message(i) for i in range(4)]
            restored = [make_row("run-b", seq, messages=msgs[: seq + 2]) for seq in range(3)]
            assert await box.import_rows(restored) == 3
            assert await store.history("run-b") == restored
            assert all([await box.sync_state(r.checkpoint_id) == (True, None) for r in restored])
            assert await box.fetch_unsynced(100) == local
            clash = msgspec.structs.replace(local[0], node_input={"from": "plane"})
            assert await box.import_rows([clash, *restored, make_row("run-b", 3)]) == 1
            assert await store.history("run-a") == local
            assert await box.sync_state(local[0].checkpoint_id) == (False, None)
            assert await box.import_rows([]) == 0

    async def test_outbox_import_run_brings_rows_cache_and_pending_at_once(self, store: Store) -> None:
        with self.bounded():
            box: Any = self.outbox(store)
            msgs = [make_message(i) for i in range(4)]
            rows = [make_row("run-r", 0, messages=msgs[:2]), make_row("run-r", 1, messages=msgs[:3])]
            pause = pause_row("run-r", 2, messages=msgs)
            pending = make_pending("run-r", pause)
            at = utcnow() - timedelta(minutes=5)
            cache = [
                CacheEntry(execution_id="run-r", key="k1", value={"charged": 20}, created_at=at),
                CacheEntry(execution_id="run-r", key="k2", value=None, created_at=at + timedelta(seconds=1)),
            ]
            assert await box.import_run("run-r", [pause, *rows], cache, pending) == 3
            assert await store.history("run-r") == [*rows, pause]
            assert await box.cache_entries("run-r") == cache
            assert (await store.cache_get("run-r", "k1")).value == {"charged": 20}  # type: ignore[union-attr]
            assert await store.pending("run-r") == [pending]
            assert [await box.sync_state(r.checkpoint_id) for r in (*rows, pause)] == [(True, None)] * 3
            assert await box.fetch_unsynced(100) == []
            with pytest.raises(RunExists):
                await box.import_run("run-r", [make_row("run-r", 0)], [], None)
            assert await store.history("run-r") == [*rows, pause]
            assert await box.cache_entries("no-such-run") == []

    async def test_outbox_import_run_writes_nothing_when_any_part_is_refused(self, store: Store) -> None:
        with self.bounded():
            box: Any = self.outbox(store)
            rows = [make_row("run-x", 0), make_row("run-x", 1)]
            bad = [CacheEntry(execution_id="run-x", key="k", value=float("nan"), created_at=utcnow())]
            with pytest.raises(SerializationError):
                await box.import_run("run-x", rows, bad, None)
            assert await store.history("run-x") == []
            assert await box.cache_entries("run-x") == []

    async def test_outbox_ships_cache_entries(self, store: Store) -> None:
        with self.bounded():
            box: Any = self.outbox(store)
            await store.cache_put("run-c", "k1", {"charged": 1})
            await anyio.sleep(0.002)
            await store.cache_put("run-d", "k2", [1, 2])
            found = await box.fetch_unsynced_cache(10)
            assert [(e.execution_id, e.key, e.value) for e in found] == [
                ("run-c", "k1", {"charged": 1}),
                ("run-d", "k2", [1, 2]),
            ]
            assert (await box.fetch_unsynced_cache(1))[0].key == "k1"
            await box.mark_cache_synced([("run-c", "k1"), ("no-such-run", "k")])
            await box.mark_cache_synced([])
            assert [e.key for e in await box.fetch_unsynced_cache(10)] == ["k2"]
            await box.import_run(
                "run-e",
                [make_row("run-e", 0)],
                [CacheEntry(execution_id="run-e", key="k", value=1, created_at=utcnow())],
                None,
            )
            assert [e.key for e in await box.fetch_unsynced_cache(10)] == ["k2"]  # imported: already synced

    async def test_prune_keeps_what_the_plane_has_not_accepted_once_attached(self, store: Store) -> None:
        with self.bounded():
            box: Any = self.outbox(store)
            done = await self.completed_run(store, "done")
            crashed = await self.crashed_run(store, "crashed")
            await store.cache_put("done", "k", 1)
            await box.mark_synced([done[0].checkpoint_id, crashed[0].checkpoint_id])
            await box.attach_replica()
            await box.attach_replica()  # idempotent
            await anyio.sleep(0.01)
            assert await store.prune(timedelta(0)) == 2
            assert await store.history("done") == done[1:]
            assert await store.history("crashed") == crashed[1:]
            assert await store.cache_get("done", "k") is not None  # not accepted yet
            await box.mark_synced([r.checkpoint_id for r in [*done, *crashed]])
            await box.mark_cache_synced([("done", "k")])
            assert await store.prune(timedelta(0)) == len(done) - 1 + 1
            assert await store.history("done") == []
            assert await store.cache_get("done", "k") is None
            assert await store.history("crashed") == [crashed[2]]

    async def test_outbox_gives_rows_as_stored_with_the_messages_each_adds(self, store: Store) -> None:
        with self.bounded():
            box: Any = self.outbox(store)
            msgs = [make_message(i) for i in range(5)]
            rows = [
                make_row("run-s", 0, messages=msgs[:2]),
                make_row("run-s", 1),  # no messages
                make_row("run-s", 2, messages=msgs[:2]),  # adds nothing
                make_row("run-s", 3, messages=msgs[:5]),
            ]
            await self.write(store, rows)
            found = await box.fetch_unsynced_stored(10)
            assert [(s.checkpoint_id, s.seq, s.runner, s.node_id) for s, _ in found] == [
                (r.checkpoint_id, r.seq, r.runner, r.node_id) for r in rows
            ]
            chunks = [None if chunk is None else msgspec.json.decode(chunk) for _, chunk in found]
            assert chunks == [msgs[:2], None, None, msgs[2:5]]
            assert [s.message_count for s, _ in found] == [2, 0, 2, 5]
            assert found[1][0].log_id is None and found[0][0].log_id == found[3][0].log_id
            assert msgspec.json.decode(found[0][0].state_snapshot) == {"turn": 0}
            assert found[0][0].created_at == rows[0].created_at
            await box.mark_synced([rows[0].checkpoint_id])
            assert [s.seq for s, _ in await box.fetch_unsynced_stored(2)] == [1, 2]
