"""``enqueue`` writes a run's first row as ``spawn`` does (the level's opening), then hands the run to
its queue instead of starting an actor.

What must hold: the row is the one a spawn of the same agent and input writes, no actor is left in
the process, and an agent with tool sources gets its row at once (its tools are listed and recorded
by the worker that takes it). Every test is time-bounded.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import Backend

from actors import ActorSystem, Agent, tool
from actors.lowlevel import RECORD, SourceSession, ToolOutcome, ToolSource
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import LLM_CALL, Checkpoint, SQLiteStore

pytestmark = pytest.mark.anyio

#: Bound on one test's body (seconds); a hang fails instead of stalling the suite.
LIMIT = 20.0


def _reply(messages: list[Message]) -> str:
    return f"done: {messages[-1].content}"


def _agent() -> Agent:
    @tool
    def lookup(order: str) -> str:
        """Look an order up."""
        return order

    return Agent("opener", FunctionModel(_reply), instructions="be brief", tools=[lookup], version="2")


def _written(row: Checkpoint) -> tuple[object, ...]:
    """What a first row says, without the run it belongs to."""
    return (
        row.seq,
        row.node_id,
        row.step_type,
        row.step_index,
        row.agent_path,
        row.runner,
        row.state_snapshot,
    )


async def test_an_enqueued_run_starts_with_the_row_a_spawn_writes(store_backend: Backend) -> None:
    agent = _agent()
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        with anyio.fail_after(LIMIT):
            spawned = await system.spawn(agent, "o1", execution_id="s1")
            await spawned.result(timeout=LIMIT)
            await system.enqueue(agent, "o1", execution_id="e1", queue="mail", key="k1")
            assert system.runtime.live_keyed() == []  # nothing drives it here
            (first,) = await store.history("e1")
            assert _written(first) == _written((await store.history("s1"))[0])
            assert first.step_type == LLM_CALL and first.node_id == "turn:0"
            found = await system.status("e1")
            assert (found.status, found.queue, found.key) == ("queued", "mail", "k1")


class _Session:
    """A connection that lists the tool ``lookup`` and answers it with ``found``."""

    async def list_tools(self) -> list[dict[str, Any]]:
        return [
            {
                "tool": "lookup",
                "description": "",
                "parameters": None,
                "destructive": False,
                "idempotent": False,
            }
        ]

    async def call(self, entry: dict[str, Any], arguments: dict[str, Any]) -> ToolOutcome:
        return ToolOutcome(content="found")


class _Source(ToolSource):
    """A tool source that counts its connections."""

    name = "srv"

    def __init__(self) -> None:
        self.connected = 0

    def connect(self) -> AbstractAsyncContextManager[SourceSession]:
        return self._open()

    @asynccontextmanager
    async def _open(self) -> AsyncIterator[SourceSession]:
        self.connected += 1
        yield _Session()

    def fingerprint(self) -> str:
        return "counted"


async def test_an_enqueue_of_an_agent_with_sources_writes_its_row_and_the_worker_lists_the_tools(
    sqlite_path: Path,
) -> None:
    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"read: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("lookup", {})])

    source = _Source()
    agent = Agent("lister", FunctionModel(model), tools=[source])
    async with SQLiteStore(sqlite_path) as store, ActorSystem(store, runners=[agent]) as system:
        with anyio.fail_after(LIMIT):
            await system.enqueue(agent, "go", execution_id="e2")
            (first,) = await store.history("e2")
            assert (first.node_id, first.step_type) == ("turn:0", LLM_CALL)
            assert RECORD not in first.state_snapshot and source.connected == 0
            assert await system.sweep() == 1
            result = await system.ref("e2").result(timeout=LIMIT)
            assert result.status == "completed" and result.output == "read: found", result
            rows = await store.history("e2")
            assert source.connected == 1
            assert [
                row.state_snapshot[RECORD][0]["name"] for row in rows if RECORD in row.state_snapshot
            ] == ["lookup"]
