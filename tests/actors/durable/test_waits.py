"""Waits in a tool: ``wait_signal`` and ``sleep`` rest the run (no task, no pending row) until a
signal or a time wakes it, exactly once, from any process; a signal sent before the wait is found.

Real processes (``_wait_child.py``, ``_signal_child.py``): a sender with no runner, a run SIGKILLed
while asleep and woken by a worker started afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import Backend, until_status
from test_signals import sender

from actors import ActorSystem, Agent, Signal, sleep, tool, wait_signal
from actors.models import FunctionModel, Message, ModelReply, ToolCall, Usage
from stores import SIGNAL, WAIT, WAKE, Store

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[3]
CHILD = Path(__file__).with_name("_wait_child.py")
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests"), str(CHILD.parent)])}


def _waiter(log: list[Any], *, name: str = "go", timeout: float | None = None, nap: float = 0.0) -> Agent:
    @tool
    async def wait_for_go() -> str:
        """Wait for the signal."""
        log.append("enter")
        if nap:
            await anyio.sleep(nap)
        got = await wait_signal(name, timeout=timeout)
        log.append(("after", got))
        return "nothing" if got is None else json.dumps(got.payload)

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"got {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("wait_for_go", {})])

    return Agent("waiter", FunctionModel(model), tools=[wait_for_go])


async def test_a_waiting_run_holds_no_task_and_a_signal_from_another_process_wakes_it_once(
    store_backend: Backend,
) -> None:
    log: list[Any] = []
    agent = _waiter(log)
    async with (
        store_backend.open() as store,
        ActorSystem(store, runners=[agent]) as system,
        sender(store_backend) as child,
    ):
        ref = await system.spawn(agent, "wait")
        result = await ref.result()
        assert result.status == "waiting"
        eid = ref.execution_id
        summary = await system.status(eid)
        assert (summary.status, summary.wake_at) == ("waiting", None)
        assert await system.pending() == []  # a wait is not an approval
        assert system.runtime.lookup(eid) is None and not system._runs.is_live(eid)  # no actor, no task
        newest = (await system.history(eid))[-1]
        assert (newest.step_type, newest.status, newest.interrupt_reason) == (
            WAIT,
            "interrupted",
            "signal:go",
        )
        assert [s.execution_id for s in await system.runs(status="waiting")] == [eid]
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: system.serve(poll=0.1))  # a serving worker wakes it
            assert await child.send(eid, "go", {"n": 1}) == "sent"  # the sender has no runner
            await until_status(system, eid, "completed")
            tg.cancel_scope.cancel()
        assert log == ["enter", "enter", ("after", Signal("go", {"n": 1}))]  # after the wait: once
        assert (await system.ref(eid).result()).output == 'got {"n": 1}'
        kinds = [row.step_type for row in await system.history(eid)]
        assert kinds.count(WAIT) == 1 and kinds.count(SIGNAL) == 1
        assert await store.signals(eid) == []


async def test_the_open_system_wakes_its_waiting_run_when_another_process_signals_it(
    store_backend: Backend,
) -> None:
    """No worker serves and the sender has no runner: the system the run rests in, still open,
    hears the signal (PostgreSQL: its notice; SQLite: its one poll of the index of waits) and wakes
    the run, once, within a bound far below any wait's time (it has none)."""
    log: list[Any] = []
    agent = _waiter(log)
    async with (
        store_backend.open() as store,
        ActorSystem(store, runners=[agent]) as system,
        sender(store_backend) as child,
    ):
        ref = await system.spawn(agent, "wait")
        assert (await ref.result()).status == "waiting"
        eid = ref.execution_id
        await anyio.sleep(0.5)  # resting: no task of the run is left to see the signal
        sent = time.monotonic()
        assert await child.send(eid, "go", {"n": 7}) == "sent"
        await until_status(system, eid, "completed", timeout=10)
        assert time.monotonic() - sent < 2.0
        await anyio.sleep(0.5)  # a second wake, were there one, would show in this time
        assert log == ["enter", "enter", ("after", Signal("go", {"n": 7}))]  # after the wait: once
        kinds = [row.step_type for row in await system.history(eid)]
        assert kinds.count(WAIT) == 1 and kinds.count(SIGNAL) == 1
        assert await store.due_waits(10) == []


