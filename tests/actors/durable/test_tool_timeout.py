"""``@tool(timeout=seconds)`` in a durable run: a hung tool is a tool error the model reads, and the
run goes on to its answer instead of holding its run (and its ownership lock) forever.

An async tool is cancelled at its deadline; a sync one is abandoned in its worker thread and what it
returns later is ignored (it reaches neither the model nor a row). Both backends.
"""

from __future__ import annotations

import threading
import time

import anyio
import pytest
from conftest import Backend

from actors import ActorSystem, Agent, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall

pytestmark = pytest.mark.anyio


async def test_hung_tools_time_out_into_errors_the_model_reads(store_backend: Backend) -> None:
    release = threading.Event()
    cancelled = anyio.Event()

    @tool(timeout=0.2)
    async def hangs_async() -> str:
        """Never answers."""
        try:
            await anyio.sleep(3600)
        finally:
            cancelled.set()
        return "never"

    @tool(timeout=0.2)
    def hangs_sync() -> str:
        """Blocks its thread until released."""
        release.wait(30)
        return "late result"

    def model(messages: list[Message]) -> ModelReply | str:
        if messages[-1].role == "tool":
            return " | ".join(m.content for m in messages if m.role == "tool")
        return ModelReply(tool_calls=[ToolCall("hangs_async", {}), ToolCall("hangs_sync", {})])

    agent = Agent("patient", FunctionModel(model), tools=[hangs_async, hangs_sync])
    store = store_backend.open()
    started = time.monotonic()
    try:
        with anyio.fail_after(20):
            async with store, ActorSystem(store, runners=[agent]) as system:
                result = await (await system.spawn(agent, "go", execution_id="hung")).result(timeout=15)
                elapsed = time.monotonic() - started
                assert result.status == "completed"
                assert result.output == (
                    "Tool 'hangs_async' timed out after 0.2s | Tool 'hangs_sync' timed out after 0.2s"
                )
                assert cancelled.is_set()  # the async tool was cancelled, not left running
                assert elapsed < 10, elapsed  # two 0.2 s deadlines, not the tools' own hours
                release.set()  # the abandoned thread returns now; nobody reads its result
                await anyio.sleep(0.2)
                rows = await store.history("hung")
                assert [r.node_id for r in rows] == [
                    "turn:0",
                    "turn:0/tool:hangs_async",
                    "turn:0/tool:hangs_sync",
                    "turn:1",
                    "run_end",
                ]
                assert "late result" not in repr(rows)
                assert await store.try_lock("hung")  # the run let go of its ownership lock
                await store.unlock("hung")
    finally:
        release.set()
