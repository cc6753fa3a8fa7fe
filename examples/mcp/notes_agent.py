"""An agent with MCP tools: it tidies a notes file through the MCP server of ``notes_server.py``.

The agent offers its model the server's tools (``actors.mcp.MCPServer``, launched over stdio) and
asks for a typed answer (``output_type=Tidied``). The model lists the notes, reads the stale one,
and deletes it; the server asks for a confirmation (an MCP elicitation), so the run pauses like any
``interrupt()``. A ``Resume`` whose metadata is the answer (``{"confirm": true}``) continues it, in
this process or any other with the same store; the resumed run launches its own server. The final
answer is JSON, validated as ``Tidied`` (``RunResult.value``). Offline: the model is a
deterministic ``FunctionModel``.

Run: ``python examples/mcp/notes_agent.py`` (a scratch directory; ``--dir PATH`` to keep it;
``--backend trio`` for anyio's trio loop).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
import msgspec

from actors import ActorSystem, Agent, Resume
from actors.mcp import MCPServer
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import SQLiteStore

SERVER = Path(__file__).with_name("notes_server.py")


class Tidied(msgspec.Struct):
    """The agent's answer: what it deleted and what it kept."""

    deleted: list[str]
    kept: list[str]


def model(messages: list[Message], tools: list[dict[str, Any]]) -> str | ModelReply:
    """One scripted turn, from the conversation so far (the tools offered are in ``tools``)."""
    results = [m.content for m in messages if m.role == "tool"]
    if not results:
        return ModelReply(tool_calls=[ToolCall("list_notes", {})])
    if len(results) == 1:
        return ModelReply(tool_calls=[ToolCall("read_note", {"title": "old milk"})])
    if len(results) == 2:
        return ModelReply(tool_calls=[ToolCall("delete_note", {"title": "old milk"})])
    titles = results[0].splitlines()  # one text block per title
    deleted = ["old milk"] if results[-1].startswith("deleted") else []
    return msgspec.json.encode(Tidied(deleted, [t for t in titles if t not in deleted])).decode()


def build(workdir: Path) -> Agent:
    notes = MCPServer(
        "notes",
        command=[sys.executable, str(SERVER)],
        env={"NOTES_FILE": str(workdir / "notes.json"), "NOTES_LOG": str(workdir / "calls.log")},
    )
    return Agent("tidy", FunctionModel(model), tools=[notes], output_type=Tidied)


async def main(workdir: Path) -> None:
    (workdir / "notes.json").write_text(json.dumps({"old milk": "buy milk (2019)", "ideas": "write docs"}))
    agent = build(workdir)
    store = SQLiteStore(workdir / "notes.db")
    async with ActorSystem(store, runners=[agent]) as system:
        paused = await (await system.spawn(agent, "Tidy my notes", execution_id="tidy-1")).result(timeout=60)
        assert paused.pending is not None
        print(f"paused: {paused.pending.reason}: {paused.pending.context['message']}")
        done = await system.resume("tidy-1", Resume(approved=True, metadata={"confirm": True}), timeout=60)
        print(
            f"{done.status}: {done.value!r}" if done.status == "completed" else f"{done.status}: {done.error}"
        )
        print("steps:", ", ".join(row.node_id for row in await system.history("tidy-1")))
    print("server calls:", ", ".join((workdir / "calls.log").read_text().split("\n")[:-1]))
    print("notes left:", ", ".join(json.loads((workdir / "notes.json").read_text())))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, help="where the notes, the log and the store go")
    parser.add_argument("--backend", default="asyncio", choices=["asyncio", "trio"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        anyio.run(main, args.dir or Path(scratch), backend=args.backend)
