"""Agent definitions and the run errors' messages."""

from __future__ import annotations

import pytest

from actors import Agent, MaxTurnsExceeded, ResumeRequired, RunnerNotFound, ToolNotFound, tool
from actors.lowlevel import Tool
from actors.models import FunctionModel, Message
from stores import TetherError


def _model() -> FunctionModel:
    return FunctionModel(lambda messages: "ok")


@tool
def refund(order_id: str, amount: float) -> str:
    """Refund an order."""
    return "refunded"


def lookup(order_id: str) -> str:
    """Look an order up."""
    return order_id


def test_agent_fields_and_defaults() -> None:
    agent = Agent("refund-bot", _model(), [refund, lookup], instructions="Be brief.")
    assert agent.name == "refund-bot"
    assert agent.instructions == "Be brief."
    assert agent.max_turns == 20
    assert agent.label == "agent:refund-bot"
    assert [t.name for t in agent.tools] == ["refund", "lookup"]
    assert isinstance(agent.tool("lookup"), Tool)  # a plain function was wrapped
    assert agent.tool("refund") is refund
    assert agent.has_tool("refund") and not agent.has_tool("charge")
    assert [s["function"]["name"] for s in agent.tool_schemas()] == ["refund", "lookup"]
    assert Agent("a", _model()).tools == []
    assert "refund-bot" in repr(agent)


def test_tool_not_found_names_agent_tool_and_run() -> None:
    agent = Agent("refund-bot", _model(), [refund])
    with pytest.raises(ToolNotFound) as info:
        agent.tool("charge", execution_id="run-7")
    text = str(info.value)
    assert "'refund-bot'" in text and "'charge'" in text and "'run-7'" in text
    assert info.value.tool == "charge" and info.value.agent == "refund-bot"
    assert isinstance(info.value, TetherError) and isinstance(info.value, LookupError)


@pytest.mark.parametrize("name", ["", "a/b", "a:b", " a", "a "])
def test_bad_agent_names(name: str) -> None:
    with pytest.raises(ValueError, match="agent name"):
        Agent(name, _model())


def test_bad_agent_options() -> None:
    with pytest.raises(ValueError, match="max_turns"):
        Agent("a", _model(), max_turns=0)
    with pytest.raises(ValueError, match="max_turns"):
        Agent("a", _model(), max_turns=True)
    with pytest.raises(TypeError, match="model"):
        Agent("a", object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="two tools named 'refund'"):
        Agent("a", _model(), [refund, tool(name="refund")(lookup)])
    with pytest.raises(TypeError, match="instructions"):
        Agent("a", _model(), instructions=Message("system", "x"))  # type: ignore[arg-type]


def test_run_errors_are_tether_errors_with_clear_messages() -> None:
    e1 = RunnerNotFound("refund-bot", execution_id="run-1")
    assert "'refund-bot'" in str(e1) and "'run-1'" in str(e1) and "runners=" in str(e1)
    e2 = ResumeRequired("run-2", reason="approve refund")
    assert "'run-2'" in str(e2) and "approve refund" in str(e2) and "Resume(" in str(e2)
    e3 = MaxTurnsExceeded(3, agent="bot", execution_id="run-3")
    assert "max_turns=3" in str(e3) and "'bot'" in str(e3) and "'run-3'" in str(e3)
    for err in (e1, e2, e3, ToolNotFound("t")):
        assert isinstance(err, TetherError)
    assert str(ToolNotFound("t")) == "the agent has no tool named 't'"
