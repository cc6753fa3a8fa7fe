"""The inbox entries' outbox (when the store is a ReplicatedStore): each signal's state (sent, then
consumed) to ship, copies of entries held elsewhere (the plane's side), rows copied without their
inbox effects, and a restored run's unconsumed signals and the wait it rests at."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import msgspec
import pytest

from .._errors import RunExists, WriteConflict
from .._model import SIGNAL, utcnow
from .._protocol import Store
from .._signals import CONSUMES, StoredSignal
from ._base import ConformanceBase
from ._factories import make_row, tool_row, wait_row

__all__ = ["InboxOutboxTests"]


def _state(entries: list[StoredSignal]) -> list[tuple[Any, ...]]:
    return [(e.signal_id, e.name, e.payload, e.consumed_seq) for e in entries]


class InboxOutboxTests(ConformanceBase):
    """The inbox entries' outbox (when the store is a ReplicatedStore)."""

    async def test_inbox_outbox_ships_each_signal_and_then_its_consumption(self, store: Store) -> None:
        with self.bounded():
            box: Any = self.outbox(store)
            await self.write(store, [make_row("run-s", 0)])
            first = await store.signal("run-s", "go", {"n": 1})
            second = await store.signal("run-s", "go", {"n": 2})
            found = await box.fetch_unsynced_signals(10)
            assert [(e.id, e.name, e.payload, e.consumed_seq) for e in found] == [
                (first, "go", {"n": 1}, None),
                (second, "go", {"n": 2}, None),
            ]
            assert all(e.signal_id for e in found) and found[0].signal_id != found[1].signal_id
            assert [e.signal_id for e in await store.signals("run-s")] == [e.signal_id for e in found]
            assert [e.id for e in await box.fetch_unsynced_signals(1)] == [first]
            await box.mark_signals_synced([])
            await box.mark_signals_synced(found)
            assert await box.fetch_unsynced_signals(10) == []
            assert await box.signal_sync_state(found[0].signal_id) == (True, None)
            assert await box.signal_sync_state("no-such-signal") is None
            # a row consumes the first: its new state is to send, in that row's transaction
            await store.append(make_row("run-s", 1, step_type=SIGNAL, node_input={CONSUMES: [first]}))
            again = await box.fetch_unsynced_signals(10)
            assert [(e.id, e.consumed_seq) for e in again] == [(first, 1)]
            # a mark of the state sent before leaves the new one to send
            await box.mark_signals_synced(found[:1])
            await box.mark_signals_quarantined([(found[0], "HTTP 422: stale")])
            assert await box.fetch_unsynced_signals(10) == again
            assert await box.signal_sync_state(found[0].signal_id) == (False, None)
            await box.mark_signals_quarantined([])
            await box.mark_signals_quarantined([(again[0], "HTTP 422: refused")])
            assert await box.signal_sync_state(found[0].signal_id) == (True, "HTTP 422: refused")
            assert await box.fetch_unsynced_signals(10) == []
            assert [(e.id, e.consumed_seq) for e in await box.signal_entries("run-s")] == [
                (first, 1),
                (second, None),
            ]
            assert await box.signal_entries("no-such-run") == []

    async def test_copies_of_signals_merge_by_signal_id(self, store: Store) -> None:
        with self.bounded():
            box: Any = self.outbox(store)
            at = utcnow() - timedelta(minutes=1)
            a = StoredSignal(
                id=0, execution_id="run-p", name="go", payload={"n": 1}, created_at=at, signal_id="s-a"
            )
            b = StoredSignal(
                id=0, execution_id="run-p", name="message", payload="hi", created_at=at, signal_id="s-b"
            )
            assert await box.copy_signals([a, b]) == {}  # no row of the run here: kept all the same
            held = await box.signal_entries("run-p")
            assert _state(held) == [("s-a", "go", {"n": 1}, None), ("s-b", "message", "hi", None)]
            assert [e.created_at for e in held] == [at, at]
            assert await box.copy_signals([a]) == {}  # the same again
            assert await box.copy_signals([msgspec.structs.replace(a, consumed_seq=4)]) == {}
            assert await box.copy_signals([a]) == {}  # an older state sent again changes nothing
            assert [e.consumed_seq for e in await box.signal_entries("run-p")] == [4, None]
            bad = StoredSignal(
                id=0, execution_id="run-p", name="go", payload=math.nan, created_at=at, signal_id="s-c"
            )
            refused = await box.copy_signals(
                [
                    msgspec.structs.replace(a, consumed_seq=5),  # consumed by another row
                    msgspec.structs.replace(b, payload="changed"),
                    msgspec.structs.replace(b, signal_id=""),
                    bad,
                ]
            )
            assert set(refused) == {"s-a", "s-b", "", "s-c"}
            assert "seq 4" in refused["s-a"] and "different content" in refused["s-b"]
            assert refused["s-c"].startswith("malformed signal")
            assert _state(await box.signal_entries("run-p")) == [
                ("s-a", "go", {"n": 1}, 4),
                ("s-b", "message", "hi", None),
            ]
            assert await box.signal_sync_state("s-c") is None
            # one request with an entry and then its consumption: both taken, in order
            d = msgspec.structs.replace(a, signal_id="s-d", name="later")
            assert await box.copy_signals([d, msgspec.structs.replace(d, consumed_seq=6)]) == {}
            assert _state(await box.signal_entries("run-p"))[-1] == ("s-d", "later", {"n": 1}, 6)

    async def test_a_copied_row_does_nothing_to_the_inbox_and_takes_no_ownership(self, store: Store) -> None:
        with self.bounded():
            box: Any = self.outbox(store)
            waiting = StoredSignal(
                id=0, execution_id="run-c", name="message", payload="hi", created_at=utcnow(), signal_id="s-m"
            )
            await box.copy_signals([waiting])
            rows = [
                make_row("run-c", 0),  # a model turn's row, while a "message" copy waits unconsumed
                make_row("run-c", 1, step_type=SIGNAL, node_input={CONSUMES: [987654]}),
                make_row("run-c", 2),
            ]
            for row in rows:
                await box.append_copy(row)
            assert await store.history("run-c") == rows
            assert _state(await box.signal_entries("run-c")) == [("s-m", "message", "hi", None)]
            assert await store.due_waits(10) == []
            assert await store.owned(["run-c"]) == set()
            with pytest.raises(WriteConflict):
                await box.append_copy(make_row("run-c", 1))
            with pytest.raises(RunExists):
                await box.append_copy(make_row("run-c", 0))
            assert await store.history("run-c") == rows

    async def test_the_next_wake_after_a_time_skips_the_runs_due_by_then(self, store: Store) -> None:
        with self.bounded():
            box: Any = self.outbox(store)
            first, second = utcnow() - timedelta(seconds=5), utcnow() + timedelta(hours=1)
            for eid, when in (("run-a", first), ("run-b", second)):
                rows = [make_row(eid, 0), tool_row(eid, 1), wait_row(eid, 2, None, when)]
                assert await box.import_run(eid, rows, [], None) == 3
            assert await store.next_wake() == first
            assert await store.next_wake(after=first) == second  # past a due run held elsewhere
            assert await store.next_wake(after=utcnow()) == second
            assert await store.next_wake(after=second) is None

    async def test_import_run_brings_its_unconsumed_signals_and_rests_it_at_its_wait(
        self, store: Store
    ) -> None:
        with self.bounded():
            box: Any = self.outbox(store)
            at = utcnow() - timedelta(minutes=2)
            when = utcnow() + timedelta(hours=1)
            asleep = [make_row("run-z", 0), tool_row("run-z", 1), wait_row("run-z", 2, None, when)]
            assert await box.import_run("run-z", asleep, [], None) == 3
            assert await store.next_wake() == when  # a sleep rests until its time
            assert await store.due_waits(10) == []
            rows = [make_row("run-w", 0), tool_row("run-w", 1), wait_row("run-w", 2, "go")]
            go = StoredSignal(
                id=77,
                execution_id="run-w",
                name="go",
                payload=[1],
                created_at=at,
                signal_id="s-go",
                consumed_seq=9,
            )
            later = StoredSignal(
                id=5,
                execution_id="run-w",
                name="later",
                created_at=at + timedelta(seconds=1),
                signal_id="s-l",
            )
            assert await box.import_run("run-w", rows, [], None, [go, later]) == 3
            found = await store.signals("run-w")
            assert _state(found) == [("s-go", "go", [1], None), ("s-l", "later", None, None)]
            assert found[0].id < found[1].id and [e.created_at for e in found] == [
                go.created_at,
                later.created_at,
            ]
            assert await box.fetch_unsynced_signals(10) == []  # the plane has them
            assert await box.signal_sync_state("s-go") == (True, None)
            assert await store.due_waits(10) == [("run-w", 2)]  # its signal came with it: due now
            other = msgspec.structs.replace(go, execution_id="run-w2", signal_id="s-x")
            with pytest.raises(ValueError):
                await box.import_run("run-x", [make_row("run-x", 0)], [], None, [other])
            assert await store.history("run-x") == []
            assert await box.signal_sync_state("s-x") is None
