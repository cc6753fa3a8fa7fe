"""MCP tool calls across real processes: a pause resumed elsewhere, a crash inside a destructive tool,
a server over streamable HTTP."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from _mcp_common import SERVER, calls
from conftest import stop_processes

from actors import ActorSystem, Agent
from actors.mcp import MCPServer
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import HITL_PAUSE, RECOVER, TOOL_CALL, SQLiteStore

pytestmark = pytest.mark.anyio

CHILD = Path(__file__).with_name("_mcp_child.py")
ROOT = Path(__file__).resolve().parents[3]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(CHILD.parent)])}


async def _child(*args: str) -> dict[str, Any]:
    """Run the child to its end (bounded) and read the result it prints."""
    with anyio.fail_after(120):
        done = await anyio.run_process([sys.executable, str(CHILD), *args], env=ENV, check=False)
    assert done.returncode == 0, done.stderr.decode()
    result: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return result


def _pids(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if line.startswith("pid ")]


async def test_a_pause_after_an_mcp_call_resumes_in_another_process(tmp_path: Path) -> None:
    db, log = str(tmp_path / "t.db"), tmp_path / "calls.log"
    paused = await _child("spawn", db, str(log), "p1", "pause")
    assert paused["status"] == "paused"
    assert calls(log) == ["lookup k1"]
    done = await _child("resume", db, str(log), "p1")
    assert done == {"status": "completed", "output": "done: value of k1 | approved", "error": None}
    assert calls(log) == ["lookup k1"]  # the MCP call was not repeated
    assert len(set(_pids(log))) == 2  # the resuming process launched its own server
    async with SQLiteStore(db) as store:
        rows = await store.history("p1")
    assert [r.node_id for r in rows if r.step_type in (TOOL_CALL, HITL_PAUSE)] == [
        "turn:0/tool:lookup",
        "turn:1/tool:approve",
        "turn:1/tool:approve",
    ]


async def test_a_crash_inside_a_destructive_tool_is_not_called_again(tmp_path: Path) -> None:
    db, log = str(tmp_path / "t.db"), tmp_path / "calls.log"
    hold = tmp_path / "calls.log.hold"  # the server waits while it exists
    hold.touch()
    command = [sys.executable, str(CHILD), "spawn", db, str(log), "d1", "delete"]
    process = await anyio.open_process(command, env=ENV, stdout=subprocess.DEVNULL)
    try:
        with anyio.fail_after(60):
            while "delete_record k9" not in calls(log):  # noqa: ASYNC110 - the server writes it
                await anyio.sleep(0.01)
    finally:
        process.send_signal(signal.SIGKILL)  # while the server is inside the tool
        await process.wait()
    server = int(_pids(log)[0].split()[1])
    os.kill(server, signal.SIGKILL)  # its server would otherwise wait out the hold
    hold.unlink()
    done = await _child("recover", db, str(log), "d1")
    assert done["status"] == "completed", done
    assert done["output"].startswith("model read: Tool 'delete_record' failed: SideEffectInDoubt:")
    assert "'delete_record' on MCP server 'records' may already have run" in done["output"]
    assert calls(log) == ["delete_record k9"]  # called once, never again
    async with SQLiteStore(db) as store:
        rows = await store.history("d1")
    assert [r.step_type for r in rows][:3] == ["llm_call", TOOL_CALL, RECOVER]


async def test_a_server_over_streamable_http_with_headers(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**ENV, "MCP_TEST_LOG": str(log)}
    server = await anyio.open_process([sys.executable, str(SERVER), "http", str(port)], env=env)
    try:
        with anyio.fail_after(60):
            while True:
                try:
                    await (await anyio.connect_tcp("127.0.0.1", port)).aclose()
                    break
                except OSError:
                    await anyio.sleep(0.05)

        def model(messages: list[Message]) -> str | ModelReply:
            if messages[-1].role == "user":
                return ModelReply(tool_calls=[ToolCall("lookup", {"key": "h1"}), ToolCall("whoami", {})])
            return " | ".join(m.content for m in messages if m.role == "tool")

        remote = MCPServer("records", url=f"http://127.0.0.1:{port}/mcp", headers={"x-caller": "desk-7"})
        agent = Agent("remote", FunctionModel(model), tools=[remote])
        async with ActorSystem(SQLiteStore(tmp_path / "t.db")) as system:
            result = await (await system.spawn(agent, "over http")).result(timeout=60)
    finally:
        await stop_processes([server])
    assert result.status == "completed", result.error
    assert result.output == "value of h1 | desk-7"
    assert calls(log) == ["lookup h1"]
