"""MCP servers as tool sources: the tools offered and recorded, their calls, their names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _mcp_common import calls, records

from actors import ActorSystem, Agent, Resume, Supervisor, ToolNotFound, tool
from actors.mcp import MCPServer
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import SQLiteStore

pytestmark = pytest.mark.anyio


def _tool_names(tools: list[dict[str, Any]]) -> list[str]:
    return [t["function"]["name"] for t in tools if t.get("type") == "function"]


async def test_a_read_only_tool_runs_once_and_the_model_sees_its_schema(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    seen: list[list[dict[str, Any]]] = []

    def model(messages: list[Message], tools: list[dict[str, Any]]) -> str | ModelReply:
        seen.append(tools)
        if messages[-1].role == "user":
            return ModelReply(tool_calls=[ToolCall("lookup", {"key": "k1"})])
        return f"found: {messages[-1].content}"

    agent = Agent("reader", FunctionModel(model), tools=[records(log)])
    async with ActorSystem(SQLiteStore(tmp_path / "t.db")) as system:
        run = await system.spawn(agent, "look up k1")
        result = await run.result(timeout=60)
        history = await system.history(run.execution_id)
    assert result.status == "completed", result.error
    assert result.output == "found: value of k1"
    assert calls(log) == ["lookup k1"]  # the tool ran once
    offered = {t["function"]["name"]: t["function"] for t in seen[0]}
    assert set(offered) == {"lookup", "delete_record", "reindex", "ask_name", "echo", "whoami"}
    schema = offered["lookup"]["parameters"]
    assert schema["properties"]["key"]["type"] == "string"
    assert schema["required"] == ["key"]
    assert offered["lookup"]["description"].startswith("Look a record up by its key.")
    # The list the run saw is on its first row, and only there.
    recorded = history[0].state_snapshot["source_tools"]
    assert {e["name"] for e in recorded} == set(offered)
    entry = next(e for e in recorded if e["name"] == "lookup")
    assert entry["source"] == "records" and entry["destructive"] is False
    assert next(e for e in recorded if e["name"] == "delete_record")["destructive"] is True
    assert all("source_tools" not in row.state_snapshot for row in history[1:])


async def test_a_name_two_tools_share_is_prefixed_with_the_server(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    seen: list[list[str]] = []

    @tool
    def echo(text: str) -> str:
        """The agent's own echo."""
        return f"local says {text}"

    def model(messages: list[Message], tools: list[dict[str, Any]]) -> str | ModelReply:
        seen.append(_tool_names(tools))
        if messages[-1].role == "user":
            return ModelReply(
                tool_calls=[ToolCall("echo", {"text": "a"}), ToolCall("records__echo", {"text": "b"})]
            )
        return " | ".join(m.content for m in messages if m.role == "tool")

    agent = Agent("clash", FunctionModel(model), tools=[echo, records(log)])
    async with ActorSystem(SQLiteStore(tmp_path / "t.db")) as system:
        result = await (await system.spawn(agent, "echo twice")).result(timeout=60)
    assert result.status == "completed", result.error
    assert "echo" in seen[0] and "records__echo" in seen[0] and "lookup" in seen[0]
    assert result.output == "local says a | server says b"
    assert calls(log) == ["echo b"]


def _asker(messages: list[Message]) -> str | ModelReply:
    results = [m.content for m in messages if m.role == "tool"]
    if not results:
        return ModelReply(tool_calls=[ToolCall("ask_name", {})])
    return f"named: {results[-1]}"


@pytest.mark.parametrize(
    ("decision", "answer", "logged"),
    [
        (Resume(approved=True, metadata={"name": "Ada"}), "accept: Ada", "accept"),
        (Resume(approved=False), "decline: -", "decline"),
    ],
)
async def test_an_elicitation_pauses_the_run_and_the_resume_answers_it(
    tmp_path: Path, decision: Resume, answer: str, logged: str
) -> None:
    log = tmp_path / "calls.log"
    agent = Agent("asker", FunctionModel(_asker), tools=[records(log)])
    async with ActorSystem(SQLiteStore(tmp_path / "t.db"), runners=[agent]) as system:
        paused = await (await system.spawn(agent, "name the record", execution_id="e1")).result(timeout=60)
        assert paused.status == "paused", paused.error
        assert paused.pending is not None and paused.pending.reason == "elicitation"
        context = paused.pending.context
        assert context["server"] == "records" and context["tool"] == "ask_name"
        assert context["message"] == "What name goes on the record?"
        assert context["requestedSchema"]["properties"]["name"]["type"] == "string"
        assert calls(log) == []  # the tool's body waits for the answer
        done = await system.resume("e1", decision, timeout=60)
    assert done.status == "completed", done.error
    assert done.output == f"named: {answer}"
    assert calls(log) == [f"ask_name {logged}"]


