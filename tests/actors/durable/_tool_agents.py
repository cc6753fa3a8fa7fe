"""An agent whose first turn calls one tool, whose body the test gives."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from actors import Agent, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall


def tool_agent(body: Callable[[], Awaitable[str]]) -> Agent:
    """An agent whose first turn calls the tool ``work`` (running ``body``), then answers with
    what the tool said."""

    @tool
    async def work() -> str:
        """Do the work."""
        return await body()

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"done: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("work", {})])

    return Agent("worker", FunctionModel(model), tools=[work])
