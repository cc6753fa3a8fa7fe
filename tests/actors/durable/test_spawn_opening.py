"""``spawn`` takes the run and writes its first row from the caller's own task, then starts the actor.

So an awaited ``spawn`` queues its row in the turn of the loop it is called in and wakes as that row
commits. What must hold around it: the row is the caller's, ``RunExists`` comes from ``spawn``
itself (a used id, a spawn of the id in flight), a caller cancelled while its row is written leaves
a run that goes on, and a system that exits right after ``spawn`` returned leaves a run the fleet
can take. Every test is time-bounded.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from conftest import until_run

from actors import ActorSystem, Agent, RunExists, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import RUN_END, Checkpoint, SQLiteStore, Store

pytestmark = pytest.mark.anyio

#: Bound on one test's body (seconds); a hang fails instead of stalling the suite.
LIMIT = 20.0


class GatedStore(SQLiteStore):
    """A SQLite store that records which task appends each first row, and can hold those appends
    until ``gate`` is set (the caller of ``spawn`` then waits inside its first row's write)."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.gate = anyio.Event()
        self.gate.set()
        self.holding = anyio.Event()
        self.first_rows: list[int] = []  #: the id of each first row's task

    async def append(self, row: Checkpoint) -> None:
        if row.seq == 0:
            self.first_rows.append(anyio.get_current_task().id)
            if not self.gate.is_set():
                self.holding.set()
                await self.gate.wait()
        await super().append(row)


@asynccontextmanager
async def opened(path: Path) -> AsyncIterator[GatedStore]:
    store = GatedStore(str(path))
    await store.setup()
    try:
        yield store
    finally:
        await store.close()


def answering_agent() -> Agent:
    """An agent that calls one tool and answers with what it said."""

    @tool
    def lookup() -> str:
        """Look it up."""
        return "found"

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"answer: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("lookup", {})])

    return Agent("answerer", FunctionModel(model), tools=[lookup])


def once_blocking_agent() -> tuple[Agent, anyio.Event]:
    """An agent whose tool blocks (until cancelled) the first time it runs, and answers after."""
    entered = anyio.Event()

    @tool
    async def wait() -> str:
        """Wait the first time."""
        if not entered.is_set():
            entered.set()
            await anyio.sleep_forever()
        return "done"

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"answer: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("wait", {})])

    return Agent("waiter", FunctionModel(model), tools=[wait]), entered


async def rows_of(store: Store, execution_id: str) -> list[str]:
    return [row.node_id for row in await store.history(execution_id)]


async def ended(store: Store, execution_id: str) -> list[str]:
    """The run's rows once its ``run_end`` is written (waited for on the store's watch of the run)."""
    return await until_run(
        store,
        execution_id,
        functools.partial(rows_of, store, execution_id),
        lambda rows: rows[-1:] == [RUN_END],
    )


async def test_the_first_row_is_appended_by_the_caller_of_spawn(sqlite_path: Path) -> None:
    agent = answering_agent()
    with anyio.fail_after(LIMIT):
        async with opened(sqlite_path) as store, ActorSystem(store, runners=[agent]) as system:
            refs = [await system.spawn(agent, "hi", execution_id=f"r{i}") for i in range(3)]
            assert store.first_rows == [anyio.get_current_task().id] * 3
            for ref in refs:
                result = await ref.result(timeout=5)
                assert (result.status, result.output) == ("completed", "answer: found")
                assert await rows_of(store, ref.execution_id) == [
                    "turn:0",
                    "turn:0/tool:lookup",
                    "turn:1",
                    "run_end",
                ]


async def test_a_spawn_of_an_id_in_flight_raises_run_exists_at_once(sqlite_path: Path) -> None:
    agent = answering_agent()
    with anyio.fail_after(LIMIT):
        async with opened(sqlite_path) as store, ActorSystem(store, runners=[agent]) as system:
            store.gate = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(functools.partial(system.spawn, agent, "first", execution_id="same"))
                await store.holding.wait()
                with pytest.raises(RunExists, match="'same'"):
                    await system.spawn(agent, "second", execution_id="same")
                store.gate.set()
            assert await ended(store, "same") == ["turn:0", "turn:0/tool:lookup", "turn:1", "run_end"]
            with pytest.raises(RunExists, match="'same'"):
                await system.spawn(agent, "third", execution_id="same")
            assert (await system.ref("same").result()).output == "answer: found"


async def test_a_spawn_cancelled_while_its_first_row_is_written_leaves_a_run_that_goes_on(
    sqlite_path: Path,
) -> None:
    agent = answering_agent()
    with anyio.fail_after(LIMIT):
        async with opened(sqlite_path) as store, ActorSystem(store, runners=[agent]) as system:
            store.gate = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(functools.partial(system.spawn, agent, "go", execution_id="cut"))
                await store.holding.wait()
                tg.cancel_scope.cancel()
                store.gate.set()
            assert await ended(store, "cut") == ["turn:0", "turn:0/tool:lookup", "turn:1", "run_end"]
            assert (await system.ref("cut").result()).output == "answer: found"


async def test_a_system_that_exits_right_after_spawn_leaves_a_run_the_fleet_takes(sqlite_path: Path) -> None:
    agent, entered = once_blocking_agent()
    with anyio.fail_after(LIMIT):
        async with opened(sqlite_path) as store:
            async with ActorSystem(store, runners=[agent]) as system:
                ref = await system.spawn(agent, "go", execution_id="left")
            # The actor started as the system stopped: it ran until its stop timeout cut its tool.
            assert entered.is_set()
            assert await rows_of(store, "left") == ["turn:0", "turn:0/tool:wait"]
            with pytest.raises(Exception, match="stopped"):
                await ref.result(timeout=1)
            async with ActorSystem(store, runners=[agent]) as again:
                assert await again.sweep() == 1
                assert (await again.ref("left").result()).output == "answer: done"
                kinds = [row.step_type for row in await store.history("left")]
                assert kinds == ["llm_call", "tool_call", "recover", "llm_call", "run_end"]
