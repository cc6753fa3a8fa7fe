"""A child process for the status tests: it starts a run whose tool crashes or holds the run.

Usage: ``python _status_child.py MODE BACKEND TARGET SCHEMA WORKDIR EXECUTION_ID``. MODE ``crash``:
the tool kills the process with ``os._exit(17)`` mid-step. MODE ``hold``: the tool writes
``WORKDIR/entered`` and waits (at most 60 s) for ``WORKDIR/release``; the run then completes.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio

from actors import ActorSystem, Agent, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import PostgresStore, SQLiteStore, Store

#: The runner's name, as the parent sees it in the rows.
NAME = "status-child"


def agent(mode: str, workdir: Path) -> Agent:
    """One tool call, then an answer quoting the tool's result."""

    @tool
    async def work() -> str:
        """Crash, or wait until released."""
        if mode == "crash":
            os._exit(17)
        (workdir / "entered").touch()
        with anyio.fail_after(60):
            while not (workdir / "release").exists():  # noqa: ASYNC110 (another process makes it)
                await anyio.sleep(0.01)
        return "released"

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"done: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("work", {})])

    return Agent(NAME, FunctionModel(model), tools=[work])


async def main(mode: str, backend: str, target: str, schema: str, workdir: str, execution_id: str) -> None:
    store: Store = SQLiteStore(target) if backend == "sqlite" else PostgresStore(target, schema=schema)
    runner = agent(mode, Path(workdir))
    async with store, ActorSystem(store, runners=[runner]) as system:
        ref = await system.spawn(runner, "work please", execution_id=execution_id)
        result = await ref.result(timeout=90)
        print(result.status, result.output, flush=True)


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:7], backend=os.environ.get("TETHER_TEST_LOOP", "asyncio"))
