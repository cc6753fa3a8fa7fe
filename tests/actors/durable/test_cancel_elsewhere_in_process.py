"""A cancel by another store of the same database reaches a sync tool's thread, in one process.

The second ``SQLiteStore`` is another owner, as another process would be. The owner's sync tool
waits in its worker thread; the other store's system cancels the run; the owner's run stops and its
thread, abandoned, is refused its ``@idempotent`` charge when it gets there (with the default key
and with ``key=``), so no charge happens. (``test_cancel_elsewhere.py`` shows the same across real
processes.)
"""

from __future__ import annotations

import threading
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from actors import ActorSystem, Agent, idempotent, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import RUN_END, SQLiteStore

pytestmark = pytest.mark.anyio

LIMIT = 20.0


@pytest.mark.parametrize("keyed", [False, True])
async def test_an_abandoned_sync_tool_is_refused_its_charge(tmp_path: Path, keyed: bool) -> None:
    entered, go, done = threading.Event(), threading.Event(), threading.Event()
    charged: list[str] = []
    refused: list[BaseException] = []

    def charged_once(order: str) -> str:
        charged.append(order)
        return f"charged {order}"

    charge = idempotent(key=lambda order: order)(charged_once) if keyed else idempotent(charged_once)

    @tool
    def process(order: str) -> str:
        """Wait, then charge an order (in a worker thread)."""
        entered.set()
        go.wait(LIMIT)
        try:
            return str(charge(order))
        except BaseException as error:
            refused.append(error)
            raise
        finally:
            done.set()

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"done: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("process", {"order": str(messages[-1].content)})])

    agent = Agent("cancelled", FunctionModel(model), tools=[process])
    path = tmp_path / "t.db"
    async with SQLiteStore(path) as store, ActorSystem(store, runners=[agent]) as owner:
        ref = await owner.spawn(agent, "o1", execution_id="run-c")
        with anyio.fail_after(LIMIT):
            await anyio.to_thread.run_sync(entered.wait)
        async with SQLiteStore(path) as other_store, ActorSystem(other_store) as other:
            cancelled = await other.cancel("run-c", "operator")
        assert cancelled.status == "failed"
        with pytest.raises(Exception):  # noqa: B017 (the owner stopped; which refusal is not the point)
            await ref.result(timeout=LIMIT)
        go.set()  # the abandoned thread reaches its charge only now
        with anyio.fail_after(LIMIT):
            await anyio.to_thread.run_sync(done.wait)
        rows = await owner.history("run-c")
    assert charged == []
    assert len(refused) == 1 and "run-c" in str(refused[0]), refused
    assert [(r.step_type, r.status) for r in rows if r.step_type == RUN_END] == [(RUN_END, "failed")]
