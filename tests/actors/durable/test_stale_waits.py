"""A stale entry in the index of resting runs: one whose run is no longer resting at that wait.

A run cancelled while it sleeps keeps its entry until a waker reads it; a run woken by another
process and resting again at a later wait, or deleted, between a waker's read of the index and its
wake leaves that waker holding a stale entry. A sweep or the timers recognise such an entry by the
run's newest row: they do not wake the run (early, or a second time), settle the entry without
touching the run's later wait, and go on to wake the due runs listed after it in the same look.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

import anyio
import pytest
from _nappers import napper
from conftest import Backend

from actors import ActorSystem, Agent, sleep, tool
from actors.lowlevel import timers_module
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import RUN_END, WAIT, WAKE, Store, utcnow

pytestmark = pytest.mark.anyio

NAP = 0.3
#: The later wait of a run: far enough that nothing wakes it during a test.
LATER = 60.0


def _twice_resting() -> Agent:
    """An agent that sleeps ``NAP``, then rests again at a second sleep of ``LATER``."""

    @tool
    async def nap() -> str:
        """Sleep a moment."""
        await sleep(NAP)
        return "rested"

    @tool
    async def rest() -> str:
        """Sleep for long."""
        await sleep(LATER)
        return "rested long"

    def model(messages: list[Message]) -> str | ModelReply:
        done = sum(1 for message in messages if message.role == "tool")
        if done == 0:
            return ModelReply(tool_calls=[ToolCall("nap", {})])
        if done == 1:
            return ModelReply(tool_calls=[ToolCall("rest", {})])
        return "done"

    return Agent("twice", FunctionModel(model), tools=[nap, rest])


async def _asleep(system: ActorSystem, agent: Agent, execution_id: str) -> datetime:
    """Spawn a run of ``agent`` and let it rest; its wake time."""
    result = await (await system.spawn(agent, "go", execution_id=execution_id)).result(timeout=30)
    assert result.status == "waiting" and result.wake_at is not None
    return result.wake_at


async def _past(when: datetime) -> None:
    """Let the wall clock pass ``when`` (a wake time is a time of the store's clock)."""
    left = (when - utcnow()).total_seconds()
    if left > 0:
        await anyio.sleep(left + 0.05)


def _stale_read(store: Store, meanwhile: Callable[[], Awaitable[None]]) -> None:
    """Make the store's next read of the index run ``meanwhile`` after reading it and before
    answering (another process acting between a waker's read and its wake)."""
    read = store.due_waits
    done = False

    async def due_waits(limit: int) -> list[tuple[str, int]]:
        nonlocal done
        found = await read(limit)
        if not done:
            done = True
            await meanwhile()
        return found

    store.due_waits = due_waits  # type: ignore[method-assign]


async def _steps(system: ActorSystem, execution_id: str) -> list[tuple[str, Any]]:
    return [(row.step_type, row.status) for row in await system.history(execution_id)]


async def test_a_run_cancelled_asleep_is_not_woken_and_the_runs_after_it_are(store_backend: Backend) -> None:
    """The entry of a run cancelled while it slept is settled by a sweep that wakes nothing of it,
    and the due run listed after it is woken in that same sweep."""
    agent = napper(seconds=NAP)
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        await _asleep(system, agent, "ended")
        due = await _asleep(system, agent, "due")  # later: listed after the ended run
        assert (await system.cancel("ended", reason="stop")).status == "failed"
    await _past(due)
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        assert await store.due_waits(10) == [("ended", 2), ("due", 2)]
        assert await system.sweep() == 1
        assert (await system.ref("due").result(timeout=30)).output == "awake: rested"
        assert await store.due_waits(10) == [] and await store.next_wake() is None
        steps = await _steps(system, "ended")
        assert steps[-2:] == [(WAIT, "interrupted"), (RUN_END, "failed")]  # never woken
        assert await system.sweep() == 0


async def test_the_timers_settle_a_cancelled_runs_entry_and_wake_the_next_on_time(
    store_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In the system that keeps both runs: the run cancelled while it slept is not woken, its entry
    is settled, and the run due right after it is woken at its time, not at a later look (made 10 s
    later here, so a slow machine cannot be taken for it)."""
    monkeypatch.setattr(timers_module, "_RETRY", 10.0)
    agent = napper(seconds=NAP)
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        await _asleep(system, agent, "ended")
        due = await _asleep(system, agent, "due")
        assert (await system.cancel("ended", reason="stop")).status == "failed"
        with anyio.fail_after(30):
            async for _ in system.ref("due").events():  # until its run end
                pass
        assert (await system.status("due")).status == "completed"
        late = (utcnow() - due).total_seconds()
        assert late < 5.0, late
        assert await store.due_waits(10) == [] and await store.next_wake() is None
        assert [step for step, _ in await _steps(system, "ended")].count(WAKE) == 0


async def test_a_stale_entry_of_a_run_resting_again_wakes_nothing_and_keeps_the_later_wait(
    store_backend: Backend,
) -> None:
    """Another process wakes the run between this sweep's read of the index and its wake, and the
    run rests again at a later wait: this sweep wakes nothing, and the later wait stays recorded
    with its own time."""
    agent = _twice_resting()
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        due = await _asleep(system, agent, "moved")
    await _past(due)
    later: list[datetime | None] = []

    async def woken_elsewhere() -> None:
        async with store_backend.open() as other, ActorSystem(other, runners=[agent]) as elsewhere:
            assert await elsewhere.sweep() == 1
            summary = await elsewhere.status("moved")
            assert summary.status == "waiting"
            later.append(summary.wake_at)

    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        _stale_read(store, woken_elsewhere)
        with anyio.fail_after(30):
            assert await system.sweep() == 0  # its entry named the first wait: nothing to wake
        [wake_at] = later
        assert wake_at is not None and wake_at > utcnow() + timedelta(seconds=LATER / 2)
        summary = await system.status("moved")
        assert (summary.status, summary.wake_at) == ("waiting", wake_at)  # not woken early
        steps = [step for step, _ in await _steps(system, "moved")]
        assert steps.count(WAKE) == 1 and steps[-1] == WAIT  # woken once, by the other process
        newest = await store.latest("moved")
        assert newest is not None and newest.seq > 2
        assert await store.due_waits(10) == []
        assert await store.next_wake() == wake_at  # the later wait is kept, not settled


async def test_a_stale_entry_of_a_deleted_run_is_dropped_and_the_next_due_run_woken(
    store_backend: Backend,
) -> None:
    """A run deleted by another process between this sweep's read of the index and its wake: the
    sweep drops its entry without error and wakes the due run listed after it."""
    agent = napper(seconds=NAP)
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        await _asleep(system, agent, "gone")
        due = await _asleep(system, agent, "kept")
    await _past(due)

    async def deleted_elsewhere() -> None:
        async with store_backend.open() as other:
            assert await other.delete_run("gone") > 0

    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        assert await store.due_waits(10) == [("gone", 2), ("kept", 2)]
        _stale_read(store, deleted_elsewhere)
        with anyio.fail_after(30):
            assert await system.sweep() == 1
        assert (await system.ref("kept").result(timeout=30)).output == "awake: rested"
        assert await store.latest("gone") is None
        assert await store.due_waits(10) == [] and await store.next_wake() is None


async def test_a_wake_that_finds_the_run_resting_again_leaves_it_no_ones(store_backend: Backend) -> None:
    """Another process wakes the run after this sweep found its wait due and before this sweep's
    wake reaches it, and the run rests again at a later wait: this wake leaves it as it is, and
    the run is no one's (no sweep is asked to take it), its later wait still recorded."""
    agent = _twice_resting()
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        due = await _asleep(system, agent, "raced")
    await _past(due)
    later: list[datetime | None] = []

    async def woken_elsewhere() -> None:
        async with store_backend.open() as other, ActorSystem(other, runners=[agent]) as elsewhere:
            assert await elsewhere.sweep() == 1
            later.append((await elsewhere.status("raced")).wake_at)

    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        read = store.latest
        done = False

        async def latest(execution_id: str) -> Any:
            nonlocal done
            found = await read(execution_id)
            if not done:  # the sweep's check of the due entry: the wait is still the newest row
                done = True
                await woken_elsewhere()
            return found

        store.latest = latest  # type: ignore[method-assign]
        with anyio.fail_after(30):
            await system.sweep()
        [wake_at] = later
        summary = await system.status("raced")
        assert wake_at is not None and (summary.status, summary.wake_at) == ("waiting", wake_at)
        assert [step for step, _ in await _steps(system, "raced")].count(WAKE) == 1
        assert await store.orphans() == [] and await store.unowned(["raced"]) == set()  # type: ignore[attr-defined]
        assert await store.next_wake() == wake_at
