"""A child process for the MCP tests: one agent, ``desk``, with the test MCP server and a local tool.

Usage: ``python _mcp_child.py MODE DB LOG EXECUTION_ID [TASK]``; prints the run's result as JSON
(``status``, ``output``, ``error``).

The model reads the task (the first user message). ``pause``: it calls ``lookup`` (MCP), then the
local ``approve`` (which pauses for a human), then answers ``done: <the tools' results>``.
``delete``: it calls ``delete_record`` (MCP, destructive), then answers ``model read: <result>``.

Modes: ``spawn`` starts the run with TASK and waits for its result (a ``delete`` run never ends
while the server's hold file exists: the test kills this process); ``resume`` resumes the paused
run with an approval; ``recover`` recovers the run after a crash.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
from _mcp_common import records

from actors import ActorSystem, Agent, Resume, interrupt, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import SQLiteStore


@tool
def approve() -> str:
    """Ask a human to approve the lookup's result."""
    decision = interrupt("approve the record?", {})
    return "approved" if decision.approved else "rejected"


def model(messages: list[Message]) -> str | ModelReply:
    task = next(m.content for m in messages if m.role == "user")
    results = [m.content for m in messages if m.role == "tool"]
    if task == "pause":
        if not results:
            return ModelReply(tool_calls=[ToolCall("lookup", {"key": "k1"})])
        if len(results) == 1:
            return ModelReply(tool_calls=[ToolCall("approve", {})])
        return "done: " + " | ".join(results)
    if not results:
        return ModelReply(tool_calls=[ToolCall("delete_record", {"key": "k9"})])
    return f"model read: {results[-1]}"


async def main(mode: str, db: str, log: str, execution_id: str, task: str = "") -> None:
    agent = Agent("desk", FunctionModel(model), tools=[records(Path(log)), approve])
    async with ActorSystem(SQLiteStore(db), runners=[agent]) as system:
        if mode == "spawn":
            run = await system.spawn(agent, task, execution_id=execution_id)
            result = await run.result(timeout=120)
        elif mode == "resume":
            result = await system.resume(execution_id, Resume(approved=True), timeout=120)
        else:
            result = await system.resume(execution_id, timeout=120)
    print(json.dumps({"status": result.status, "output": result.output, "error": result.error}), flush=True)


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:])
