"""The refund agent: the one example run by ``tether demo``, the benchmarks and the boundary proofs.

One offline model and one tool. On the conversation's first turn the model asks for
``refund(order, amount)`` (the amount read from the request: "... for 20" or "..., amount 20");
once it has read a tool result it answers. A refund over :data:`APPROVAL_LIMIT` calls
``interrupt("manager_approval", {"order", "amount"})`` and charges only when approved.

Each use adds its own observation points by overriding the hooks of :class:`RefundBot`: the demo
prints its charges, the benchmarks count tool calls, the proofs keep a ledger that outlives their
processes and crash at chosen points.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from actors import Agent, Resume, interrupt, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall

__all__ = ["APPROVAL_LIMIT", "NAME", "ORDER", "RefundBot", "requested_amount"]

#: The order every refund of the example is for.
ORDER = "1042"
#: Refunds above this amount (cents) wait for a manager's approval.
APPROVAL_LIMIT = 1000
#: The agent's name, which is also the runner's name stored in the rows.
NAME = "refund-bot"

_AMOUNT = re.compile(r"\b(?:for|amount) (\d+)")


def requested_amount(request: str) -> int:
    """The amount a request asks for ("Refund order 1042 for 20" -> 20); 0 when it names none."""
    match = _AMOUNT.search(request)
    return int(match.group(1)) if match else 0


class RefundBot:
    """The refund example's model, tool and agent, with hooks a use of it overrides.

    Every hook does nothing by default, so the base class is the plain example: a refund is charged
    by returning a receipt, and the answer quotes the tool's result.
    """

    # -- hooks ------------------------------------------------------------------------------------

    def on_model(self, turn: int, messages: list[Message]) -> None:
        """Called at every model call, before it answers (``turn`` counts the assistant replies)."""

    def first_calls(self, request: str, amount: int) -> list[ToolCall]:
        """The tool calls of the first turn: the refund."""
        return [ToolCall("refund", {"order": ORDER, "amount": amount})]

    def answer(self, messages: list[Message]) -> str:
        """The final answer, once the model has read a tool result."""
        return f"Done: {messages[-1].content}"

    async def on_tool(self, order: str, amount: int) -> None:
        """Called when the refund tool starts, before anything else it does."""

    def approval_context(self, order: str, amount: int) -> dict[str, Any]:
        """The context a large refund gives ``interrupt()``: what the manager sees."""
        return {"order": order, "amount": amount}

    def after_interrupt(self, context: dict[str, Any]) -> None:
        """Called once ``interrupt()`` returned or raised (the tool may still hold its context)."""

    def approver(self, decision: Resume) -> str | None:
        """Who approved a large refund (``None``: declined)."""
        if not decision.approved:
            return None
        return str(decision.metadata.get("approver", "?"))

    def charge(self, order: str, amount: int, approver: str | None) -> None:
        """Make the refund (``approver`` is ``None`` for a refund under the limit)."""

    # -- the example ------------------------------------------------------------------------------

    def respond(self, messages: list[Message]) -> str | ModelReply:
        """The model: ask for the refund on the first turn, answer after a tool result."""
        turn = sum(1 for m in messages if m.role == "assistant")
        self.on_model(turn, messages)
        if turn == 0:
            request = next(m.content for m in reversed(messages) if m.role == "user")
            return ModelReply(tool_calls=self.first_calls(request, requested_amount(request)))
        return self.answer(messages)

    async def refund_body(self, order: str, amount: int) -> dict[str, Any]:
        """The refund tool's body: a large amount waits for a manager, then the refund is charged."""
        await self.on_tool(order, amount)
        approver = None
        if amount > APPROVAL_LIMIT:
            context = self.approval_context(order, amount)
            try:
                decision = interrupt("manager_approval", context)
            finally:
                self.after_interrupt(context)
            approver = self.approver(decision)
            if approver is None:
                return {"refunded": False, "order": order}
        self.charge(order, amount, approver)
        return {"refunded": True, "order": order, "amount": amount}

    def tools(self) -> list[Any]:
        """The agent's tools: ``refund``."""
        bot = self

        @tool
        async def refund(order: str, amount: int) -> dict[str, Any]:
            """Refund ``amount`` cents on ``order``; large refunds wait for a manager's approval.

            Args:
                order: the order number.
                amount: the amount in cents.
            """
            return await bot.refund_body(order, amount)

        return [refund]

    def agent(self, name: str = NAME, tools: Sequence[Any] | None = None) -> Agent:
        """An :class:`~actors.Agent` on this model, with :meth:`tools` unless ``tools`` are given."""
        chosen = self.tools() if tools is None else list(tools)
        return Agent(name, FunctionModel(self.respond, name="refund-model"), tools=chosen)
