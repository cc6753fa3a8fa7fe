"""The runner of the PostgreSQL restart stress test: ``tether worker --runner _outage_runner:agent``.

One tool call per run: ``process`` waits a little (so a restart finds tools in flight), then charges
through ``@idempotent``; the charge appends ``<order> <idempotency_key()> <pid>`` to the ledger file
named by ``$TETHER_TEST_LEDGER`` and fsyncs it before it returns.
"""

from __future__ import annotations

import os
import random

import anyio
import anyio.to_thread

from actors import Agent, idempotency_key, idempotent, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall

NAME = "outage-charge"


def _record(line: str) -> None:
    fd = os.open(os.environ["TETHER_TEST_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


@idempotent
async def charge(order: str) -> str:
    await anyio.to_thread.run_sync(_record, f"{order} {idempotency_key()} {os.getpid()}\n")
    await anyio.sleep(0.01)  # a body that lost its run's lock here still stores its result
    return f"charged {order}"


@tool
async def process(order: str) -> str:
    """Charge an order after a short wait."""
    await anyio.sleep(random.uniform(0.05, 0.4))
    done = await charge(order)
    await anyio.sleep(random.uniform(0.0, 0.1))
    return done


def _model(messages: list[Message]) -> str | ModelReply:
    if messages[-1].role == "tool":
        return f"done: {messages[-1].content}"
    return ModelReply(tool_calls=[ToolCall("process", {"order": messages[-1].content})])


agent = Agent(NAME, FunctionModel(_model), tools=[process])