async def test_a_resume_whose_server_lost_a_recorded_tool_raises_tool_not_found(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"

    def model(messages: list[Message]) -> str | ModelReply:
        if not any(m.role == "tool" for m in messages):
            return ModelReply(tool_calls=[ToolCall("lookup", {"key": "k"}), ToolCall("ask_name", {})])
        return "done"

    store = SQLiteStore(tmp_path / "t.db")
    agent = Agent("keeper", FunctionModel(model), tools=[records(log)])
    async with ActorSystem(store, runners=[agent]) as system:
        paused = await (await system.spawn(agent, "go", execution_id="n1")).result(timeout=60)
        assert paused.status == "paused"
        before = len(await system.history("n1"))
    shrunk = Agent("keeper", FunctionModel(model), tools=[records(log, hide="lookup")])
    async with ActorSystem(store, runners=[shrunk]) as system:
        with pytest.raises(ToolNotFound, match="'lookup'"):
            await system.resume("n1", Resume(approved=True, metadata={"name": "x"}), timeout=60)
        assert len(await system.history("n1")) == before  # nothing written
        assert (await system.status("n1")).status == "paused"


async def test_a_worker_of_a_supervisor_uses_mcp_tools_and_resumes_after_an_elicitation(
    tmp_path: Path,
) -> None:
    log = tmp_path / "calls.log"

    def manager(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"manager read: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("delegate_to_clerk", {"task": "name the record k3"})])

    def clerk(messages: list[Message]) -> str | ModelReply:
        results = [m.content for m in messages if m.role == "tool"]
        if not results:
            return ModelReply(tool_calls=[ToolCall("lookup", {"key": "k3"})])
        if len(results) == 1:
            return ModelReply(tool_calls=[ToolCall("ask_name", {})])
        return " / ".join(results)

    sup = Supervisor(
        "office",
        Agent("boss", FunctionModel(manager)),
        {"clerk": Agent("clerk", FunctionModel(clerk), tools=[records(log)])},
    )
    async with ActorSystem(SQLiteStore(tmp_path / "t.db"), runners=[sup]) as system:
        paused = await (await system.spawn(sup, "go", execution_id="s1")).result(timeout=60)
        assert paused.status == "paused", paused.error
        assert paused.pending is not None and paused.pending.reason == "elicitation"
        done = await system.resume("s1", Resume(approved=True, metadata={"name": "Bo"}), timeout=60)
    assert done.status == "completed", done.error
    assert done.output == "manager read: value of k3 / accept: Bo"
    assert calls(log) == ["lookup k3", "ask_name accept"]


async def test_a_server_that_cannot_start_fails_the_new_run_naming_it(tmp_path: Path) -> None:
    missing = MCPServer("gone", command=[str(tmp_path / "no-such-server")])
    agent = Agent("lonely", FunctionModel(lambda messages: "never asked"), tools=[missing])
    async with ActorSystem(SQLiteStore(tmp_path / "t.db")) as system:
        result = await (await system.spawn(agent, "go")).result(timeout=60)
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.startswith("ConnectionError: could not connect to MCPServer('gone'")


def test_an_mcp_server_is_given_one_way_to_connect() -> None:
    with pytest.raises(ValueError, match=r"exactly one of command= \(stdio\) and url="):
        MCPServer("both", command=["x"], url="http://localhost/mcp")
    with pytest.raises(ValueError, match="exactly one"):
        MCPServer("none")
    with pytest.raises(ValueError, match="letters, digits"):
        MCPServer("a b", command=["x"])
    with pytest.raises(TypeError, match="sequence of str"):
        MCPServer("s", command="python server.py")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="two tool sources named 's'"):
        Agent(
            "a",
            FunctionModel(lambda m: "x"),
            tools=[MCPServer("s", command=["x"]), MCPServer("s", url="http://h/mcp")],
        )


def test_the_mcp_sdk_is_imported_only_by_actors_mcp() -> None:
    """The extra is optional: nothing but ``actors.mcp`` imports the SDK."""
    code = "import sys, actors, actors.models, replication, tether.cli; print(sorted({'mcp', 'actors.mcp'} & set(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"


async def test_a_fork_of_a_run_with_mcp_tools_offers_them_again(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    seen: list[list[str]] = []

    def model(messages: list[Message], tools: list[dict[str, Any]]) -> str | ModelReply:
        seen.append(_tool_names(tools))
        results = [m.content for m in messages if m.role == "tool"]
        if not results:
            return ModelReply(tool_calls=[ToolCall("lookup", {"key": "f1"})])
        return f"{messages[-1].content} after {len(results)} call(s)"

    agent = Agent("forker", FunctionModel(model), tools=[records(log)])
    async with ActorSystem(SQLiteStore(tmp_path / "t.db"), runners=[agent]) as system:
        base = await (await system.spawn(agent, "go", execution_id="f0")).result(timeout=60)
        assert base.status == "completed", base.error
        turn_1 = next(r for r in await system.history("f0") if r.node_id == "turn:1")
        forked = await system.fork("f0", checkpoint_id=turn_1.checkpoint_id, input="and again")
        result = await forked.result(timeout=60)
        rows = await system.history(forked.execution_id)
    assert result.status == "completed", result.error
    assert result.output == "and again after 1 call(s)"
    assert seen[-1] == seen[0] and "lookup" in seen[-1]
    assert calls(log) == ["lookup f1"]  # the fork re-ran no MCP call
    assert any("source_tools" in row.state_snapshot for row in rows)  # the fork records its list
