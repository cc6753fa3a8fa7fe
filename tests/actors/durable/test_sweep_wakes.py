"""A sweep wakes due resting runs of a process that is gone, in this process: it counts each run it
woke, settles its wait once, leaves a run another process is waking, and lets a wake go in a store
outage (the wait stays due for a later sweep). The worker-process side is in ``test_waits.py``.
"""

from __future__ import annotations

import functools
import logging
import time
from datetime import timedelta
from pathlib import Path

import anyio
import pytest
from _nappers import napper
from conftest import Backend, until_status

from actors import ActorSystem, Agent, interrupt, sleep, sleep_until, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import WAKE, Checkpoint, SQLiteStore, StoreUnavailable, utcnow

pytestmark = pytest.mark.anyio

NAP = 0.3


def _napper(log: list[str]) -> Agent:
    @tool
    async def nap() -> str:
        """Sleep a moment."""
        log.append("enter")
        await sleep(NAP)
        log.append("after")
        return "rested"

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"awake: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("nap", {})])

    return Agent("napper", FunctionModel(model), tools=[nap])


async def _asleep_and_due(backend: Backend, agent: Agent, execution_id: str) -> None:
    """A run that went to sleep in a system now closed (so no timer of this process wakes it),
    past its wake time."""
    async with backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        result = await (await system.spawn(agent, "go", execution_id=execution_id)).result(timeout=30)
        assert result.status == "waiting" and result.wake_at is not None
    await anyio.sleep(NAP + 0.1)


async def test_a_sweep_wakes_a_due_run_once_counts_it_and_settles_its_wait(store_backend: Backend) -> None:
    log: list[str] = []
    agent = _napper(log)
    await _asleep_and_due(store_backend, agent, "w1")
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        assert [eid for eid, _ in await store.due_waits(10)] == ["w1"]
        assert await system.sweep() == 1
        done = await system.ref("w1").result(timeout=30)
        assert (done.status, done.output) == ("completed", "awake: rested")
        assert await store.due_waits(10) == [] and await store.next_wake() is None
        assert await system.sweep() == 0  # nothing is woken twice
        rows = await system.history("w1")
        assert [row.step_type for row in rows].count(WAKE) == 1
        assert log == ["enter", "enter", "after"]


async def test_a_sweep_leaves_a_due_run_that_another_process_is_waking(store_backend: Backend) -> None:
    agent = _napper([])
    await _asleep_and_due(store_backend, agent, "w2")
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        other = store_backend.open()
        async with other:
            assert await other.try_lock("w2")  # another process holds the run: it wakes it
            assert await system.sweep() == 0
            assert [eid for eid, _ in await store.due_waits(10)] == ["w2"]  # still due, not settled
            await other.unlock("w2")
        assert await system.sweep() == 1
        assert (await system.ref("w2").result(timeout=30)).status == "completed"


class _LockDown(SQLiteStore):
    """A SQLite store whose run locks fail while ``down``."""

    down = False

    async def try_lock(self, execution_id: str) -> bool:
        if self.down:
            raise StoreUnavailable("the store is down")
        return await super().try_lock(execution_id)


