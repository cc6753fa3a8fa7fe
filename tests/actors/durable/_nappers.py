"""An agent whose one tool sleeps (a durable ``sleep``) once, then answers: the runs that rest."""

from __future__ import annotations

from actors import Agent, sleep, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall


def napper(name: str = "napper", seconds: float = 0.3, version: str | None = None) -> Agent:
    """An agent named ``name`` (of ``version``) whose tool sleeps ``seconds``, then answers
    "awake: rested"."""

    @tool
    async def nap() -> str:
        """Sleep a moment."""
        await sleep(seconds)
        return "rested"

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"awake: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("nap", {})])

    return Agent(name, FunctionModel(model), tools=[nap], version=version)
