"""A run's inbox reaches the plane like its rows: a signal sent to a waiting run, then its
consumption by the row that took it, each under the signal's ``signal_id``; a run restored from the
plane holds the signals it has not consumed (not the consumed ones) and is woken by them once; a
poison inbox entry is quarantined as a row is (bisected out of a refused batch, or rejected by
name). Real HTTP on loopback; the local stores and the plane's on the same backend, both backends.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from _plane_support import Plane, eventually, running_plane
from conftest import Backend, drop_pg_schema

from actors import ActorSystem, Agent, Signal, tool, wait_signal
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from replication import Replicator, restore_from_plane
from stores import SIGNAL, WAIT, Checkpoint, PostgresStore, SQLiteStore, Store, StoredSignal

pytestmark = pytest.mark.anyio

EID = "collect-1"
KEY = "key-a"


def collector(log: list[Any], nap: float = 0.0) -> Agent:
    """A tool that waits for the signal ``first``, then for ``second`` (after ``nap`` seconds)."""

    @tool
    async def collect() -> str:
        """Wait for two signals."""
        log.append("enter")
        await anyio.sleep(nap)
        first = await wait_signal("first")
        second = await wait_signal("second")
        log.append(("after", first, second))
        return json.dumps([first.payload if first else None, second.payload if second else None])

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"got {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("collect", {})])

    return Agent("collector", FunctionModel(model), tools=[collect])


@pytest.fixture(name="plane")
def plane_on(store_backend: Backend, tmp_path: Path) -> Iterator[Plane]:
    """The reference plane on loopback, its tenants stored on the test's backend (another file or
    schema)."""
    backend = store_backend
    if backend.name == "sqlite":
        with running_plane(f"sqlite:///{tmp_path / 'plane.db'}") as plane:
            yield plane
        return
    try:
        with running_plane(f"{backend.target}?schema={backend.schema}p") as plane:
            yield plane
    finally:
        for tenant in ("alpha", "beta"):
            drop_pg_schema(f"{backend.schema}p_{tenant}")


@asynccontextmanager
async def fresh_store(backend: Backend, tmp_path: Path, name: str) -> AsyncIterator[Store]:
    """A store on ``backend`` that has never seen the run (another machine's)."""
    store: Store
    if backend.name == "sqlite":
        store = SQLiteStore(tmp_path / f"{name}.db")
    else:
        store = PostgresStore(backend.target, schema=f"{backend.schema}{name[0]}")
    try:
        async with store:
            yield store
    finally:
        if backend.name == "postgres":
            await anyio.to_thread.run_sync(drop_pg_schema, f"{backend.schema}{name[0]}")


async def on_plane(plane: Plane, execution_id: str) -> tuple[list[StoredSignal], list[Checkpoint]]:
    """The run's inbox entries and rows as the plane holds them."""
    remote: Any = plane.tenant_store("alpha")
    try:
        return await remote.signal_entries(execution_id), await remote.history(execution_id)
    finally:
        await remote.close()


async def sent_all(store: Any, replicator: Replicator) -> None:
    """Drain until the store's outbox (rows, cache and inbox entries) is empty."""

    async def empty() -> bool:
        await replicator.drain()
        return not (
            await store.fetch_unsynced(10)
            or await store.fetch_unsynced_cache(10)
            or await store.fetch_unsynced_signals(10)
        )

    await eventually(empty)


async def signal_from_afar(store: Store, plane: Plane, name: str, payload: Any) -> StoredSignal:
    """Send a signal from a process without the runner (it wakes nothing) and ship it."""
    replicator = Replicator(plane.url, KEY)
    async with ActorSystem(store, replicator=replicator) as sender:
        await sender.signal(EID, name, payload)
        await sent_all(store, replicator)
    return (await store.signals(EID, name=name))[-1]


async def waiting_for_second(
    store: Store, plane: Plane, agent: Agent
) -> tuple[StoredSignal, list[Checkpoint]]:
    """Spawn the run (it rests at ``first``), send ``first`` from afar and let a worker wake it:
    it consumes ``first`` and rests at ``second``. The signal as it was sent, and the rows."""
    replicator = Replicator(plane.url, KEY)
    async with ActorSystem(store, runners=[agent], replicator=replicator) as system:
        assert (await (await system.spawn(agent, "collect", execution_id=EID)).result(timeout=20)).status == (
            "waiting"
        )
    first = await signal_from_afar(store, plane, "first", {"n": 1})
    replicator = Replicator(plane.url, KEY)
    async with ActorSystem(store, runners=[agent], replicator=replicator) as system:
        assert await system.sweep() == 1  # a worker wakes it: its signal is in the inbox
        rows = await system.history(EID)
        assert (rows[-1].step_type, rows[-1].interrupt_reason) == (WAIT, "signal:second")
        await sent_all(store, replicator)
    return first, rows


async def test_a_signal_sent_to_a_waiting_run_and_its_consumption_reach_the_plane(
    store_backend: Backend, tmp_path: Path, plane: Plane
) -> None:
    log: list[Any] = []
    agent = collector(log, nap=1.0)  # the rows before the wait are sent before it is written
    async with store_backend.open() as here:
        async with ActorSystem(here, runners=[agent], replicator=Replicator(plane.url, KEY)) as system:
            ref = await system.spawn(agent, "collect", execution_id=EID)
            assert (await ref.result(timeout=20)).status == "waiting"
            resting = await system.history(EID)

            async def rests_on_the_plane() -> bool:
                """The wait row's commit kicked the replicator: the plane holds it (no drain asked)."""
                return (await on_plane(plane, EID))[1] == resting

            await eventually(rests_on_the_plane)
        # a sender without the runner (it wakes nothing): the signal stays in the inbox
        replicator = Replicator(plane.url, KEY)
        async with ActorSystem(here, replicator=replicator) as sender:
            await replicator.drain()
            await anyio.sleep(0.5)  # nothing left to send, no drain pending
            await sender.signal(EID, "first", {"n": 1})
            first = (await here.signals(EID))[0]

            async def sent_on_the_plane() -> bool:
                """The signal's commit kicked the replicator: the plane holds it as sent."""
                entries = (await on_plane(plane, EID))[0]
                return [(e.signal_id, e.name, e.payload, e.consumed_seq) for e in entries] == [
                    (first.signal_id, "first", {"n": 1}, None)
                ]

            await eventually(sent_on_the_plane)
        assert first.signal_id and first.consumed_seq is None

        replicator = Replicator(plane.url, KEY)
        async with ActorSystem(here, runners=[agent], replicator=replicator) as system:
            assert await system.sweep() == 1  # woken: it consumes "first", then rests at "second"
            rows = await system.history(EID)
            await sent_all(here, replicator)
        took = [row for row in rows if row.step_type == SIGNAL]
        assert len(took) == 1 and rows[-1].step_type == WAIT
        entries, remote_rows = await on_plane(plane, EID)
        assert [(e.signal_id, e.consumed_seq) for e in entries] == [(first.signal_id, took[0].seq)]
        assert remote_rows == rows  # the consuming row too, as it was written
        assert [await here.sync_state(r.checkpoint_id) for r in rows] == [(True, None)] * len(rows)  # type: ignore[attr-defined]
        assert await here.signal_sync_state(first.signal_id) == (True, None)  # type: ignore[attr-defined]
        assert log == ["enter", "enter"]  # resting at "second"


async def test_a_plane_that_refuses_the_inbox_never_holds_the_consuming_row_without_the_consumption(
    store_backend: Backend, plane: Plane
) -> None:
    """Every POST carrying inbox entries is answered 503: the row that consumed a signal does not
    reach the plane meanwhile (a restore would get the signal again). Once the plane takes them,
    both are there."""
    agent = collector([])
    async with store_backend.open() as here:
        async with ActorSystem(here, runners=[agent]) as system:  # no replicator: nothing sent yet
            ref = await system.spawn(agent, "collect", execution_id=EID)
            assert (await ref.result(timeout=20)).status == "waiting"
            await system.signal(EID, "first", 1)  # the sender has the runner: it wakes the run
            await eventually(lambda: _rests_at(here, "signal:second"))
            rows = await system.history(EID)
        took = [row for row in rows if row.step_type == SIGNAL]
        assert len(took) == 1
        plane.faults.refuse_signals = 503
        replicator = Replicator(plane.url, KEY)
        async with ActorSystem(here, replicator=replicator):
            await replicator.drain()
            assert 503 in plane.faults.statuses
            entries, remote_rows = await on_plane(plane, EID)
            assert entries == [] and all(r.seq < took[0].seq for r in remote_rows)
            plane.faults.refuse_signals = None
            await sent_all(here, replicator)
        entries, remote_rows = await on_plane(plane, EID)
        assert [e.consumed_seq for e in entries] == [took[0].seq] and remote_rows == rows


async def _rests_at(store: Store, reason: str) -> bool:
    newest = await store.latest(EID)
    return newest is not None and newest.interrupt_reason == reason


async def test_a_run_restored_from_the_plane_holds_its_unconsumed_signal_and_wakes_with_it_once(
    store_backend: Backend, tmp_path: Path, plane: Plane
) -> None:
    log: list[Any] = []
    agent = collector(log)
    async with store_backend.open() as here:
        first, rows = await waiting_for_second(here, plane, agent)
        second = await signal_from_afar(here, plane, "second", {"n": 2})  # nobody wakes it here

    async with fresh_store(store_backend, tmp_path, "elsewhere") as elsewhere:
        newest = await restore_from_plane(elsewhere, EID, url=plane.url, api_key=KEY)
        assert newest == rows[-1] and await elsewhere.history(EID) == rows
        held = await elsewhere.signals(EID)
        assert [(e.signal_id, e.name, e.payload) for e in held] == [(second.signal_id, "second", {"n": 2})]
        assert await elsewhere.signal_entries(EID) == held  # type: ignore[attr-defined]  # not "first"
        assert await elsewhere.fetch_unsynced_signals(10) == []  # type: ignore[attr-defined]

        log.clear()
        replicator = Replicator(plane.url, KEY)
        async with ActorSystem(elsewhere, runners=[agent], replicator=replicator) as system:
            assert await system.sweep() == 1  # due: its signal came with it
            result = await system.ref(EID).result(timeout=20)
            assert (result.status, result.output) == ("completed", 'got [{"n": 1}, {"n": 2}]')
            assert await system.sweep() == 0  # woken once
            history = await system.history(EID)
            await sent_all(elsewhere, replicator)
        assert log == ["enter", ("after", Signal("first", {"n": 1}), Signal("second", {"n": 2}))]
        assert [row.step_type for row in history].count(SIGNAL) == 2
        assert await elsewhere.signals(EID) == []

    entries, remote_rows = await on_plane(plane, EID)
    took = [row.seq for row in history if row.step_type == SIGNAL]
    assert [(e.signal_id, e.consumed_seq) for e in entries] == [
        (first.signal_id, took[0]),
        (second.signal_id, took[1]),  # consumed elsewhere, under the same signal_id
    ]
    assert remote_rows == history
    async with fresh_store(store_backend, tmp_path, "third") as third:
        assert (await restore_from_plane(third, EID, url=plane.url, api_key=KEY)) == history[-1]
        assert await third.signals(EID) == []  # nothing is left to consume


@pytest.mark.parametrize("named", [False, True], ids=["bisected", "named"])
async def test_a_poison_inbox_entry_is_quarantined_like_a_row(
    store_backend: Backend, plane: Plane, named: bool
) -> None:
    agent = collector([])
    async with store_backend.open() as here:
        async with ActorSystem(here, runners=[agent]) as system:  # no replicator yet: nothing sent
            ref = await system.spawn(agent, "collect", execution_id=EID)
            assert (await ref.result(timeout=20)).status == "waiting"
            for k in range(7):
                await system.signal(EID, "note", {"k": k})  # not waited for: they stay in the inbox
            await system.signal(EID, "huge", "x" * (1024 * 1024 + 10))  # over the plane's item limit
            rows = await system.history(EID)
        notes = await here.signals(EID, name="note")
        huge = (await here.signals(EID, name="huge"))[0]
        poison = notes[3]
        plane.faults.poison = {poison.signal_id}
        plane.faults.name_poison = named

        replicator = Replicator(plane.url, KEY)
        async with ActorSystem(here, replicator=replicator):
            await sent_all(here, replicator)
        state: Any = here
        reason = await state.signal_sync_state(poison.signal_id)
        if named:
            assert reason == (True, "HTTP 422: too long")
        else:
            assert reason == (
                True,
                "HTTP 422 from /public/v1/checkpoints/ingest: batch refused: a value is longer than its column",
            )
        synced, why = await state.signal_sync_state(huge.signal_id)
        assert synced and why is not None and why.startswith("HTTP 200: plane rejected: inbox entry is")
        others = [n for n in notes if n is not poison]
        assert [await state.signal_sync_state(n.signal_id) for n in others] == [(True, None)] * 6
        assert [await state.sync_state(r.checkpoint_id) for r in rows] == [(True, None)] * len(rows)
        assert plane.faults.posts <= (4 if named else 12)

    entries, remote_rows = await on_plane(plane, EID)
    assert [e.signal_id for e in entries] == [n.signal_id for n in others]
    assert remote_rows == rows
