"""What watching tool calls for a cancel from another process costs, and that it still stops them.

A system watches its running tool calls for a cancel written by another process with one task of
its own: a tool call starts no task, so many short calls in flight cost no more tasks than one. A
call that runs for long is still watched while short ones come and go beside it, and a cancel from
another store of the same database (standing for another process) stops it within about a second,
on both backends.
"""

from __future__ import annotations

import asyncio
import time

import anyio
import pytest
from conftest import Backend

from actors import ActorSystem, Agent, RunRef, tool
from actors.lowlevel import tool_watch_module
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import FAILED, RUN_END

pytestmark = pytest.mark.anyio

LIMIT = 20.0


def one_tool_agent(name: str, work: object, model: object = None) -> Agent:
    def answer(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"done: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("work", {"item": str(messages[-1].content)})])

    return Agent(name, FunctionModel(model or answer), tools=[work])


async def cancel_elsewhere(store_backend: Backend, long_run: RunRef) -> float:
    """Cancel ``long_run`` through another store of its database (standing for another process);
    the seconds until its owner stopped it."""
    async with store_backend.open() as other_store, ActorSystem(other_store) as other:
        cancelled_at = time.monotonic()
        assert (await other.cancel(long_run.execution_id, reason="operator")).status == "failed"
    with pytest.raises(Exception):  # noqa: B017 (the owner stops; which refusal is not the point)
        await long_run.result(timeout=LIMIT)
    return time.monotonic() - cancelled_at


class Gate:
    """Holds ``runs`` callers until all are in, and counts the tasks running then."""

    def __init__(self, runs: int) -> None:
        self.runs = runs
        self.inside = 0
        self.open = anyio.Event()
        self.tasks = 0

    async def enter(self) -> None:
        self.inside += 1
        if self.inside == self.runs:
            # Under trio a store runs its loop callbacks in a task that comes and goes: not counted.
            self.tasks = sum(task.name != "tether store callbacks" for task in anyio.get_running_tasks())
            self.open.set()
        await self.open.wait()


async def test_tool_calls_in_flight_start_no_task_of_their_own(
    store_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While 8 runs are inside their tool calls, at most one task more runs than while they are
    inside their first model calls: watching the calls for a cancel elsewhere costs no task per call
    (on asyncio a loop timer each; on trio one task of the system while calls run). However slow
    the machine, no call here runs long enough to be given a task that watches its run."""
    monkeypatch.setattr(tool_watch_module, "CANCEL_WATCH", LIMIT * 2)
    runs = 8
    in_model, in_tool = Gate(runs), Gate(runs)

    async def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"done: {messages[-1].content}"
        await in_model.enter()
        return ModelReply(tool_calls=[ToolCall("work", {"item": str(messages[-1].content)})])

    @tool
    async def work(item: str) -> str:
        """Wait until every run is inside its tool call."""
        await in_tool.enter()
        return f"worked on {item}"

    agent = one_tool_agent("gated", work, model)
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        with anyio.fail_after(LIMIT):
            # No result is asked with a timeout here: an ask's deadline has a task of its own.
            refs = [await system.spawn(agent, str(i), execution_id=f"gated-{i}") for i in range(runs)]
            for ref in refs:
                assert (await ref.result()).status == "completed"
    assert in_model.tasks <= in_tool.tasks <= in_model.tasks + 1, (in_model.tasks, in_tool.tasks)


async def test_a_long_tool_call_is_stopped_by_a_cancel_elsewhere_while_short_calls_come_and_go(
    store_backend: Backend,
) -> None:
    long_started = anyio.Event()
    stopped: list[str] = []

    @tool
    async def work(item: str) -> str:
        """The long call waits (until cancelled); the others are done at once."""
        if item == "long":
            long_started.set()
            try:
                await anyio.sleep(LIMIT)
            except anyio.get_cancelled_exc_class():
                stopped.append(item)
                raise
        return f"worked on {item}"

    agent = one_tool_agent("mixed", work)
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as owner:
        long_run = await owner.spawn(agent, "long", execution_id="long")
        with anyio.fail_after(LIMIT):
            await long_started.wait()
            # Short calls come and go for about as long as the watch waits before it looks.
            short = 0
            began = time.monotonic()
            while time.monotonic() - began < 0.7:
                ref = await owner.spawn(agent, "short", execution_id=f"short-{short}")
                assert (await ref.result(timeout=LIMIT)).status == "completed"
                short += 1
            took = await cancel_elsewhere(store_backend, long_run)
        rows = await owner.history("long")
    assert stopped == ["long"]
    assert took < 2.0, f"the cancel reached the long call after {took:.2f} s"
    assert [(r.step_type, r.status) for r in rows if r.step_type == RUN_END] == [(RUN_END, FAILED)]


def test_a_cancel_elsewhere_stops_a_long_tool_call_on_a_loop_anyio_did_not_start(
    store_backend: Backend,
) -> None:
    """Under a plain ``asyncio.run`` (where neither ``anyio.run`` nor the test runner has told anyio
    which backend runs), a long call's watch starts from a timer of the loop, a plain callback: the
    cancel from another store still stops the call, and the loop is handed no error."""
    errors: list[dict[str, object]] = []
    stopped: list[str] = []

    @tool
    async def work(item: str) -> str:
        """Wait until cancelled."""
        try:
            await asyncio.sleep(LIMIT)
        except asyncio.CancelledError:
            stopped.append(item)
            raise
        return f"worked on {item}"

    agent = one_tool_agent("plain", work)

    async def main() -> float:
        asyncio.get_running_loop().set_exception_handler(lambda _, context: errors.append(context))
        async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as owner:
            long_run = await owner.spawn(agent, "long", execution_id="long")
            await asyncio.sleep(0.1)  # the call is in its sleep (the run's rows show it below)
            took = await cancel_elsewhere(store_backend, long_run)
            rows = await owner.history("long")
        assert [row.node_id for row in rows][:2] == ["turn:0", "turn:0/tool:work"], rows
        return took

    took = asyncio.run(main())
    assert errors == []
    assert stopped == ["long"]
    assert took < 2.0, f"the cancel reached the long call after {took:.2f} s"
