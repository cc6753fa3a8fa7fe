"""Random operation sequences against each backend and the in-memory model: no divergence allowed."""

from __future__ import annotations

import asyncio
import itertools
import math
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
from _memory_store import MemoryStore
from conftest import Backend, drop_pg_schema
from hypothesis import HealthCheck, assume, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from stores import (
    FAILED,
    HITL_PAUSE,
    INTERRUPTED,
    RECOVER,
    REENTRY_SEQ,
    RESUME,
    RESUME_KEY,
    TOOL_CALL,
    AlreadyResumed,
    Store,
    utcnow,
)
from stores.testing import make_message, make_pending, make_row, run_end_row

RUNS = st.sampled_from(["r0", "r1", "r2"])
SETTINGS = settings(
    max_examples=30,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

Outcome = tuple[str, Any]


class StoreMachine(RuleBasedStateMachine):
    """Drives one real store and the model with the same calls; every result must match."""

    open_backend: Callable[[], tuple[Backend, Callable[[], None]]]

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.backend, self.cleanup = self.open_backend()
        self.real: Store = self.backend.open()
        self.model = MemoryStore()
        # A second instance of each on the same database: the lock rules need two holders.
        self.real2: Store = self.backend.open()
        self.model2 = MemoryStore(self.model.db)
        for store in (self.real, self.model, self.real2, self.model2):
            self.run(store.setup())
        self.conv: dict[str, list[Any]] = {}
        self.counter = itertools.count()

    def run(self, coro: Awaitable[Any]) -> Any:
        return self.loop.run_until_complete(asyncio.wait_for(coro, 30))

    def both(
        self, call: Callable[[Store], Awaitable[Any]], *, claim: bool = False, second: bool = False
    ) -> Any:
        pair = (self.real2, self.model2) if second else (self.real, self.model)
        got = [self._outcome(call(store), claim) for store in pair]
        assert got[0] == got[1], f"{self.backend.name} diverged from the model: {got[0]!r} != {got[1]!r}"
        return got[1]

    def _outcome(self, coro: Awaitable[Any], claim: bool) -> Outcome:
        try:
            return ("ok", self.run(coro))
        except Exception as exc:
            kind: type[BaseException] = type(exc)
            if claim and isinstance(exc, AlreadyResumed):
                kind = AlreadyResumed  # a lost claim may say WriteConflict or AlreadyResumed
            return ("error", kind)

    def next_seq(self, eid: str) -> int:
        newest = self.run(self.model.latest(eid))
        return 0 if newest is None else newest.seq + 1

    def taken_seq(self, eid: str, pick: int) -> int:
        rows = self.run(self.model.history(eid))
        return rows[pick % len(rows)].seq if rows else 0

    def messages(self, eid: str, grow: int, cut: int) -> list[Any]:
        conv = self.conv.setdefault(eid, [])
        for _ in range(grow):
            conv.append(make_message(next(self.counter)))
        return conv[: max(0, len(conv) - cut)]

    def teardown(self) -> None:
        try:
            self.run(self.real2.close())
            self.run(self.real.close())
        finally:
            self.loop.close()
            self.cleanup()

    # -- writes ----------------------------------------------------------------------------------

    @rule(
        eid=RUNS,
        where=st.sampled_from(["next", "next", "next", "taken", "zero"]),
        pick=st.integers(0, 10),
        step=st.sampled_from(["llm", "tool", "recover", "end-completed", "end-failed"]),
        grow=st.integers(0, 3),
        cut=st.integers(0, 2),
        old=st.booleans(),
    )
    def append(self, eid: str, where: str, pick: int, step: str, grow: int, cut: int, old: bool) -> None:
        seq = {"next": self.next_seq(eid), "taken": self.taken_seq(eid, pick), "zero": 0}[where]
        if step.startswith("end-"):
            row = run_end_row(eid, seq, FAILED if step == "end-failed" else "completed")
        elif step == "recover":
            row = make_row(eid, seq, step_type=RECOVER, node_input={REENTRY_SEQ: self.taken_seq(eid, pick)})
        else:
            row = make_row(
                eid,
                seq,
                step_type=TOOL_CALL if step == "tool" else "llm_call",
                messages=self.messages(eid, grow, cut),
                agent_path="agent:a/tool:t" if step == "tool" else "agent:a",
            )
        if old:  # older than prune's cutoff below (a fixed cutoff: no clock race between the two)
            row = msgspec.structs.replace(row, created_at=utcnow() - timedelta(days=10))
        self.both(lambda s: s.append(row))

    @rule(eid=RUNS)
    def append_not_json(self, eid: str) -> None:
        row = make_row(eid, self.next_seq(eid), messages=self.messages(eid, 1, 0), node_input={"x": math.nan})
        self.both(lambda s: s.append(row))

    @rule(eid=RUNS, grow=st.integers(0, 2), old=st.booleans())
    def pause(self, eid: str, grow: int, old: bool) -> None:
        row = make_row(
            eid,
            self.next_seq(eid),
            "turn:0/tool:t",
            step_type=HITL_PAUSE,
            status=INTERRUPTED,
            messages=self.messages(eid, grow, 0),
            agent_path="agent:a/tool:t",
            interrupt_reason="approve",
            interrupt_context={"n": next(self.counter)},
        )
        if old:
            row = msgspec.structs.replace(row, created_at=utcnow() - timedelta(days=10))
        pending = make_pending(eid, row, context=row.interrupt_context)
        self.both(lambda s: s.append_pause(row, pending))

    @rule(eid=RUNS, taken=st.booleans(), pick=st.integers(0, 10), approved=st.booleans())
    def claim(self, eid: str, taken: bool, pick: int, approved: bool) -> None:
        seq = self.taken_seq(eid, pick) if taken else self.next_seq(eid)
        newest = self.run(self.model.latest(eid))
        row = make_row(
            eid,
            seq,
            step_type=RESUME,
            node_input={
                REENTRY_SEQ: newest.seq if newest else 0,
                RESUME_KEY: {"approved": approved, "metadata": {}},
            },
        )
        self.both(lambda s: s.claim(row), claim=True)

    @rule(eid=RUNS)
    def cancel(self, eid: str) -> None:
        row = run_end_row(eid, self.next_seq(eid), FAILED, reason="cancelled")
        self.both(lambda s: s.append(row))

    @rule(eid=RUNS)
    def delete_run(self, eid: str) -> None:
        self.both(lambda s: s.delete_run(eid))
        self.conv.pop(eid, None)

    @rule(
        eid=RUNS,
        key=st.sampled_from(["k0", "k1"]),
        value=st.none() | st.integers(-5, 5) | st.text(max_size=3),
    )
    def cache_put(self, eid: str, key: str, value: Any) -> None:
        self.both(lambda s: s.cache_put(eid, key, value))

    @rule()
    def prune(self) -> None:
        self.both(lambda s: s.prune(timedelta(days=1)))

    # -- ownership locks: two holders on one database ----------------------------------------------

    def _holder(self, second: bool) -> MemoryStore:
        return self.model2 if second else self.model

    @rule(eid=RUNS, second=st.booleans())
    def lock(self, eid: str, second: bool) -> None:
        # A holder taking a run it holds already is left out: the protocol does not say what it
        # returns (PostgreSQL's advisory locks stack).
        assume(self.model.db.locks.get(eid) != self._holder(second)._me)
        self.both(lambda s: s.try_lock(eid), second=second)

    @rule(eid=RUNS, second=st.booleans())
    def unlock(self, eid: str, second: bool) -> None:
        self.both(lambda s: s.unlock(eid), second=second)

    # -- the outbox --------------------------------------------------------------------------------

    @rule(limit=st.integers(1, 5))
    def fetch_unsynced(self, limit: int) -> None:
        self.both(lambda s: s.fetch_unsynced(limit))  # type: ignore[attr-defined]

    @rule(limit=st.integers(1, 3), quarantine=st.booleans())
    def mark_synced(self, limit: int, quarantine: bool) -> None:
        ids = [r.checkpoint_id for r in self.run(self.model.fetch_unsynced(limit))]
        if quarantine:
            self.both(lambda s: s.mark_quarantined({cid: "poison" for cid in ids}))  # type: ignore[attr-defined]
        else:
            self.both(lambda s: s.mark_synced(ids))  # type: ignore[attr-defined]
        for cid in ids:
            self.both(lambda s, cid=cid: s.sync_state(cid))  # type: ignore[attr-defined,misc]

    # -- reads -----------------------------------------------------------------------------------

    @rule(eid=RUNS, key=st.sampled_from(["k0", "k1", "k2"]))
    def cache_get(self, eid: str, key: str) -> None:
        self.both(lambda s: s.cache_get(eid, key))

    @rule(eid=RUNS)
    def reentry(self, eid: str) -> None:
        self.both(lambda s: s.reentry(eid))

    @rule(eid=RUNS)
    def forkable(self, eid: str) -> None:
        self.both(lambda s: s.forkable(eid))

    @rule(eid=RUNS)
    def latest(self, eid: str) -> None:
        self.both(lambda s: s.latest(eid))

    @rule(eid=st.none() | RUNS)
    def pending(self, eid: str | None) -> None:
        self.both(lambda s: s.pending(eid))

    @invariant()
    def histories_agree(self) -> None:
        for eid in ("r0", "r1", "r2"):
            self.both(lambda s, eid=eid: s.history(eid))  # type: ignore[misc]


def test_store_matches_the_model(store_backend: Backend, tmp_path: Path) -> None:
    """Hypothesis drives random sequences; each example gets a fresh database."""
    fresh = itertools.count()

    def open_backend() -> tuple[Backend, Callable[[], None]]:
        n = next(fresh)
        if store_backend.name == "sqlite":
            return Backend("sqlite", str(tmp_path / f"stateful-{n}.db")), lambda: None
        schema = f"{store_backend.schema}_{n}"
        return Backend("postgres", store_backend.target, schema), lambda: drop_pg_schema(schema)

    machine = type(
        f"StoreMachine_{store_backend.name}", (StoreMachine,), {"open_backend": staticmethod(open_backend)}
    )
    run_state_machine_as_test(machine, settings=SETTINGS)


def test_the_model_rejects_a_divergence() -> None:
    """The comparison itself works: a store that drops rows is caught."""

    class Lossy(MemoryStore):
        async def history(self, execution_id: str) -> list[Any]:
            return (await super().history(execution_id))[:-1]

    machine = StoreMachine.__new__(StoreMachine)
    machine.loop = asyncio.new_event_loop()
    try:
        machine.backend = Backend("lossy", "")
        machine.real = Lossy()
        machine.model = MemoryStore()
        row = make_row("r0", 0)
        machine.both(lambda s: s.append(row))
        with pytest.raises(AssertionError, match="diverged"):
            machine.both(lambda s: s.history("r0"))
    finally:
        machine.loop.close()
