"""The owner process of the cross-process cancel test.

Usage: ``python _cancel_child.py BACKEND TARGET SCHEMA WORKDIR``. Spawns run ``run-c`` of
``cancel-charge``: one tool call that touches ``WORKDIR/entered``, sleeps 3 s, then charges
through ``@idempotent`` (appending to ``WORKDIR/charges``); the tool is async, or a sync one in a
worker thread when ``CANCEL_TOOL=sync`` (``sync-keyed``: its charge has an explicit key). Prints one JSON line with the run's
outcome (a status, or the error that stopped it) and the seconds since the tool was entered.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import anyio

from actors import ActorSystem, Agent, idempotent, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import PostgresStore, SQLiteStore, Store

NAME = "cancel-charge"
#: How long the tool sleeps before its charge.
SLEEP = 3.0


def agent(workdir: Path, *, sync: bool = False, keyed: bool = False) -> Agent:
    """One ``process`` tool call that sleeps before it charges, then an answer."""

    def charged(order: str) -> str:
        with (workdir / "charges").open("a") as out:
            out.write(order + "\n")
        return f"charged {order}"

    if sync:
        charge_now = idempotent(key=lambda order: order)(charged) if keyed else idempotent(charged)

        @tool
        def process(order: str) -> str:
            """Sleep, then charge an order (in a worker thread)."""
            (workdir / "entered").write_text(str(time.time()))
            time.sleep(SLEEP)
            return charge_now(order)

    else:

        @idempotent
        async def charge(order: str) -> str:
            return charged(order)

        @tool
        async def process(order: str) -> str:
            """Sleep, then charge an order."""
            (workdir / "entered").write_text(str(time.time()))
            await anyio.sleep(SLEEP)
            return await charge(order)

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"done: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("process", {"order": messages[-1].content})])

    return Agent(NAME, FunctionModel(model), tools=[process])


def open_store(backend: str, target: str, schema: str) -> Store:
    return SQLiteStore(target) if backend == "sqlite" else PostgresStore(target, schema=schema)


async def main(backend: str, target: str, schema: str, workdir: str) -> None:
    kind = os.environ.get("CANCEL_TOOL", "async")
    runner = agent(Path(workdir), sync=kind.startswith("sync"), keyed=kind == "sync-keyed")
    async with open_store(backend, target, schema) as store, ActorSystem(store, runners=[runner]) as system:
        ref = await system.spawn(runner, "o1", execution_id="run-c")
        try:
            outcome = (await ref.result(timeout=30)).status
        except Exception as error:
            outcome = type(error).__name__
        entered = float((Path(workdir) / "entered").read_text())
        print(json.dumps({"outcome": outcome, "stopped_at": time.time(), "entered": entered}), flush=True)
        await anyio.sleep(SLEEP)  # time for a charge, if the tool were not stopped


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:], backend=os.environ.get("TETHER_TEST_LOOP", "asyncio"))
