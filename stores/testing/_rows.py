"""Rows: the protocol, setup, append, latest, get, history, the conflicts, the schema refusal."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import anyio
import pytest

from .._errors import (
    IncompatibleSchema,
    RunExists,
    SerializationError,
    WriteConflict,
)
from .._model import (
    COMPLETED,
    TOOL_CALL,
    Checkpoint,
    new_id,
    utcnow,
)
from .._protocol import Store
from ._base import ConformanceBase
from ._factories import (
    make_message,
    make_row,
)

__all__ = ["RowTests"]


class RowTests(ConformanceBase):
    """Rows: the protocol, setup, append, latest, get, history, the conflicts, the schema refusal."""

    # -- protocol, setup -------------------------------------------------------------------------

    async def test_implements_the_store_protocol(self, store: Store) -> None:
        assert isinstance(store, Store)

    async def test_setup_twice_and_on_a_second_instance(self, store: Store) -> None:
        with self.bounded():
            rows = await self.crashed_run(store, "run-a")
            await store.setup()
            assert await store.history("run-a") == rows
            other = await self.open_store()
            await other.setup()
            assert await other.history("run-a") == rows
            row = make_row("run-a", 3)
            await other.append(row)
            assert await store.history("run-a") == [*rows, row]

    # -- append, latest, get, history ------------------------------------------------------------

    async def test_append_round_trips_every_field(self, store: Store) -> None:
        with self.bounded():
            row = make_row(
                "run-a",
                0,
                "turn:0/tool:lookup",
                step_type=TOOL_CALL,
                status=COMPLETED,
                messages=[make_message(0, "system"), make_message(1)],
                agent_path="swarm:s/agent:a/tool:lookup",
                state_snapshot={"turn": 0, "tool_name": "lookup", "nested": {"a": [1, 2.5, None, True]}},
                node_input={"query": "ünïcode ☃", "limit": -(2**63), "big": 2**63 - 1},
                node_output={"ok": False, "empty": {}, "list": []},
                interrupt_reason=None,
                interrupt_context={"k": "v"},
                parent_checkpoint_id="parent-1",
                created_at=datetime(2021, 5, 6, 7, 8, 9, 123456, tzinfo=UTC),
            )
            await store.append(row)
            assert await store.latest("run-a") == row
            assert await store.get("run-a", row.checkpoint_id) == row
            assert await store.history("run-a") == [row]
            got = await store.latest("run-a")
            assert got is not None and got.created_at.utcoffset() == timedelta(0)

    async def test_latest_and_get_of_missing_rows(self, store: Store) -> None:
        with self.bounded():
            assert await store.latest("nobody") is None
            assert await store.history("nobody") == []
            row = make_row("run-a", 0)
            await store.append(row)
            assert await store.get("run-a", "no-such-id") is None
            assert await store.get("run-b", row.checkpoint_id) is None  # both keys must match

    async def test_history_orders_by_seq_not_by_time(self, store: Store) -> None:
        with self.bounded():
            base = utcnow() - timedelta(hours=1)
            rows = [make_row("run-a", seq, created_at=base - timedelta(minutes=seq)) for seq in range(5)]
            await self.write(store, rows)
            assert await store.history("run-a") == rows
            assert await store.latest("run-a") == rows[-1]

    async def test_history_orders_by_seq_when_appended_out_of_order(self, store: Store) -> None:
        with self.bounded():
            rows = [make_row("run-a", seq) for seq in range(4)]
            await self.write(store, [rows[0], rows[2], rows[3], rows[1]])
            assert await store.history("run-a") == rows
            assert await store.latest("run-a") == rows[3]

    async def test_two_rows_for_the_same_node(self, store: Store) -> None:
        with self.bounded():
            rows = await self.write(store, [make_row("run-a", 0, "turn:0"), make_row("run-a", 1, "turn:0")])
            assert rows[0].checkpoint_id != rows[1].checkpoint_id
            assert await store.history("run-a") == rows

    async def test_seq_zero_on_a_used_run_raises_run_exists(self, store: Store) -> None:
        with self.bounded():
            rows = await self.crashed_run(store, "run-a")
            with pytest.raises(RunExists):
                await store.append(make_row("run-a", 0, "turn:9"))
            assert await store.history("run-a") == rows

    async def test_taken_seq_raises_write_conflict_and_keeps_the_stored_row(self, store: Store) -> None:
        with self.bounded():
            rows = await self.crashed_run(store, "run-a")
            stale = make_row("run-a", 1, "turn:0/tool:other", node_input={"stale": True})
            with pytest.raises(WriteConflict):
                await store.append(stale)
            assert await store.history("run-a") == rows
            assert await store.get("run-a", stale.checkpoint_id) is None

    async def test_taken_checkpoint_id_raises_write_conflict(self, store: Store) -> None:
        with self.bounded():
            rows = await self.crashed_run(store, "run-a")
            same_run = make_row("run-a", 3, checkpoint_id=rows[1].checkpoint_id, node_input={"x": 1})
            with pytest.raises(WriteConflict):
                await store.append(same_run)
            other_run = make_row("run-b", 0, checkpoint_id=rows[0].checkpoint_id)
            with pytest.raises(WriteConflict):
                await store.append(other_run)
            assert await store.history("run-a") == rows
            assert await store.history("run-b") == []

    async def test_a_failed_write_leaves_the_message_log_usable(self, store: Store) -> None:
        with self.bounded():
            msgs = [make_message(i) for i in range(6)]
            r0 = make_row("run-a", 0, messages=msgs[:2])
            await store.append(r0)
            with pytest.raises(RunExists):
                await store.append(make_row("run-a", 0, messages=msgs[:4], checkpoint_id=new_id()))
            with pytest.raises(WriteConflict):
                await store.append(make_row("run-a", 1, messages=msgs[:4], checkpoint_id=r0.checkpoint_id))
            with pytest.raises(SerializationError):
                await store.append(make_row("run-a", 1, messages=[*msgs[:3], {"bad": math.nan}]))
            with pytest.raises(SerializationError):  # new messages on a row that is refused
                await store.append(make_row("run-a", 1, messages=msgs[:3], node_input={"x": math.inf}))
            r1 = make_row("run-a", 1, messages=msgs[:3])
            r2 = make_row("run-a", 2, messages=msgs)
            await self.write(store, [r1, r2])
            assert await store.history("run-a") == [r0, r1, r2]
            fresh = await self.open_store()
            assert await fresh.history("run-a") == [r0, r1, r2]

    async def test_concurrent_appends_each_get_their_own_outcome(self, store: Store) -> None:
        with self.bounded():
            first = await self.write(store, [make_row("run-x", 0), make_row("run-x", 1)])
            rows = [make_row(f"run-{i}", 0, messages=[make_message(i)]) for i in range(20)]
            stale = make_row("run-x", 1, "turn:stale")
            outcomes: dict[str, BaseException | None] = {}

            async def one(row: Checkpoint) -> None:
                try:
                    await store.append(row)
                    outcomes[row.checkpoint_id] = None
                except Exception as exc:
                    outcomes[row.checkpoint_id] = exc

            async with anyio.create_task_group() as tg:
                for row in [*rows[:10], stale, *rows[10:]]:
                    tg.start_soon(one, row)
            assert isinstance(outcomes[stale.checkpoint_id], WriteConflict)
            assert all(outcomes[row.checkpoint_id] is None for row in rows)
            for row in rows:
                assert await store.history(row.execution_id) == [row]
            assert await store.history("run-x") == first

    # -- schema version ----------------------------------------------------------------------------

    async def test_a_newer_schema_is_refused(self, store: Store) -> None:
        with self.bounded():
            rows = await self.crashed_run(store, "run-a")
            await self.bump_schema_version(store)
            newer = await self.make_store()
            try:
                with pytest.raises(IncompatibleSchema):
                    await newer.setup()
            finally:
                with anyio.move_on_after(10):
                    await newer.close()
            assert sorted(await self.raw_checkpoint_ids("run-a")) == sorted(r.checkpoint_id for r in rows)
