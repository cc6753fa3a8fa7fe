"""A topology's events name each agent's path, and its handoffs come in order: a Supervisor whose
worker is a Swarm, replayed and followed live; both backends."""

from __future__ import annotations

import anyio
import pytest
from conftest import Backend

from actors import ActorSystem, Agent, Supervisor, Swarm, tool
from actors.events import Handoff, RunEnded, ToolFinished
from actors.models import FunctionModel, Message, ModelReply, ToolCall

pytestmark = pytest.mark.anyio


def ops() -> Supervisor:
    @tool
    def refund(amount: int) -> str:
        """Refund an amount."""
        return f"refunded {amount}"

    def triage(messages: list[Message]) -> ModelReply:
        return ModelReply(tool_calls=[ToolCall("handoff_to_billing", {"reason": "money"})])

    def billing(messages: list[Message]) -> ModelReply:
        if messages[-1].role == "tool" and messages[-1].name == "refund":
            return ModelReply(tool_calls=[ToolCall("handoff_to_closer", {"reason": "paid"})])
        return ModelReply(tool_calls=[ToolCall("refund", {"amount": 5})])

    def closer(messages: list[Message]) -> str:
        refunded = next(m.content for m in messages if m.role == "tool" and m.name == "refund")
        return f"closer: {refunded}"

    def manager(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"done: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("delegate_to_support", {"task": "refund order 7"})])

    support = Swarm(
        "desk",
        [
            Agent("triage", FunctionModel(triage)),
            Agent("billing", FunctionModel(billing), tools=[refund]),
            Agent("closer", FunctionModel(closer)),
        ],
    )
    return Supervisor("ops", Agent("manager", FunctionModel(manager)), {"support": support})


async def test_a_nested_topologys_events_name_each_agent_and_its_handoffs(store_backend: Backend) -> None:
    runner = ops()
    store = store_backend.open()
    with anyio.fail_after(30):
        async with store, ActorSystem(store, runners=[runner]) as system:
            ref = await system.spawn(runner, "my order 7 needs a refund", execution_id="topo")
            live = [event async for event in ref.events()]
            replay = [event async for event in system.ref("topo").events(since=0)]
    assert live == replay
    assert [e.seq for e in replay] == sorted(e.seq for e in replay)
    sup, worker = "supervisor:ops", "supervisor:ops/worker:support"
    assert [(type(e).__name__, e.agent_path) for e in replay] == [
        ("StepStarted", sup),
        ("StepStarted", f"{sup}/tool:delegate_to_support"),
        ("StepStarted", f"{worker}/agent:triage"),
        ("StepStarted", f"{worker}/agent:triage/tool:handoff_to_billing"),
        ("ToolFinished", f"{worker}/agent:triage/tool:handoff_to_billing"),  # read from the hop's row
        ("Handoff", worker),
        ("StepStarted", f"{worker}/agent:billing"),
        ("StepStarted", f"{worker}/agent:billing/tool:refund"),
        ("ToolFinished", f"{worker}/agent:billing/tool:refund"),
        ("StepStarted", f"{worker}/agent:billing"),
        ("StepStarted", f"{worker}/agent:billing/tool:handoff_to_closer"),
        ("ToolFinished", f"{worker}/agent:billing/tool:handoff_to_closer"),
        ("Handoff", worker),
        ("StepStarted", f"{worker}/agent:closer"),
        ("ToolFinished", f"{sup}/tool:delegate_to_support"),
        ("StepStarted", sup),
        ("RunEnded", sup),
    ]
    hops = [e for e in replay if isinstance(e, Handoff)]
    assert [(h.node_id, h.source, h.target, h.reason) for h in hops] == [
        ("handoff:0", "triage", "billing", "money"),
        ("handoff:1", "billing", "closer", "paid"),
    ]
    delegated = next(e for e in replay if isinstance(e, ToolFinished) and e.tool == "delegate_to_support")
    assert delegated.ok and delegated.output == "closer: refunded 5"
    assert isinstance(replay[-1], RunEnded) and replay[-1].output == "done: closer: refunded 5"
