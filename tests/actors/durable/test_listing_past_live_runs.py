"""A sweep goes past the runs it cannot take now and takes the ones listed after them in the same
sweep, instead of leaving those for the next look: past a due run this process is waking already,
past a due run whose runner it lacks, past a stale wait (its run was cancelled while it slept),
past a listed run it is driving already (it took the run itself after the store listed it), and
past a run it tried in this pass and lists again (another process held it at the take, then let it
go). A second store on the same database stands for another process.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import anyio
import pytest
from _nappers import napper
from conftest import Backend

from actors import ActorSystem, Agent, Queue, Recover, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import WAKE, Checkpoint, Store, utcnow

pytestmark = pytest.mark.anyio

LIMIT = 10.0
NAP = 0.6  # long enough that a loaded machine writes the wait row before it is due


async def _asleep_and_due(store: Store, runs: Sequence[tuple[Agent, str]]) -> None:
    """Each run gone to sleep, in this order, in a system now closed, and all of them past their
    wake time: the index of waits lists them in this order. The system's timers are shown no due
    run meanwhile (however slow the machine, they wake none of them)."""

    async def none_due(limit: int) -> list[tuple[str, int]]:
        return []

    latest = utcnow()
    store.due_waits = none_due  # type: ignore[method-assign]
    try:
        async with ActorSystem(store, runners=[agent for agent, _ in runs]) as system:
            for agent, execution_id in runs:
                ref = await system.spawn(agent, "go", execution_id=execution_id)
                result = await ref.result(timeout=LIMIT)
                assert result.status == "waiting" and result.wake_at is not None
                latest = max(latest, result.wake_at)
    finally:
        del store.due_waits
    await anyio.sleep((latest - utcnow()).total_seconds() + 0.05)  # the wake time itself is awaited


async def test_a_sweep_wakes_the_due_runs_listed_after_one_it_is_waking_already(
    store_backend: Backend,
) -> None:
    agent = napper("napper", NAP)
    async with store_backend.open() as store:
        await _asleep_and_due(store, [(agent, "w-live"), (agent, "w-next")])
        entered, go = anyio.Event(), anyio.Event()
        append = store.append

        async def held_wake(row: Checkpoint) -> None:
            if row.execution_id == "w-live" and row.step_type == WAKE:
                entered.set()  # the run is live here, and its wait is still due until this row
                await go.wait()
            await append(row)

        store.append = held_wake  # type: ignore[method-assign]
        async with ActorSystem(store, runners=[agent]) as system:
            with anyio.fail_after(LIMIT):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(lambda: system.sweep(limit=1))  # wakes w-live, the first due
                    await entered.wait()
                    assert [eid for eid, _ in await store.due_waits(10)] == ["w-live", "w-next"]
                    assert await system.sweep() == 1  # w-next, in this sweep
                    assert (await system.status("w-next")).status == "completed"
                    go.set()
            assert (await system.status("w-live")).status == "completed"


async def test_a_sweep_wakes_the_due_runs_listed_after_one_whose_runner_it_lacks(
    store_backend: Backend,
) -> None:
    elsewhere, here = napper("elsewhere", NAP), napper("here", NAP)
    async with store_backend.open() as store:
        await _asleep_and_due(store, [(elsewhere, "w-other"), (here, "w-mine")])
        async with ActorSystem(store, runners=[here]) as system:
            assert await system.sweep() == 1
            assert (await system.status("w-mine")).status == "completed"
            assert (await system.status("w-other")).status == "waiting"


def _quick() -> Agent:
    return Agent("quick", FunctionModel(lambda messages: f"done: {messages[-1].content}"))


async def test_a_sweep_takes_the_runs_listed_after_one_it_took_itself_meanwhile(
    store_backend: Backend,
) -> None:
    entered, go = anyio.Event(), anyio.Event()

    @tool
    async def work() -> str:
        """Work until told to stop."""
        entered.set()
        await go.wait()
        return "worked"

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"done: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("work", {})])

    worker, quick = Agent("worker", FunctionModel(model), tools=[work]), _quick()
    async with store_backend.open() as store, ActorSystem(store, runners=[worker, quick]) as system:
        await system.enqueue(worker, "go", execution_id="q-live", priority=5)
        await system.enqueue(quick, "go", execution_id="q-next")
        orphans = store.orphans
        raced = False

        async def listed_then_taken_here(
            limit: int = 100, *, full: Sequence[str] = (), full_keys: Sequence[tuple[str, str]] = ()
        ) -> list[str]:
            nonlocal raced
            found = await orphans(limit, full=full, full_keys=full_keys)
            if not raced:  # once listed, q-live is taken by this process itself (a resume, say)
                raced = True
                assert found == ["q-live", "q-next"]
                await system.send("q-live", Recover())
                await entered.wait()
            return found

        store.orphans = listed_then_taken_here  # type: ignore[method-assign]
        with anyio.fail_after(LIMIT):
            assert await system.sweep() == 1  # q-next, in this sweep
            assert (await system.status("q-next")).status == "completed"
            assert (await system.status("q-live")).status == "running"
            go.set()
            assert (await system.ref("q-live").result(timeout=LIMIT)).output == "done: worked"


async def test_a_sweep_takes_the_runs_listed_after_one_it_tried_in_the_same_pass(
    store_backend: Backend,
) -> None:
    """A pass's first listing: ``q-held`` (another process takes it first), then ``f1`` (its queue is
    full: the listing is read again without that queue). The second listing holds ``q-held`` again
    (let go meanwhile): the pass goes past it, not tried twice, to ``q-next``."""
    quick = _quick()
    async with store_backend.open() as store, ActorSystem(store, runners=[quick]) as system:
        await store.declare_queues([Queue("full", concurrency=1)])
        await system.enqueue(quick, "go", execution_id="f0", queue="full")
        await system.enqueue(quick, "go", execution_id="q-held", priority=9)
        await system.enqueue(quick, "go", execution_id="f1", queue="full", priority=5)
        await system.enqueue(quick, "go", execution_id="q-next")
        async with store_backend.open() as other:
            assert (await other.take_queued("f0")).taken  # the full queue's one run, in another process
            orphans = store.orphans
            listings: list[list[str]] = []

            async def held_then_let_go(
                limit: int = 100, *, full: Sequence[str] = (), full_keys: Sequence[tuple[str, str]] = ()
            ) -> list[str]:
                if listings:
                    await other.unlock("q-held")  # let go before the second listing
                found = await orphans(limit, full=full, full_keys=full_keys)
                if not listings:
                    assert await other.try_lock("q-held")  # taken elsewhere after the first listing
                listings.append(found)
                return found

            store.orphans = held_then_let_go  # type: ignore[method-assign]
            with anyio.fail_after(LIMIT):
                assert await system.sweep() == 1  # q-next, in this sweep
            assert listings[:2] == [["q-held", "f1", "q-next"], ["q-held", "q-next"]]
            assert (await system.status("q-next")).status == "completed"
            assert (await system.status("q-held")).status == "queued"
            await other.untake("f0")


async def test_a_sweep_wakes_the_due_runs_listed_after_a_stale_wait(store_backend: Backend) -> None:
    """A run cancelled while it slept leaves its wait in the index: the sweep forgets that wait and
    wakes the run listed after it."""
    agent = napper("napper", NAP)
    async with store_backend.open() as store:
        await _asleep_and_due(store, [(agent, "w-cancelled"), (agent, "w-next")])
        async with ActorSystem(store, runners=[agent]) as system:
            assert (await system.cancel("w-cancelled")).status == "failed"
            assert [eid for eid, _ in await store.due_waits(10)] == ["w-cancelled", "w-next"]
            assert await system.sweep() == 1
            assert (await system.status("w-next")).status == "completed"
            assert await store.due_waits(10) == []


async def test_a_sweep_wakes_a_due_run_of_a_versioned_runner_it_has(store_backend: Backend) -> None:
    agent = napper("napper", NAP, version="1")
    async with store_backend.open() as store:
        await _asleep_and_due(store, [(agent, "w-v1")])
        async with ActorSystem(store, runners=[agent]) as system:
            with anyio.fail_after(LIMIT):
                assert await system.sweep() == 1
                assert (await system.ref("w-v1").result(timeout=LIMIT)).status == "completed"


async def test_a_due_run_whose_runner_version_a_sweep_lacks_is_left_and_named_once(
    store_backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    """A sweep with version 2 of the runner wakes nothing of a due run of version 1; it says so
    once, naming the run and the version it waits for, and the run stays due for a worker of it."""
    old, new = napper("napper", NAP, version="1"), napper("napper", NAP, version="2")
    async with store_backend.open() as store:
        await _asleep_and_due(store, [(old, "w-old")])
        caplog.set_level(logging.WARNING, logger="tether")
        async with ActorSystem(store, runners=[new]) as system:
            with anyio.fail_after(LIMIT):
                assert await system.sweep() == 0
                assert await system.sweep() == 0
        said = [
            r.getMessage()
            for r in caplog.records
            if r.getMessage().startswith("event='run waits for its runner version' ")
        ]
        assert len(said) == 1, said
        assert said[0].startswith(
            "event='run waits for its runner version' execution_id='w-old' runner='napper' version='1' "
        ), said
        assert [eid for eid, _ in await store.due_waits(10)] == ["w-old"]
