"""A swarm re-entered at each kind of row it can rest on, and what its members are offered.

* Re-entry at a ``handoff:N`` row (a fork from it): the member handed to takes over with the
  conversation, the shared state, the hop count and the visited members the row recorded.
* A member that is itself a topology: its level is built at the member's path, a pause deep inside
  it resumes there, and a build that lacks the paused tool is refused with ``ToolNotFound`` before
  anything is written.
* The handoff tools a member is offered: their names and JSON schema, exactly.

Both backends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import pytest
from conftest import Backend

from actors import ActorSystem, Agent, Resume, Supervisor, Swarm, ToolNotFound, current_run, interrupt, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import HANDOFF

pytestmark = pytest.mark.anyio

LIMIT = 60.0


def relay(seen: dict[str, list[list[Message]]]) -> Swarm:
    """``a`` hands to ``b`` with a reason and a context; ``b`` hands straight back, one hop past
    ``max_handoffs=1``."""

    def a(messages: list[Message]) -> ModelReply:
        seen.setdefault("a", []).append(list(messages))
        return ModelReply(tool_calls=[ToolCall("handoff_to_b", {"reason": "b knows", "context": {"k": 1}})])

    @tool
    def peek() -> str:
        """Report the run's shared state."""
        info = current_run()
        assert info is not None
        return repr(sorted(info.shared.items()))

    def b(messages: list[Message]) -> ModelReply:
        seen.setdefault("b", []).append(list(messages))
        if messages[-1].role == "tool" and messages[-1].name == "peek":
            return ModelReply(tool_calls=[ToolCall("handoff_to_a", {})])
        return ModelReply(tool_calls=[ToolCall("peek", {})])

    return Swarm(
        "relay",
        [Agent("a", FunctionModel(a)), Agent("b", FunctionModel(b), tools=[peek], instructions="You are b.")],
        max_handoffs=1,
    )


async def test_a_fork_from_a_hop_row_continues_with_what_the_hop_recorded(store_backend: Backend) -> None:
    seen: dict[str, list[list[Message]]] = {}
    swarm = relay(seen)
    with anyio.fail_after(LIMIT):
        async with store_backend.open() as store, ActorSystem(store, runners=[swarm]) as system:
            base = await (await system.spawn(swarm, "go", execution_id="relay")).result(timeout=20)
            rows = await system.history("relay")
            (hop,) = [r for r in rows if r.step_type == HANDOFF]
            assert (hop.node_id, hop.step_index) == ("handoff:0", 0)
            assert hop.state_snapshot["turn"] == 0 and hop.state_snapshot["hops"] == 1
            first_b = seen["b"][0]
            seen.clear()
            fork = await system.fork("relay", checkpoint_id=hop.checkpoint_id)
            forked = await fork.result(timeout=20)
    error = "HandoffLimitExceeded: swarm 'relay' exceeded max_handoffs=1 (hops: a -> b -> a) (run {!r})"
    assert base.status == "failed" and base.error == error.format("relay")
    assert forked.status == "failed" and forked.error == error.format(fork.execution_id)
    assert "a" not in seen  # the fork starts at b, with the conversation the hop recorded
    assert seen["b"][0] == first_b
    assert [m.role for m in first_b] == ["system", "user", "assistant", "tool"]
    assert first_b[0].content == "You are b."
    assert seen["b"][1][-1].content == "[('k', 1)]"  # the hop's context is the fork's shared state


def nested(gated: list[str], *, with_gate: bool = True) -> Swarm:
    """A swarm whose second member is a Supervisor whose worker pauses in ``gate``."""

    @tool
    def gate(item: str) -> str:
        """Ask a human about an item."""
        decision = interrupt("approve", {"item": item})
        gated.append(item)
        return f"{item}: approved={decision.approved}"

    def worker(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"worker: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("gate", {"item": "5"})])

    def boss(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool" and messages[-1].name == "delegate_to_w":
            return f"boss: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("delegate_to_w", {"task": "check 5"})])

    ops = Supervisor(
        "ops",
        Agent("boss", FunctionModel(boss)),
        {"w": Agent("w", FunctionModel(worker), tools=[gate] if with_gate else [])},
    )
    front = Agent("front", FunctionModel(lambda m: ModelReply(tool_calls=[ToolCall("handoff_to_ops", {})])))
    return Swarm("desk", [front, ops])


async def test_a_topology_member_pauses_deep_and_resumes_at_its_path(store_backend: Backend) -> None:
    gated: list[str] = []
    swarm = nested(gated)
    with anyio.fail_after(LIMIT):
        async with store_backend.open() as store, ActorSystem(store, runners=[swarm]) as system:
            paused = await (await system.spawn(swarm, "go", execution_id="deep")).result(timeout=20)
            assert paused.status == "paused" and paused.pending is not None
            assert paused.pending.agent_path == "swarm:desk/agent:ops/worker:w/tool:gate"
        # A build of the runner without the paused tool: refused, nothing written, still paused.
        stale = nested(gated, with_gate=False)
        async with store_backend.open() as store, ActorSystem(store, runners=[stale]) as system:
            before = await system.history("deep")
            with pytest.raises(ToolNotFound, match="gate"):
                await system.resume("deep", Resume(approved=True), timeout=20)
            assert await system.history("deep") == before
            assert (await system.status("deep")).status == "paused"
        async with store_backend.open() as store, ActorSystem(store, runners=[swarm]) as system:
            done = await system.resume("deep", Resume(approved=True), timeout=20)
            rows = await system.history("deep")
    assert (done.status, done.output) == ("completed", "boss: worker: 5: approved=True")
    assert gated == ["5"]
    assert [r.agent_path for r in rows if r.step_type in ("hitl_pause", "resume")] == [
        "swarm:desk/agent:ops/worker:w/tool:gate"
    ] * 2


class OfferedTools:
    """A model that records the tools each call is offered and answers at once."""

    def __init__(self) -> None:
        self.offered: list[list[dict[str, Any]]] = []

    async def complete(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] = ()) -> ModelReply:
        self.offered.append([dict(t) for t in tools])
        return ModelReply(text="answered")


def handoff_schema(peer: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": f"handoff_to_{peer}",
            "description": f"Hand control of the conversation to {peer}.",
            "parameters": {
                "type": "object",
                "properties": {
                    "reason": {"type": "string", "description": "Why the peer should take over."},
                    "context": {"type": "object", "description": "Facts to add to the shared state."},
                },
            },
        },
    }


async def test_a_member_is_offered_one_handoff_tool_per_allowed_peer(store_backend: Backend) -> None:
    model = OfferedTools()
    quiet = FunctionModel(lambda m: "x")
    swarm = Swarm(
        "offer",
        [Agent("a", model), Agent("b", quiet), Agent("c", quiet), Agent("d", quiet)],
        handoffs={"a": ["c", "b"]},
    )
    with anyio.fail_after(LIMIT):
        async with store_backend.open() as store, ActorSystem(store) as system:
            done = await (await system.spawn(swarm, "go", execution_id="offer")).result(timeout=20)
    assert done.output == "answered"
    (tools,) = model.offered
    assert sorted(tools, key=lambda t: t["function"]["name"]) == [handoff_schema("b"), handoff_schema("c")]
