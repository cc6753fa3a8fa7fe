"""Tool names the row grammar cannot carry (``/``, ``:``, empty) are refused before a run writes.

A tool's rows are written at ``<agent_path>/tool:<name>`` and ``turn:N/tool:<name>``; a name with a
separator in it would give rows the store's path readers refuse later. ``@tool`` checks its name;
an agent refuses a tool renamed after that check; a tool source's listed names (an MCP server's)
fail a new run before its first row, naming the source and the tool. A model's call of a name no
row can carry fails the run before that call's row is written.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from actors import ActorSystem, Agent, tool
from actors.lowlevel import SourceSession, ToolOutcome, ToolSource
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import InvalidPath, SQLiteStore, is_segment_name

pytestmark = pytest.mark.anyio

BAD_NAMES = ["a/b", "a:b", ""]


class _Session:
    """A connection that lists ``names`` and answers every call with ``ok``."""

    def __init__(self, names: list[str]) -> None:
        self.names = names

    async def list_tools(self) -> list[dict[str, Any]]:
        return [
            {"tool": name, "description": "", "parameters": None, "destructive": False, "idempotent": False}
            for name in self.names
        ]

    async def call(self, entry: dict[str, Any], arguments: dict[str, Any]) -> ToolOutcome:
        return ToolOutcome(content=f"ok from {entry['tool']}")


class _Listed(ToolSource):
    """A tool source (as an MCP server is one) whose server lists the tools ``names``."""

    def __init__(self, name: str, names: list[str]) -> None:
        self.name = name
        self.names = names

    def connect(self) -> AbstractAsyncContextManager[SourceSession]:
        return self._open()

    @asynccontextmanager
    async def _open(self) -> AsyncIterator[SourceSession]:
        yield _Session(self.names)

    def fingerprint(self) -> str:
        return "listed"


def _calls(name: str) -> FunctionModel:
    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"read: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall(name, {})])

    return FunctionModel(model)


def test_a_segment_name_has_no_separator_and_is_not_empty() -> None:
    assert is_segment_name("refund") and is_segment_name("handoff_to_b") and is_segment_name("a b.c")
    for name in [*BAD_NAMES, None, 3]:
        assert not is_segment_name(name)


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_tool_renamed_after_at_tool_checked_it_is_refused_by_the_agent(name: str) -> None:
    @tool
    def refund(order: str) -> str:
        """Refund an order."""
        return order

    refund.name = name
    with pytest.raises(InvalidPath) as refused:
        Agent("bot", _calls("refund"), tools=[refund])
    assert str(refused.value) == (
        f"agent 'bot' has a tool named {name!r}: a tool name must be a non-empty str without '/' "
        "or ':' (they separate the segments of agent_path and node_id)"
    )
    assert isinstance(refused.value, ValueError)  # as @tool's own refusal of a bad name


async def test_a_source_tool_with_a_fitting_name_is_offered_and_called(tmp_path: Path) -> None:
    agent = Agent("bot", _calls("lookup"), tools=[_Listed("srv", ["lookup"])])
    async with ActorSystem(SQLiteStore(tmp_path / "t.db")) as system:
        result = await (await system.spawn(agent, "go")).result(timeout=30)
    assert result.status == "completed", result.error
    assert result.output == "read: ok from lookup"


@pytest.mark.parametrize("name", BAD_NAMES)
async def test_a_source_tool_named_with_a_separator_fails_the_new_run_before_it_writes(
    tmp_path: Path, name: str
) -> None:
    agent = Agent("bot", _calls(name), tools=[_Listed("srv", ["lookup", name])])
    async with ActorSystem(SQLiteStore(tmp_path / "t.db")) as system:
        run = await system.spawn(agent, "go")
        result = await run.result(timeout=30)
        history = await system.history(run.execution_id)
    assert result.status == "failed"
    assert result.error == (
        f"InvalidPath: tool source 'srv' of agent 'bot' lists a tool named {name!r}: a tool name must "
        "be a non-empty str without '/' or ':' (they separate the segments of agent_path and node_id)"
    )
    assert [row.step_type for row in history if row.step_type in ("llm_call", "tool_call")] == []


@pytest.mark.parametrize("name", ["a/b", ""])
async def test_a_model_call_of_a_name_no_row_can_carry_fails_the_run_before_its_row(
    tmp_path: Path, name: str
) -> None:
    @tool
    def lookup() -> str:
        """Look something up."""
        return "found"

    agent = Agent("bot", _calls(name), tools=[lookup])
    async with ActorSystem(SQLiteStore(tmp_path / "t.db")) as system:
        run = await system.spawn(agent, "go")
        result = await run.result(timeout=30)
        history = await system.history(run.execution_id)
    assert result.status == "failed"
    assert result.error == f"InvalidPath: a tool name must be a non-empty string without '/', not {name!r}"
    assert [row.node_id for row in history] == ["turn:0", "run_end"]  # no row at turn:0/tool:<name>


async def test_a_model_call_of_a_made_up_name_with_a_colon_is_answered_as_an_unknown_tool(
    tmp_path: Path,
) -> None:
    @tool
    def lookup() -> str:
        """Look something up."""
        return "found"

    agent = Agent("bot", _calls("functions:lookup"), tools=[lookup])
    async with ActorSystem(SQLiteStore(tmp_path / "t.db")) as system:
        run = await system.spawn(agent, "go")
        result = await run.result(timeout=30)
        history = await system.history(run.execution_id)
    assert result.status == "completed", result.error
    assert "functions:lookup" in str(result.output)
    assert [row.node_id for row in history] == ["turn:0", "turn:0/tool:functions:lookup", "turn:1", "run_end"]
