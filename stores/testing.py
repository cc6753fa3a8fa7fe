"""A reusable conformance suite for tether stores.

A store passes when it behaves like the protocol's docstrings and the rules of DESIGN.md say:
ordering by ``seq``, the conflicts, pause and claim, re-entry, fork, prune (rule 10), the cache, the
ownership lock, the outbox (when the store is a :class:`~stores.ReplicatedStore`), messages stored
once, the JSON rule, the row size limit and the newer-schema refusal.

Run it against your store by subclassing :class:`StoreConformance` in a test module::

    import pytest
    from stores.testing import StoreConformance

    class TestMyStore(StoreConformance):
        @pytest.fixture(autouse=True)
        def _database(self, tmp_path):
            self.path = tmp_path / "my.db"

        async def make_store(self, **options):
            return MyStore(self.path, **options)   # not set up: the suite calls setup()

        async def bump_schema_version(self, store):
            ...  # raw SQL: mark the database as written by a newer schema version

        async def raw_checkpoint_ids(self, execution_id):
            ...  # raw SQL: the ids of the run's stored rows

Every ``make_store`` call must open the *same* database (the suite opens several instances to
check the ownership lock, concurrent writers and the schema refusal). ``options`` may hold
``max_row_bytes``. The suite needs ``anyio``'s pytest plugin (it ships with anyio) and an
``anyio_backend`` fixture (e.g. returning ``"asyncio"``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import anyio
import msgspec
import pytest

from ._errors import (
    AlreadyResumed,
    CheckpointError,
    IncompatibleSchema,
    RowTooLarge,
    RunExists,
    RunNotFound,
    SerializationError,
    WriteConflict,
)
from ._model import (
    COMPLETED,
    FAILED,
    HITL_PAUSE,
    INTERRUPTED,
    LLM_CALL,
    RECOVER,
    REENTRY_SEQ,
    RESUME,
    RESUME_KEY,
    RUN_END,
    TOOL_CALL,
    Cached,
    Checkpoint,
    PendingInterrupt,
    ReEntry,
    new_id,
    utcnow,
)
from ._protocol import ReplicatedStore, Store

__all__ = [
    "StoreConformance",
    "make_message",
    "make_pending",
    "make_row",
    "resume_row",
    "run_end_row",
]

_UNSET: Any = object()


def make_message(i: int, role: str = "user", size: int = 40) -> dict[str, Any]:
    """A chat message numbered ``i`` with about ``size`` bytes of content."""
    text = f"message {i} " + "x" * max(0, size - 12)
    return {"role": role, "content": text, "tool_calls": [], "tool_call_id": None, "name": None}


def make_row(
    execution_id: str,
    seq: int,
    node_id: str | None = None,
    *,
    step_type: str = LLM_CALL,
    status: str = COMPLETED,
    messages: Sequence[Any] | None = None,
    agent_path: str | None = "agent:a",
    step_index: int | None = None,
    created_at: datetime | None = None,
    **fields: Any,
) -> Checkpoint:
    """A row of the run ``execution_id`` at ``seq``; ``messages`` go into ``state_snapshot``."""
    turn = seq if step_index is None else step_index
    snapshot: dict[str, Any] = dict(fields.pop("state_snapshot", {"turn": turn}))
    if messages is not None:
        snapshot["messages"] = list(messages)
    extra: dict[str, Any] = {}
    if created_at is not None:
        extra["created_at"] = created_at
    return Checkpoint(
        execution_id=execution_id,
        seq=seq,
        runner="conformance",
        node_id=node_id if node_id is not None else f"turn:{turn}",
        step_index=turn,
        step_type=step_type,
        status=status,
        state_snapshot=snapshot,
        agent_path=agent_path,
        **extra,
        **fields,
    )


def run_end_row(
    execution_id: str, seq: int, status: str = COMPLETED, reason: str | None = None
) -> Checkpoint:
    """The ``run_end`` marker of a run (``failed`` with ``reason="cancelled"`` is a cancel)."""
    snapshot: dict[str, Any] = {"run_status": status}
    if reason is not None:
        snapshot["run_reason"] = reason
    return make_row(execution_id, seq, "run_end", step_type=RUN_END, status=status, state_snapshot=snapshot)


def resume_row(
    execution_id: str, seq: int, pause: Checkpoint, *, approved: bool = True, by: str = "alice"
) -> Checkpoint:
    """The ``resume`` row that claims the pause ``pause``, carrying the decision."""
    return make_row(
        execution_id,
        seq,
        pause.node_id,
        step_type=RESUME,
        step_index=pause.step_index,
        agent_path=pause.agent_path,
        node_input={REENTRY_SEQ: pause.seq, RESUME_KEY: {"approved": approved, "metadata": {"by": by}}},
    )


def make_pending(
    execution_id: str,
    pause: Checkpoint | None = None,
    *,
    context: dict[str, Any] | None = None,
    created_at: datetime | None = None,
) -> PendingInterrupt:
    """The pending row that goes with the ``hitl_pause`` row ``pause``."""
    extra: dict[str, Any] = {}
    if created_at is not None:
        extra["created_at"] = created_at
    return PendingInterrupt(
        execution_id=execution_id,
        reason=pause.interrupt_reason or "approve" if pause is not None else "approve",
        context=context if context is not None else {"amount": 120, "items": ["a", "b"]},
        node_id=pause.node_id if pause is not None else "turn:0/tool:refund",
        agent_path=pause.agent_path if pause is not None else "agent:a/tool:refund",
        **extra,
    )


def _pause_row(
    execution_id: str, seq: int, turn: int = 0, messages: Sequence[Any] | None = None
) -> Checkpoint:
    return make_row(
        execution_id,
        seq,
        f"turn:{turn}/tool:refund",
        step_type=HITL_PAUSE,
        status=INTERRUPTED,
        step_index=turn,
        agent_path="agent:a/tool:refund",
        messages=messages,
        node_input={"amount": 120},
        interrupt_reason="approve",
        interrupt_context={"amount": 120, "items": ["a", "b"]},
    )


def _tool_row(execution_id: str, seq: int, turn: int = 0) -> Checkpoint:
    return make_row(
        execution_id,
        seq,
        f"turn:{turn}/tool:refund",
        step_type=TOOL_CALL,
        step_index=turn,
        agent_path="agent:a/tool:refund",
        node_input={"amount": 120},
    )


@dataclasses.dataclass
class _Point:
    x: int
    y: tuple[int, ...]


class _Pair(msgspec.Struct):
    left: int
    right: list[int]


def _bad_values() -> list[tuple[str, Any, str]]:
    """(label, value, path inside the value) for every kind the JSON rule refuses."""
    return [
        ("nan", math.nan, ""),
        ("inf", math.inf, ""),
        ("-inf", -math.inf, ""),
        ("bytes", b"\x01\x02", ""),
        ("set", {1, 2}, ""),
        ("datetime", datetime(2024, 1, 1, tzinfo=UTC), ""),
        ("int-key", {1: "a"}, ""),
        ("nul", "a\x00b", ""),
        ("int-over-64-bits", 2**64, ""),
        ("int-under-64-bits", -(2**63) - 1, ""),
        ("object", object(), ""),
        ("nested", {"deep": [1, {"z": math.nan}]}, ".deep[1].z"),
    ]


_BAD = _bad_values()
_BAD_IDS = [label for label, _, _ in _BAD]


class StoreConformance:
    """The conformance suite. Subclass it and implement :meth:`make_store` (and the backend hooks)."""

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.anyio]

    #: Seconds any one test may take before it fails.
    timeout: ClassVar[float] = 30.0
    #: Whether the store must implement :class:`ReplicatedStore` (else the outbox tests skip).
    require_outbox: ClassVar[bool] = False
    #: Whether a second store instance must see the first one's ownership lock as held.
    lock_across_instances: ClassVar[bool] = True

    _opened: list[Store]

    # -- hooks -----------------------------------------------------------------------------------

    async def make_store(self, **options: Any) -> Store:
        """A new store on the test's database, not yet set up; ``options`` may hold ``max_row_bytes``."""
        raise NotImplementedError("subclass StoreConformance and implement make_store()")

    async def bump_schema_version(self, store: Store) -> None:
        """Mark the database as written by a newer schema version (raw SQL). Skips when not provided."""
        pytest.skip("this backend provides no bump_schema_version() hook")

    async def raw_checkpoint_ids(self, execution_id: str) -> list[str]:
        """The ids of the run's stored rows, read with raw SQL, bypassing the store. Skips when absent."""
        pytest.skip("this backend provides no raw_checkpoint_ids() hook")

    # -- fixtures and helpers --------------------------------------------------------------------

    @pytest.fixture
    async def store(self) -> AsyncIterator[Store]:
        """A set-up store; every store the test opens is closed afterwards."""
        self._opened = []
        first = await self.open_store()
        try:
            yield first
        finally:
            for opened in reversed(self._opened):
                with anyio.move_on_after(10):
                    await opened.close()
            self._opened = []

    async def open_store(self, **options: Any) -> Store:
        """Another set-up store on the same database (closed at the end of the test)."""
        created = await self.make_store(**options)
        self._opened.append(created)
        await created.setup()
        return created

    async def close_store(self, store: Store) -> None:
        """Close a store opened by :meth:`open_store` before the end of the test."""
        if store in self._opened:
            self._opened.remove(store)
        await store.close()

    def bounded(self) -> Any:
        """A cancel scope that fails the test after :attr:`timeout` seconds."""
        return anyio.fail_after(self.timeout)

    def outbox(self, store: Store) -> ReplicatedStore:
        """The store as a :class:`ReplicatedStore`, or skip (or fail, if required)."""
        if not isinstance(store, ReplicatedStore):
            if self.require_outbox:
                pytest.fail(f"{type(store).__name__} does not implement ReplicatedStore")
            pytest.skip("the store has no outbox")
        return store

    @staticmethod
    async def write(store: Store, rows: Sequence[Checkpoint]) -> list[Checkpoint]:
        for row in rows:
            await store.append(row)
        return list(rows)

    async def completed_run(self, store: Store, eid: str) -> list[Checkpoint]:
        return await self.write(
            store,
            [make_row(eid, 0), _tool_row(eid, 1), make_row(eid, 2, step_index=1), run_end_row(eid, 3)],
        )

    async def crashed_run(self, store: Store, eid: str) -> list[Checkpoint]:
        return await self.write(store, [make_row(eid, 0), _tool_row(eid, 1), make_row(eid, 2, step_index=1)])

    async def failed_run(self, store: Store, eid: str) -> list[Checkpoint]:
        return await self.write(store, [make_row(eid, 0), _tool_row(eid, 1), run_end_row(eid, 2, FAILED)])

    async def paused_run(self, store: Store, eid: str) -> tuple[list[Checkpoint], PendingInterrupt]:
        rows = await self.write(store, [make_row(eid, 0), _tool_row(eid, 1)])
        pause = _pause_row(eid, 2)
        pending = make_pending(eid, pause)
        await store.append_pause(pause, pending)
        return [*rows, pause], pending

    async def reentry_or_error(self, store: Store, eid: str) -> ReEntry | type[BaseException]:
        try:
            return await store.reentry(eid)
        except Exception as exc:
            return type(exc)

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

    # -- pause, claim, cancel --------------------------------------------------------------------

    async def test_pause_writes_the_row_and_the_pending_row(self, store: Store) -> None:
        with self.bounded():
            rows, pending = await self.paused_run(store, "run-a")
            assert await store.history("run-a") == rows
            latest = await store.latest("run-a")
            assert latest is not None and latest.status == INTERRUPTED
            assert latest.interrupt_reason == "approve"
            assert latest.interrupt_context == {"amount": 120, "items": ["a", "b"]}
            assert await store.pending("run-a") == [pending]
            assert await store.pending() == [pending]

    async def test_second_pause_of_a_run_conflicts_and_writes_nothing(self, store: Store) -> None:
        with self.bounded():
            rows, pending = await self.paused_run(store, "run-a")
            again = _pause_row("run-a", 3, turn=1)
            with pytest.raises(WriteConflict):
                await store.append_pause(again, make_pending("run-a", again, context={"second": True}))
            assert await store.history("run-a") == rows
            assert await store.pending("run-a") == [pending]

    async def test_pause_at_a_taken_seq_writes_no_pending_row(self, store: Store) -> None:
        with self.bounded():
            rows = await self.crashed_run(store, "run-a")
            pause = _pause_row("run-a", 2)
            with pytest.raises(WriteConflict):
                await store.append_pause(pause, make_pending("run-a", pause))
            assert await store.history("run-a") == rows
            assert await store.pending("run-a") == []

    async def test_claim_first_wins_and_returns_the_pending_row(self, store: Store) -> None:
        with self.bounded():
            rows, pending = await self.paused_run(store, "run-a")
            claim = resume_row("run-a", 3, rows[-1])
            got = await store.claim(claim)
            assert got == pending
            assert got.context == {"amount": 120, "items": ["a", "b"]}
            assert await store.pending("run-a") == []
            assert await store.history("run-a") == [*rows, claim]
            with pytest.raises(AlreadyResumed):
                await store.claim(resume_row("run-a", 4, rows[-1], by="bob"))
            with pytest.raises(AlreadyResumed):
                await store.claim(resume_row("run-a", 3, rows[-1], by="carol"))
            assert await store.history("run-a") == [*rows, claim]

    async def test_claim_of_an_unknown_run_raises_run_not_found(self, store: Store) -> None:
        with self.bounded():
            with pytest.raises(RunNotFound, match="ghost-run"):
                await store.claim(make_row("ghost-run", 1, step_type=RESUME))
            assert await store.history("ghost-run") == []

    async def test_claim_of_a_run_that_never_paused_is_refused(self, store: Store) -> None:
        with self.bounded():
            rows = await self.crashed_run(store, "run-a")
            with pytest.raises(AlreadyResumed):
                await store.claim(make_row("run-a", 3, step_type=RESUME))
            assert await store.history("run-a") == rows

    async def test_claim_at_a_taken_seq_keeps_the_pause_claimable(self, store: Store) -> None:
        with self.bounded():
            rows, pending = await self.paused_run(store, "run-a")
            squatter = make_row("run-a", 3, rows[-1].node_id, step_type=RECOVER, node_input={REENTRY_SEQ: 2})
            await store.append(squatter)
            with pytest.raises(WriteConflict):
                await store.claim(resume_row("run-a", 3, rows[-1]))
            assert await store.pending("run-a") == [pending]
            claim = resume_row("run-a", 4, rows[-1])
            assert await store.claim(claim) == pending
            assert await store.history("run-a") == [*rows, squatter, claim]

    async def test_cancel_of_a_paused_run_deletes_its_pending_row(self, store: Store) -> None:
        with self.bounded():
            rows, _ = await self.paused_run(store, "run-a")
            _, other_pending = await self.paused_run(store, "run-b")
            marker = run_end_row("run-a", 3, FAILED, reason="cancelled")
            await store.append(marker)
            assert await store.pending("run-a") == []
            assert await store.pending() == [other_pending]
            assert await store.history("run-a") == [*rows, marker]
            entry = await store.reentry("run-a")
            assert entry.step == rows[-1] and entry.newest == marker and entry.resume is None
            with pytest.raises(AlreadyResumed):
                await store.claim(resume_row("run-a", 4, rows[-1]))
            assert await store.history("run-a") == [*rows, marker]

    # -- re-entry and fork -------------------------------------------------------------------------

    async def test_reentry_of_a_completed_run_is_refused_and_writes_nothing(self, store: Store) -> None:
        with self.bounded():
            rows = await self.completed_run(store, "run-a")
            with pytest.raises(AlreadyResumed):
                await store.reentry("run-a")
            assert await store.history("run-a") == rows

    async def test_reentry_steps_over_a_failed_run_end(self, store: Store) -> None:
        with self.bounded():
            rows = await self.failed_run(store, "run-a")
            assert await store.reentry("run-a") == ReEntry(step=rows[1], newest=rows[2], resume=None)

    async def test_reentry_of_a_crashed_run_is_its_newest_row(self, store: Store) -> None:
        with self.bounded():
            rows = await self.crashed_run(store, "run-a")
            assert await store.reentry("run-a") == ReEntry(step=rows[2], newest=rows[2], resume=None)

    async def test_reentry_reads_through_resume_and_recover_rows(self, store: Store) -> None:
        with self.bounded():
            rows, _ = await self.paused_run(store, "run-a")
            claim = resume_row("run-a", 3, rows[-1], approved=False, by="dana")
            await store.claim(claim)
            decision = {"approved": False, "metadata": {"by": "dana"}}
            assert await store.reentry("run-a") == ReEntry(step=rows[-1], newest=claim, resume=decision)
            recover = make_row(
                "run-a", 4, claim.node_id, step_type=RECOVER, node_input={REENTRY_SEQ: claim.seq}
            )
            await store.append(recover)
            assert await store.reentry("run-a") == ReEntry(step=rows[-1], newest=recover, resume=decision)

    async def test_reentry_reads_through_a_recover_row(self, store: Store) -> None:
        with self.bounded():
            rows = await self.crashed_run(store, "run-b")
            tool = rows[1]
            extra = make_row("run-b", 3, tool.node_id, step_type=RECOVER, node_input={REENTRY_SEQ: tool.seq})
            await store.append(extra)
            assert await store.reentry("run-b") == ReEntry(step=tool, newest=extra, resume=None)

    async def test_reentry_of_an_unknown_run_raises_run_not_found(self, store: Store) -> None:
        with self.bounded():
            with pytest.raises(RunNotFound, match="ghost-run"):
                await store.reentry("ghost-run")
            assert await store.history("ghost-run") == []

    async def test_forkable_defaults_to_the_newest_step(self, store: Store) -> None:
        with self.bounded():
            rows = await self.completed_run(store, "run-a")
            assert await store.forkable("run-a") == rows[2]
            assert await store.forkable("run-a", rows[1].checkpoint_id) == rows[1]
            crashed = await self.crashed_run(store, "run-b")
            assert await store.forkable("run-b") == crashed[-1]

    async def test_forkable_reads_through_bookkeeping_rows(self, store: Store) -> None:
        with self.bounded():
            rows, _ = await self.paused_run(store, "run-a")
            claim = resume_row("run-a", 3, rows[-1])
            await store.claim(claim)
            assert await store.forkable("run-a") == rows[-1]
            assert await store.forkable("run-a", claim.checkpoint_id) == rows[-1]

    async def test_forkable_refuses_the_marker_and_unknown_ids(self, store: Store) -> None:
        with self.bounded():
            rows = await self.completed_run(store, "run-a")
            with pytest.raises(CheckpointError) as info:
                await store.forkable("run-a", rows[-1].checkpoint_id)
            assert not isinstance(info.value, RunNotFound)
            with pytest.raises(RunNotFound, match="ghost-run"):
                await store.forkable("ghost-run")
            with pytest.raises(RunNotFound):
                await store.forkable("run-a", "no-such-checkpoint")
            with pytest.raises(RunNotFound):
                await store.forkable("ghost-run", rows[0].checkpoint_id)
            assert await store.history("run-a") == rows

    # -- pending ---------------------------------------------------------------------------------

    async def test_pending_lists_newest_first_all_or_per_run(self, store: Store) -> None:
        with self.bounded():
            base = utcnow() - timedelta(minutes=10)
            expected: dict[str, PendingInterrupt] = {}
            for i, minutes in enumerate([3, 1, 5, 2]):
                eid = f"run-{i}"
                await self.write(store, [make_row(eid, 0)])
                pause = _pause_row(eid, 1)
                pending = make_pending(
                    eid, pause, context={"i": i}, created_at=base + timedelta(minutes=minutes)
                )
                await store.append_pause(pause, pending)
                expected[eid] = pending
            assert await store.pending() == sorted(
                expected.values(), key=lambda p: p.created_at, reverse=True
            )
            assert await store.pending("run-2") == [expected["run-2"]]
            assert await store.pending("nobody") == []

    # -- delete and prune ------------------------------------------------------------------------

    async def test_delete_run_removes_everything_of_that_run_only(self, store: Store) -> None:
        with self.bounded():
            rows, _ = await self.paused_run(store, "run-a")
            other, other_pending = await self.paused_run(store, "run-b")
            await store.cache_put("run-a", "k", {"v": 1})
            await store.cache_put("run-b", "k", {"v": 2})
            assert await store.delete_run("run-a") == len(rows)
            assert await store.history("run-a") == []
            assert await store.latest("run-a") is None
            assert await store.pending("run-a") == []
            assert await store.cache_get("run-a", "k") is None
            assert await store.history("run-b") == other
            assert await store.pending() == [other_pending]
            assert await store.cache_get("run-b", "k") == Cached({"v": 2})
            again = make_row("run-a", 0, messages=[make_message(9)])
            await store.append(again)
            assert await store.history("run-a") == [again]
            assert await store.delete_run("nobody") == 0

    async def test_prune_follows_rule_10(self, store: Store) -> None:
        with self.bounded():
            completed = await self.completed_run(store, "done")
            crashed = await self.crashed_run(store, "crashed")
            failed = await self.failed_run(store, "failed")
            paused, pending = await self.paused_run(store, "paused")
            for eid in ("done", "crashed", "failed", "paused"):
                await store.cache_put(eid, "side-effect", {"eid": eid})
            before = {eid: await store.reentry(eid) for eid in ("crashed", "failed", "paused")}
            await anyio.sleep(0.01)
            deleted = await store.prune(timedelta(0))
            assert await store.history("done") == []
            assert await store.cache_get("done", "side-effect") is None
            assert await store.history("crashed") == [crashed[2]]
            assert await store.history("failed") == [failed[1], failed[2]]
            assert await store.history("paused") == [paused[2]]
            assert deleted == len(completed) + 2 + 1 + 2
            assert await store.pending("paused") == [pending]
            for eid, entry in before.items():
                assert await store.reentry(eid) == entry
                assert await store.cache_get(eid, "side-effect") == Cached({"eid": eid})
            assert await store.prune(timedelta(0)) == 0

    async def test_prune_keeps_the_rows_reentry_reads_through(self, store: Store) -> None:
        with self.bounded():
            crashed = await self.crashed_run(store, "recovered")
            recover = make_row(
                "recovered", 3, crashed[1].node_id, step_type=RECOVER, node_input={REENTRY_SEQ: 1}
            )
            await store.append(recover)
            paused, _ = await self.paused_run(store, "claimed")
            await store.claim(resume_row("claimed", 3, paused[-1]))
            before = {eid: await store.reentry(eid) for eid in ("recovered", "claimed")}
            await anyio.sleep(0.01)
            await store.prune(timedelta(0))
            for eid, entry in before.items():
                assert await store.reentry(eid) == entry

    async def test_prune_spares_what_is_newer_than_the_cutoff(self, store: Store) -> None:
        with self.bounded():
            old = utcnow() - timedelta(days=30)
            aged = [make_row("old", seq, created_at=old) for seq in range(3)]
            await self.write(store, [*aged, run_end_row("old", 3)])
            fresh = await self.completed_run(store, "fresh")
            crashed = await self.crashed_run(store, "crashed")
            assert await store.prune(timedelta(days=1)) >= 3
            assert [r.seq for r in await store.history("old")] in ([], [3])
            assert await store.history("fresh") == fresh
            assert await store.history("crashed") == crashed
            assert await store.prune(timedelta(days=365)) == 0

    async def test_prune_keeps_messages_of_surviving_rows(self, store: Store) -> None:
        with self.bounded():
            msgs = [make_message(i) for i in range(8)]
            rows = [make_row("run-a", seq, messages=msgs[: 2 * seq + 2]) for seq in range(4)]
            await self.write(store, rows)
            await anyio.sleep(0.01)
            await store.prune(timedelta(0))
            assert await store.history("run-a") == [rows[-1]]
            fresh = await self.open_store()
            assert await fresh.history("run-a") == [rows[-1]]
            nxt = make_row("run-a", 4, messages=[*msgs, make_message(8)])
            await fresh.append(nxt)
            assert await store.history("run-a") == [rows[-1], nxt]

    async def test_prune_of_old_rows_keeps_the_messages_newer_rows_read(self, store: Store) -> None:
        with self.bounded():
            old = utcnow() - timedelta(days=30)
            msgs = [make_message(i) for i in range(6)]
            aged = [make_row("done", seq, messages=msgs[: seq + 2], created_at=old) for seq in range(3)]
            young = [make_row("done", 3, messages=msgs[:5]), make_row("done", 4, messages=msgs)]
            end = run_end_row("done", 5)
            await self.write(store, [*aged, *young, end])
            assert await store.prune(timedelta(days=1)) == 3
            assert await store.history("done") == [*young, end]
            fresh = await self.open_store()
            assert await fresh.history("done") == [*young, end]

    # -- idempotency cache -----------------------------------------------------------------------

    async def test_cache_insert_if_absent(self, store: Store) -> None:
        with self.bounded():
            assert await store.cache_get("run-a", "k") is None
            assert await store.cache_put("run-a", "k", {"n": 1, "t": (1, 2)}) == {"n": 1, "t": [1, 2]}
            assert await store.cache_put("run-a", "k", {"n": 2}) == {"n": 1, "t": [1, 2]}
            assert await store.cache_get("run-a", "k") == Cached({"n": 1, "t": [1, 2]})
            assert await store.cache_get("run-b", "k") is None
            assert await store.cache_get("run-a", "other") is None

    async def test_a_cached_none_is_a_hit(self, store: Store) -> None:
        with self.bounded():
            assert await store.cache_put("run-a", "k", None) is None
            assert await store.cache_get("run-a", "k") == Cached(None)
            assert await store.cache_put("run-a", "k", "later") is None

    async def test_two_cache_writers_agree_on_the_first_value(self, store: Store) -> None:
        with self.bounded():
            other = await self.open_store()
            results: list[Any] = []

            async def put(target: Store, value: str) -> None:
                results.append(await target.cache_put("run-a", "race", value))

            async with anyio.create_task_group() as tg:
                for i in range(10):
                    tg.start_soon(put, store if i % 2 else other, f"v{i}")
            assert len(set(results)) == 1
            assert await store.cache_get("run-a", "race") == Cached(results[0])
            assert await other.cache_get("run-a", "race") == Cached(results[0])

    async def test_cache_refuses_values_that_are_not_json(self, store: Store) -> None:
        with self.bounded():
            with pytest.raises(SerializationError) as info:
                await store.cache_put("run-a", "k", {"x": math.nan})
            assert info.value.path.endswith(".x")
            assert await store.cache_get("run-a", "k") is None

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

    # -- messages stored once ------------------------------------------------------------------

    async def test_messages_round_trip_as_the_conversation_grows(self, store: Store) -> None:
        with self.bounded():
            msgs = [make_message(i, "user" if i % 2 else "assistant") for i in range(12)]
            rows = [make_row("run-a", seq, messages=msgs[: 2 * seq + 1]) for seq in range(6)]
            rows.append(make_row("run-a", 6, messages=msgs[:3]))  # a shorter prefix
            rows.append(make_row("run-a", 7, messages=[]))
            rows.append(make_row("run-a", 8))  # no messages at all
            diverged = [*msgs[:2], make_message(100), make_message(101)]
            rows.append(make_row("run-a", 9, messages=diverged))
            rows.append(make_row("run-a", 10, messages=[*diverged, make_message(102)]))
            rows.append(make_row("run-a", 11, messages=msgs))
            await self.write(store, rows)
            assert await store.history("run-a") == rows
            for row in rows:
                assert await store.get("run-a", row.checkpoint_id) == row
            fresh = await self.open_store()
            assert await fresh.history("run-a") == rows
            more = make_row("run-a", 12, messages=[*msgs, make_message(12)])
            await fresh.append(more)
            assert await store.latest("run-a") == more

    async def test_messages_of_two_conversations_in_one_run(self, store: Store) -> None:
        with self.bounded():
            a = [make_message(i) for i in range(6)]
            b = [make_message(100 + i) for i in range(6)]
            rows: list[Checkpoint] = []
            for i in range(6):
                rows.append(make_row("run-a", 3 * i, messages=a[: i + 1], agent_path="swarm:s/agent:a"))
                rows.append(make_row("run-a", 3 * i + 1, messages=b[: i + 1], agent_path="swarm:s/agent:b"))
                rows.append(
                    make_row(
                        "run-a",
                        3 * i + 2,
                        "turn:0/tool:t",
                        step_type=TOOL_CALL,
                        messages=a[: i + 1],
                        agent_path="swarm:s/agent:a/tool:t",
                    )
                )
            await self.write(store, rows)
            assert await store.history("run-a") == rows
            fresh = await self.open_store()
            assert await fresh.history("run-a") == rows

    async def test_messages_are_normalised(self, store: Store) -> None:
        with self.bounded():
            row = make_row(
                "run-a",
                0,
                messages=[("user", "hi"), _Pair(1, [2]), _Point(3, (4, 5))],
                node_input={"pair": _Pair(6, [7]), "t": (1, (2, 3))},
            )
            await store.append(row)
            got = await store.latest("run-a")
            assert got is not None
            assert got.state_snapshot["messages"] == [
                ["user", "hi"],
                {"left": 1, "right": [2]},
                {"x": 3, "y": [4, 5]},
            ]
            assert got.node_input == {"pair": {"left": 6, "right": [7]}, "t": [1, [2, 3]]}

    # -- the JSON rule -----------------------------------------------------------------------------

    @pytest.mark.parametrize(("label", "value", "inner"), _BAD, ids=_BAD_IDS)
    async def test_json_rule_at_append(self, store: Store, label: str, value: Any, inner: str) -> None:
        with self.bounded():
            first = make_row("run-a", 0, messages=[make_message(0)])
            await store.append(first)
            cases: list[tuple[Checkpoint, str]] = [
                (make_row("run-a", 1, node_input={"x": value}), "$.node_input.x"),
                (make_row("run-a", 1, node_output={"x": value}), "$.node_output.x"),
                (make_row("run-a", 1, interrupt_context={"x": value}), "$.interrupt_context.x"),
                (make_row("run-a", 1, state_snapshot={"turn": 1, "x": value}), "$.state_snapshot.x"),
                (
                    make_row("run-a", 1, messages=[make_message(0), {"role": "user", "content": value}]),
                    "$.state_snapshot.messages[1].content",
                ),
            ]
            for bad, path in cases:
                with pytest.raises(SerializationError) as info:
                    await store.append(bad)
                assert info.value.path == path + inner, label
                assert await store.history("run-a") == [first]
            good = make_row("run-a", 1, messages=[make_message(0), make_message(1)])
            await store.append(good)
            assert await store.history("run-a") == [first, good]

    async def test_json_rule_at_pause_and_claim(self, store: Store) -> None:
        with self.bounded():
            rows = await self.crashed_run(store, "run-a")
            pause = _pause_row("run-a", 3)
            with pytest.raises(SerializationError) as info:
                await store.append_pause(pause, make_pending("run-a", pause, context={"when": {1, 2}}))
            assert info.value.path == "$.context.when"
            assert await store.history("run-a") == rows
            assert await store.pending("run-a") == []
            pending = make_pending("run-a", pause)
            await store.append_pause(pause, pending)
            bad_claim = make_row(
                "run-a", 4, step_type=RESUME, node_input={REENTRY_SEQ: 3, "resume": math.inf}
            )
            with pytest.raises(SerializationError) as info:
                await store.claim(bad_claim)
            assert info.value.path == "$.node_input.resume"
            assert await store.pending("run-a") == [pending]
            assert await store.history("run-a") == [*rows, pause]

    async def test_nul_in_a_text_field_is_refused_by_every_backend(self, store: Store) -> None:
        with self.bounded():
            rows = await self.crashed_run(store, "run-a")
            for field in ("node_id", "agent_path", "interrupt_reason"):
                bad = msgspec.structs.replace(make_row("run-a", 3), **{field: "a\x00b"})
                with pytest.raises(SerializationError) as info:
                    await store.append(bad)
                assert info.value.path == f"$.{field}"
            pause = _pause_row("run-a", 3)
            with pytest.raises(SerializationError) as info:
                await store.append_pause(
                    pause, msgspec.structs.replace(make_pending("run-a", pause), reason="x\x00")
                )
            assert info.value.path == "$.reason"
            assert await store.history("run-a") == rows
            assert await store.pending("run-a") == []

    # -- size limit ------------------------------------------------------------------------------

    async def test_row_over_the_size_limit_is_refused(self, store: Store) -> None:
        with self.bounded():
            small = await self.open_store(max_row_bytes=4096)
            first = make_row("run-a", 0, messages=[make_message(0)])
            await small.append(first)
            with pytest.raises(RowTooLarge):
                await small.append(make_row("run-a", 1, node_input={"blob": "x" * 8000}))
            with pytest.raises(RowTooLarge):
                await small.append(
                    make_row("run-a", 1, messages=[make_message(0), make_message(1, size=8000)])
                )
            pause = _pause_row("run-a", 1)
            with pytest.raises(RowTooLarge):
                await small.append_pause(
                    msgspec.structs.replace(pause, interrupt_context={"blob": "y" * 8000}),
                    make_pending("run-a", pause),
                )
            assert await small.history("run-a") == [first]
            assert await small.pending("run-a") == []
            msgs = [make_message(i, size=600) for i in range(40)]  # 24 KB in all, 600 B per step
            rows = [make_row("run-a", seq, messages=msgs[:seq]) for seq in range(1, 41)]
            await self.write(small, rows)
            assert await store.history("run-a") == [first, *rows]

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
