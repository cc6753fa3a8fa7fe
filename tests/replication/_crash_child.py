"""A child process for the restore tests: starts a refund whose tool waits until the plane holds
every row written so far, then kills its own process with SIGKILL (a crash mid-step)."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import anyio

from actors import ActorSystem, Agent, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from replication import Replicator
from stores import SQLiteStore


def respond(messages: list[Message]) -> str | ModelReply:
    if any(m.role == "tool" for m in messages):
        return f"done: {messages[-1].content}"
    return ModelReply(tool_calls=[ToolCall("refund", {"order": "1042", "amount": 20})])


def build(on_call: Any) -> Agent:
    @tool
    async def refund(order: str, amount: int) -> dict[str, Any]:
        """Refund ``amount`` on ``order``."""
        await on_call()
        return {"refunded": True, "order": order, "amount": amount}

    return Agent("crashy", FunctionModel(respond), tools=[refund])


async def main(url: str, path: str, execution_id: str) -> None:
    store = SQLiteStore(path)

    async def crash() -> None:
        with anyio.fail_after(20):
            while await store.fetch_unsynced(10):  # noqa: ASYNC110 (the replicator's work)
                await anyio.sleep(0.02)
        os.kill(os.getpid(), signal.SIGKILL)

    agent = build(crash)
    async with ActorSystem(store, runners=[agent], replicator=Replicator(url, "key-a")) as system:
        ref = await system.spawn(agent, "refund please", execution_id=execution_id)
        await ref.result(timeout=30)


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:4])