async def test_a_signal_sent_before_the_wait_is_found_by_it(store_backend: Backend) -> None:
    log: list[Any] = []
    agent = _waiter(log)
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        eid = await system.enqueue(agent, "wait")
        await system.signal(eid, "go", "early")  # before the run ever ran its tool
        with anyio.fail_after(30):
            assert await system.sweep() == 1
        assert (await system.ref(eid).result()).output == 'got "early"'
        assert log == ["enter", ("after", Signal("go", "early"))]  # found at once, no rest
        assert WAIT not in [row.step_type for row in await system.history(eid)]
        assert await store.signals(eid) == []


async def test_the_sender_with_the_runner_wakes_the_run_and_a_second_signal_waits_in_the_inbox(
    store_backend: Backend,
) -> None:
    log: list[Any] = []
    agent = _waiter(log)
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        ref = await system.spawn(agent, "wait")
        assert (await ref.result()).status == "waiting"
        await system.send(ref.execution_id, Signal("go", 1))
        await until_status(system, ref.execution_id, "completed")
        assert log.count("enter") == 2 and log[-1] == ("after", Signal("go", 1))
        with pytest.raises(Exception, match="already completed"):
            await system.signal(ref.execution_id, "go", 2)
        assert await store.signals(ref.execution_id) == []


async def test_a_wait_with_a_timeout_returns_none_once_woken_in_process(store_backend: Backend) -> None:
    log: list[Any] = []
    agent = _waiter(log, name="never", timeout=1.0)
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        started = time.monotonic()
        ref = await system.spawn(agent, "wait")
        assert (await ref.result()).status == "waiting"
        summary = await system.status(ref.execution_id)
        assert summary.status == "waiting" and summary.wake_at is not None
        # no worker: this system wakes it
        await until_status(system, ref.execution_id, "completed", timeout=15)
        assert 0.9 <= time.monotonic() - started < 10
        assert log == ["enter", "enter", ("after", None)]
        rows = await system.history(ref.execution_id)
        wakes = [row for row in rows if row.step_type == WAKE]
        assert len(wakes) == 1 and wakes[0].node_input["timed_out"] is True
        assert (await system.ref(ref.execution_id).result()).output == "got nothing"
        assert await store.next_wake() is None or await store.due_waits(10) == []


async def test_a_sleeping_run_wakes_in_process_with_no_worker(store_backend: Backend) -> None:
    log: list[str] = []

    @tool
    async def nap() -> str:
        """Sleep a second."""
        log.append("enter")
        await sleep(1.0)
        log.append("after")
        return "rested"

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return "awake"
        return ModelReply(tool_calls=[ToolCall("nap", {})])

    agent = Agent("napper", FunctionModel(model), tools=[nap])
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        ref = await system.spawn(agent, "nap")
        result = await ref.result()
        assert result.status == "waiting" and result.wake_at is not None
        assert system.runtime.lookup(ref.execution_id) is None
        await until_status(system, ref.execution_id, "completed", timeout=15)
        assert log == ["enter", "enter", "after"]
        assert [row.step_type for row in await system.history(ref.execution_id)].count(WAKE) == 1


def _ledger(workdir: Path) -> list[list[str]]:
    path = workdir / "ledger"
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


async def _json_line(process: anyio.abc.Process) -> dict[str, Any]:
    assert process.stdout is not None
    buffered = b""
    with anyio.fail_after(60):
        while b"\n" not in buffered:
            buffered += await process.stdout.receive()
    return dict(json.loads(buffered.split(b"\n", 1)[0]))


