"""A topology the command-line and inspector tests drive as a user's own module: a Supervisor
``ops`` whose worker ``support`` (the agent ``billing``) looks an order up, then refunds it; the
refund waits for a manager's approval. ``ops`` is the runner; ``build`` a function returning one."""

from __future__ import annotations

from typing import Any

from actors import Agent, Supervisor, interrupt, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall


@tool
async def lookup(order: str) -> dict[str, Any]:
    """Look an order up.

    Args:
        order: the order number.
    """
    return {"order": order, "paid": 5000}


@tool
async def refund(order: str, amount: int) -> dict[str, Any]:
    """Refund an order; a manager approves it first.

    Args:
        order: the order number.
        amount: the amount in cents.
    """
    decision = interrupt("manager_approval", {"order": order, "amount": amount})
    return {"refunded": decision.approved, "order": order, "amount": amount}


def _billing(messages: list[Message]) -> str | ModelReply:
    last = messages[-1]
    if last.role == "tool" and last.name == "lookup":
        return ModelReply(
            text="refunding it", tool_calls=[ToolCall("refund", {"order": "7", "amount": 5000})]
        )
    if last.role == "tool" and last.name == "refund":
        return f"billing: {last.content}"
    return ModelReply(tool_calls=[ToolCall("lookup", {"order": "7"})])


def _manager(messages: list[Message]) -> str | ModelReply:
    if messages[-1].role == "tool":
        return f"final answer: {messages[-1].content}"
    return ModelReply(tool_calls=[ToolCall("delegate_to_support", {"task": "refund order 7"})])


def build() -> Supervisor:
    """The topology (a fresh build each call)."""
    billing = Agent("billing", FunctionModel(_billing), tools=[lookup, refund])
    return Supervisor("ops", Agent("manager", FunctionModel(_manager)), {"support": billing})


ops = build()