async def test_a_wake_in_a_store_outage_is_let_go_and_the_wait_stays_due(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tether")
    agent = _napper([])
    path = tmp_path / "t.db"
    async with SQLiteStore(path) as store, ActorSystem(store, runners=[agent]) as system:
        assert (
            await (await system.spawn(agent, "go", execution_id="w3")).result(timeout=30)
        ).status == "waiting"
    await anyio.sleep(NAP + 0.1)
    async with _LockDown(path) as store, ActorSystem(store, runners=[agent]) as system:
        store.down = True
        assert await system.sweep() == 0
        said = [
            r
            for r in caplog.records
            if r.name == "tether" and r.getMessage().startswith("event='wake let go in a store outage' ")
        ]
        assert len(said) == 1 and said[0].levelno == logging.WARNING
        assert (
            said[0]
            .getMessage()
            .startswith(
                "event='wake let go in a store outage' execution_id='w3' "
                "error=\"StoreUnavailable('the store is down')\" "
            )
        ), said[0].getMessage()
        store.down = False
        assert [eid for eid, _ in await store.due_waits(10)] == ["w3"]
        assert await system.sweep() == 1
        assert (await system.ref("w3").result(timeout=30)).status == "completed"


async def test_a_wake_its_runner_cannot_drive_is_logged_uncounted_and_stays_due(
    store_backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    """The runner deployed now lacks the tool the run rests in: the sweep says so, counts no wake,
    and the run stays waiting and due for a process with that tool."""
    caplog.set_level(logging.WARNING, logger="tether")
    await _asleep_and_due(store_backend, _napper([]), "w4")
    changed = Agent("napper", FunctionModel(lambda messages: "never"))  # no tool "nap" any more
    async with store_backend.open() as store, ActorSystem(store, runners=[changed]) as system:
        assert await system.sweep() == 0
        [said] = [r for r in caplog.records if r.name == "tether" and r.levelno == logging.WARNING]
        assert said.getMessage().startswith(
            "event='sweep could not wake a run' execution_id='w4' "
            "error='ToolNotFound(\"agent \\'napper\\' has no tool named \\'nap\\' (run \\'w4\\')\")' "
        ), said.getMessage()
        assert [eid for eid, _ in await store.due_waits(10)] == ["w4"]
        assert (await system.status("w4")).status == "waiting"


class _Vanishing(SQLiteStore):
    """A SQLite store in which run ``a-gone`` is deleted right after its next read, once ``vanish``
    is set (a run deleted between the timers' read of the index and their wake of it)."""

    vanish = False
    _seen = False

    async def latest(self, execution_id: str) -> Checkpoint | None:
        if self.vanish and execution_id == "a-gone":
            if self._seen:
                return None
            self._seen = True
        return await super().latest(execution_id)


async def test_the_timers_wake_every_run_due_in_one_look_past_one_deleted_meanwhile(tmp_path: Path) -> None:
    """Two runs of this system fall due at one time and the first is deleted as the timers wake it:
    the second is woken in the same look, not at the timers' next one a second or more later."""
    due = utcnow() + timedelta(seconds=1)

    @tool
    async def nap() -> str:
        """Sleep until a shared time."""
        await sleep_until(due)
        return "rested"

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"awake: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("nap", {})])

    agent = Agent("shared-napper", FunctionModel(model), tools=[nap])
    async with _Vanishing(tmp_path / "t.db") as store, ActorSystem(store, runners=[agent]) as system:
        for execution_id in ("a-gone", "b-free"):  # one wake time: the index lists them in this order
            result = await (await system.spawn(agent, "go", execution_id=execution_id)).result(timeout=30)
            assert result.status == "waiting" and result.wake_at == due
        store.vanish = True
        await until_status(system, "b-free", "completed")
        late = (utcnow() - due).total_seconds()
        assert late < 0.8, late


async def test_a_take_its_runner_cannot_drive_is_logged_uncounted_and_left_for_another(
    store_backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    """A run left mid-tool by a process that stopped; the runner deployed now lacks that tool: the
    sweep says so and counts no take, and the run stays an orphan for a process with that tool."""
    caplog.set_level(logging.WARNING, logger="tether")
    entered = anyio.Event()

    @tool
    async def nap() -> str:
        """Work for long."""
        entered.set()
        await anyio.sleep(60)
        return "never"

    first = Agent(
        "napper", FunctionModel(lambda messages: ModelReply(tool_calls=[ToolCall("nap", {})])), tools=[nap]
    )
    async with store_backend.open() as store, ActorSystem(store, runners=[first]) as system:
        await system.spawn(first, "go", execution_id="o1")
        with anyio.fail_after(30):
            await entered.wait()
    caplog.clear()
    changed = Agent("napper", FunctionModel(lambda messages: "never"))  # no tool "nap" any more
    async with store_backend.open() as store, ActorSystem(store, runners=[changed]) as system:
        assert await system.sweep() == 0
        said = [r.getMessage() for r in caplog.records if r.name == "tether" and r.levelno == logging.WARNING]
        assert len(said) == 1 and said[0].startswith(
            "event='sweep could not take a run' execution_id='o1' "
            "error='ToolNotFound(\"agent \\'napper\\' has no tool named \\'nap\\' (run \\'o1\\')\")' "
        ), said
        assert (await system.status("o1")).status == "orphaned"


async def test_a_sweeps_limit_counts_its_wakes_after_its_takes(store_backend: Backend) -> None:
    agent, quick = _napper([]), Agent("quick", FunctionModel(lambda messages: "done"))
    await _asleep_and_due(store_backend, agent, "w4")
    async with store_backend.open() as store, ActorSystem(store, runners=[agent, quick]) as system:
        await system.enqueue(quick, "go", execution_id="q4")
        assert await system.sweep(limit=1) == 1  # the queued run fills the limit: no wake
        assert [eid for eid, _ in await store.due_waits(10)] == ["w4"]
        assert await system.sweep(limit=1) == 1  # a limit of one still wakes a due run
        assert await store.due_waits(10) == []
        assert (await system.status("w4")).status == "completed"


async def test_a_sweep_counts_every_run_it_wakes(store_backend: Backend) -> None:
    agent = _napper([])
    for execution_id in ("w5", "w6"):
        await _asleep_and_due(store_backend, agent, execution_id)
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        assert await system.sweep() == 2
        assert await store.due_waits(10) == []


async def test_a_sweeps_limit_counts_its_wakes_after_its_expired_pauses(store_backend: Backend) -> None:
    @tool
    async def ask() -> str:
        """Ask a person, briefly."""
        return "approved" if interrupt("go on?", expires_in=0.2).approved else "refused"

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"asked: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("ask", {})])

    asker, napper = Agent("asker", FunctionModel(model), tools=[ask]), _napper([])
    await _asleep_and_due(store_backend, napper, "w7")
    async with store_backend.open() as store, ActorSystem(store, runners=[asker, napper]) as system:
        assert (
            await (await system.spawn(asker, "go", execution_id="x7")).result(timeout=30)
        ).status == "paused"
        await anyio.sleep(0.3)
        assert await system.sweep(limit=1) == 1  # the expired pause fills the limit: no wake
        assert (await system.ref("x7").result(timeout=30)).output == "asked: refused"
        assert [eid for eid, _ in await store.due_waits(10)] == ["w7"]


async def test_serve_wakes_due_runs_in_process_once_each_within_its_concurrency(
    store_backend: Backend,
) -> None:
    """Runs that went to sleep in a process now gone are woken by a serving system, each once,
    never more at once than its ``concurrency``; their waits are settled."""
    now, most = 0, 0

    @tool
    async def nap() -> str:
        """Sleep a moment, then work a moment."""
        nonlocal now, most
        await sleep(NAP)
        now += 1
        most = max(most, now)
        await anyio.sleep(0.2)
        now -= 1
        return "rested"

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"awake: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("nap", {})])

    agent = Agent("working-napper", FunctionModel(model), tools=[nap])
    ids = ("s1", "s2", "s3")
    for execution_id in ids:
        await _asleep_and_due(store_backend, agent, execution_id)
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(system.serve, concurrency=1, poll=0.05))
            with anyio.fail_after(30):
                for execution_id in ids:
                    await until_status(system, execution_id, "completed")
            tg.cancel_scope.cancel()
        assert most == 1
        assert await store.due_waits(10) == []
        for execution_id in ids:
            rows = await system.history(execution_id)
            assert [row.step_type for row in rows].count(WAKE) == 1, execution_id


async def test_a_cancelled_serve_hands_a_run_it_woke_to_the_fleet(
    store_backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tether")
    working = anyio.Event()

    @tool
    async def nap() -> str:
        """Sleep a moment, then work for long."""
        await sleep(NAP)
        working.set()
        await anyio.sleep(60)
        return "never"

    def model(messages: list[Message]) -> str | ModelReply:
        return ModelReply(tool_calls=[ToolCall("nap", {})])

    agent = Agent("long-napper", FunctionModel(model), tools=[nap])
    await _asleep_and_due(store_backend, agent, "h1")
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(functools.partial(system.serve, concurrency=2, poll=0.05, shutdown_grace=0))
                await working.wait()
                tg.cancel_scope.cancel()
        said = [
            r.getMessage()
            for r in caplog.records
            if r.name == "tether" and r.getMessage().startswith("event='runs handed to the fleet' ")
        ]
        assert len(said) == 1 and said[0].startswith("event='runs handed to the fleet' runs=['h1'] "), said
        assert (await system.status("h1")).status == "orphaned"  # for any worker's sweep to go on with


async def test_the_timers_wake_a_due_run_behind_one_another_process_holds(store_backend: Backend) -> None:
    """Two runs of this system fall due together; another process holds the first: the second is
    still woken at its time, not at the timers' next look."""

    first, second = napper("napper-0.5", 0.5), napper("napper-0.6", 0.6)
    async with store_backend.open() as store, ActorSystem(store, runners=[first, second]) as system:
        held = await (await system.spawn(first, "go", execution_id="held")).result(timeout=30)
        free = await (await system.spawn(second, "go", execution_id="free")).result(timeout=30)
        assert held.status == free.status == "waiting" and free.wake_at is not None
        other = store_backend.open()
        async with other:
            assert await other.try_lock("held")  # another process is waking it
            await until_status(system, "free", "completed")
            late = time.time() - free.wake_at.timestamp()
            # The timers look again at a due run they could not wake a second or more later: the free run
            # must not wait for that look.
            assert late < 0.8, late
            await other.unlock("held")