async def test_a_run_killed_while_asleep_is_woken_by_a_worker_started_afterwards_exactly_once(
    store_backend: Backend, tmp_path: Path
) -> None:
    args = [*store_backend.child_args(), str(tmp_path)]
    sleeper = await anyio.open_process([sys.executable, str(CHILD), "rest", *args, "sleep"], env=ENV)
    try:
        rested = await _json_line(sleeper)
    finally:
        sleeper.send_signal(signal.SIGKILL)  # every process of the run is gone while it sleeps
        with anyio.fail_after(30):
            await sleeper.wait()
    eid = rested["id"]
    assert rested["status"] == "waiting"
    async with store_backend.open() as store, ActorSystem(store) as system:
        summary = await system.status(eid)
        assert summary.status == "waiting" and summary.wake_at is not None
        due = summary.wake_at.timestamp()
        worker = await anyio.open_process([sys.executable, str(CHILD), "worker", *args], env=ENV)
        try:
            assert (await _json_line(worker)).get("ready")
            ready = time.time()
            await until_status(system, eid, "completed", timeout=60)
            await anyio.sleep(1.0)  # a second wake, were there one, would show in this time
        finally:
            worker.send_signal(signal.SIGKILL)
            with anyio.fail_after(30):
                await worker.wait()
        after = [line for line in _ledger(tmp_path) if line[0] == eid and line[1] == "after"]
        assert len(after) == 1  # woken exactly once
        woke = float(after[0][3])
        assert woke >= due - 0.05
        assert woke - max(due, ready) <= 1.5, (woke - due, ready - due)
        rows = await system.history(eid)
        assert [row.step_type for row in rows].count(WAKE) == 1
        assert await _completed(store, eid)


async def _completed(store: Store, execution_id: str) -> bool:
    newest = await store.latest(execution_id)
    return newest is not None and newest.step_type == "run_end" and newest.status == "completed"


async def test_events_of_a_wait_a_consumed_signal_and_a_wake(store_backend: Backend) -> None:
    from actors.events import SignalConsumed, Waiting, Woken, decode_event, encode_event

    log: list[Any] = []
    agent = _waiter(log)
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        ref = await system.spawn(agent, "wait")
        assert (await ref.result()).status == "waiting"
        with anyio.fail_after(10):
            leg = [event async for event in system.ref(ref.execution_id).events(since=0)]
        assert isinstance(leg[-1], Waiting) and leg[-1].name == "go"  # the iterator ends at the rest
        await system.signal(ref.execution_id, "go", [1, 2])
        await until_status(system, ref.execution_id, "completed")
        with anyio.fail_after(10):
            events = [event async for event in system.ref(ref.execution_id).events(since=0)]
        consumed = [e for e in events if isinstance(e, SignalConsumed)]
        assert [(e.name, e.payload) for e in consumed] == [("go", [1, 2])]
        assert [type(e).__name__ for e in events].count("Waiting") == 1
        assert decode_event(encode_event(consumed[0])) == consumed[0]
        assert not [e for e in events if isinstance(e, Woken)]


async def test_prune_keeps_a_waiting_run_and_unconsumed_signals(store_backend: Backend) -> None:
    from datetime import timedelta

    log: list[Any] = []
    agent = _waiter(log, name="later")
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        ref = await system.spawn(agent, "wait")
        assert (await ref.result()).status == "waiting"
        await system.signal(ref.execution_id, "other", 1)  # not what it waits for: stays unconsumed
        before = await system.history(ref.execution_id)
        await anyio.sleep(0.05)
        await system.prune(timedelta(0))
        assert [r.seq for r in await system.history(ref.execution_id)] == [r.seq for r in before]
        assert [(s.name, s.payload) for s in await store.signals(ref.execution_id)] == [("other", 1)]
        await system.signal(ref.execution_id, "later", 2)
        await until_status(system, ref.execution_id, "completed")
        assert log[-1] == ("after", Signal("later", 2))


async def test_a_signal_row_carries_the_runs_usage_total(store_backend: Backend) -> None:
    """A woken run goes on with its usage total: the rows after the wake carry the tokens billed
    before it, so the run's result and status still count them."""

    @tool
    async def wait_for_go() -> str:
        """Wait for the signal."""
        got = await wait_signal("go")
        return "nothing" if got is None else json.dumps(got.payload)

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"got {messages[-1].content}"
        return ModelReply(
            tool_calls=[ToolCall("wait_for_go", {})], usage=Usage(input_tokens=7, output_tokens=3)
        )

    agent = Agent("billed", FunctionModel(model), tools=[wait_for_go])
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        ref = await system.spawn(agent, "wait")
        assert (await ref.result()).status == "waiting"
        await system.signal(ref.execution_id, "go", 1)
        await until_status(system, ref.execution_id, "completed")
        rows = await system.history(ref.execution_id)
    billed = {"input_tokens": 7, "output_tokens": 3}
    after = rows[[row.step_type for row in rows].index(SIGNAL) :]
    assert [row.step_type for row in after] == [SIGNAL, "llm_call", "run_end"]
    assert [row.state_snapshot.get("usage") for row in after] == [billed, billed, billed]
