"""``Swarm``: handoffs, ``handoff:N`` rows, member paths, the allow-list, ``max_handoffs``, on both backends."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest
from conftest import Backend

from actors import ActorSystem, Agent, HandoffLimitExceeded, Swarm, TetherError, tool
from actors.lowlevel import SIBLING_NOTE
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import HANDOFF, RUN_END

pytestmark = pytest.mark.anyio

Decide = Callable[[list[Message]], str | ModelReply]


def member(name: str, decide: Decide, seen: dict[str, list[list[Message]]], **options: object) -> Agent:
    """An agent that records the conversation each of its model calls saw."""

    def fn(messages: list[Message]) -> str | ModelReply:
        seen.setdefault(name, []).append(list(messages))
        return decide(messages)

    return Agent(name, FunctionModel(fn), **options)  # type: ignore[arg-type]


def hand(to: str, **arguments: object) -> ModelReply:
    return ModelReply(tool_calls=[ToolCall(f"handoff_to_{to}", dict(arguments))])


async def test_three_members_two_handoffs(store_backend: Backend) -> None:
    seen: dict[str, list[list[Message]]] = {}

    @tool
    def lookup(order: str) -> str:
        """Look an order up."""
        return f"{order}: paid"

    def a(messages: list[Message]) -> ModelReply:
        return ModelReply(
            tool_calls=[
                ToolCall("lookup", {"order": "7"}),
                ToolCall("handoff_to_b", {"reason": "b decides", "context": {"order": "7"}}),
                ToolCall("lookup", {"order": "8"}),
            ]
        )

    swarm = Swarm(
        "desk",
        [
            member("a", a, seen, tools=[lookup], instructions="You are a."),
            member("b", lambda m: hand("c", reason="c closes"), seen, instructions="You are b."),
            member("c", lambda m: "closed by c", seen),
        ],
    )
    async with store_backend.open() as store, ActorSystem(store) as system:
        with anyio.fail_after(20):
            result = await (await system.spawn(swarm, "help me", execution_id="sw")).result()
        rows = await system.history("sw")
    assert (result.status, result.output) == ("completed", "closed by c")
    assert [(row.agent_path, row.node_id, row.step_type) for row in rows] == [
        ("swarm:desk/agent:a", "turn:0", "llm_call"),
        ("swarm:desk/agent:a/tool:lookup", "turn:0/tool:lookup", "tool_call"),
        ("swarm:desk/agent:a/tool:handoff_to_b", "turn:0/tool:handoff_to_b", "tool_call"),
        ("swarm:desk", "handoff:0", "handoff"),
        ("swarm:desk/agent:b", "turn:0", "llm_call"),
        ("swarm:desk/agent:b/tool:handoff_to_c", "turn:0/tool:handoff_to_c", "tool_call"),
        ("swarm:desk", "handoff:1", "handoff"),
        ("swarm:desk/agent:c", "turn:0", "llm_call"),
        ("swarm:desk", "run_end", "run_end"),
    ]
    hops = [row for row in rows if row.step_type == HANDOFF]
    assert [row.node_input for row in hops] == [
        {"from": "a", "to": "b", "reason": "b decides"},
        {"from": "b", "to": "c", "reason": "c closes"},
    ]
    assert hops[0].state_snapshot["shared"] == {"order": "7"}
    # Each member sees the whole conversation so far, with its own instructions as the only system message.
    (b_saw,) = seen["b"]
    assert [m.role for m in b_saw] == ["system", "user", "assistant", "tool", "tool", "tool"]
    assert b_saw[0].content == "You are b."
    assert [m.content for m in b_saw[3:]] == ["7: paid", "handed off to b", SIBLING_NOTE]
    (c_saw,) = seen["c"]
    assert "system" not in [m.role for m in c_saw]
    assert c_saw[-1].content == "handed off to c"


async def test_a_handoff_the_allow_list_refuses_is_a_tool_error_the_model_reads(
    store_backend: Backend,
) -> None:
    seen: dict[str, list[list[Message]]] = {}

    def a(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"a read: {messages[-1].content}"
        return hand("c")

    swarm = Swarm(
        "strict",
        [member("a", a, seen), member("b", lambda m: "b", seen), member("c", lambda m: "c", seen)],
        handoffs={"a": ["b"]},
    )
    async with store_backend.open() as store, ActorSystem(store) as system:
        with anyio.fail_after(20):
            result = await (await system.spawn(swarm, "go", execution_id="strict")).result()
        rows = await system.history("strict")
    assert result.output == "a read: Tool 'handoff_to_c' failed: the agent has no tool named 'handoff_to_c'"
    assert HANDOFF not in [row.step_type for row in rows]
    assert "b" not in seen and "c" not in seen


async def test_exceeding_max_handoffs_fails_the_run(store_backend: Backend) -> None:
    seen: dict[str, list[list[Message]]] = {}
    swarm = Swarm(
        "pingpong",
        [member("a", lambda m: hand("b"), seen), member("b", lambda m: hand("a"), seen)],
        max_handoffs=3,
    )
    async with store_backend.open() as store, ActorSystem(store) as system:
        with anyio.fail_after(20):
            result = await (await system.spawn(swarm, "go", execution_id="pp")).result()
        rows = await system.history("pp")
    assert result.status == "failed"
    assert result.error is not None and result.error.startswith("HandoffLimitExceeded: ")
    assert "max_handoffs=3" in result.error and "a -> b -> a -> b -> a" in result.error
    assert [row.node_id for row in rows if row.step_type == HANDOFF] == [
        "handoff:0",
        "handoff:1",
        "handoff:2",
    ]
    assert rows[-1].step_type == RUN_END
    assert rows[-1].state_snapshot["run_error"] == result.error
    assert issubclass(HandoffLimitExceeded, TetherError)


async def test_bad_handoff_arguments_are_a_tool_error(store_backend: Backend) -> None:
    seen: dict[str, list[list[Message]]] = {}

    def a(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return messages[-1].content
        return hand("b", reason=3)

    swarm = Swarm("args", [member("a", a, seen), member("b", lambda m: "b", seen)])
    async with store_backend.open() as store, ActorSystem(store) as system:
        with anyio.fail_after(20):
            result = await (await system.spawn(swarm, "go", execution_id="args")).result()
    assert result.output == "Tool 'handoff_to_b' failed: it takes reason (a string) and context (an object)"
    assert "b" not in seen


def test_swarm_definitions_are_checked() -> None:
    model = FunctionModel(lambda m: "x")
    a, b = Agent("a", model), Agent("b", model)
    with pytest.raises(ValueError, match="needs at least one member"):
        Swarm("s", [])
    with pytest.raises(ValueError, match="two members named 'a'"):
        Swarm("s", [a, Agent("a", model)])
    with pytest.raises(ValueError, match="entry 'z' is not a member"):
        Swarm("s", [a, b], entry="z")
    with pytest.raises(ValueError, match="'a' may not hand off to 'z'"):
        Swarm("s", [a, b], handoffs={"a": ["z"]})
    with pytest.raises(ValueError, match="handoffs names 'z'"):
        Swarm("s", [a, b], handoffs={"z": []})
    with pytest.raises(ValueError, match="max_handoffs must be an int >= 0"):
        Swarm("s", [a, b], max_handoffs=-1)
    with pytest.raises(ValueError, match="swarm name"):
        Swarm("a/b", [a])
    with pytest.raises(TypeError, match="a member is an Agent"):
        Swarm("s", ["a"])  # type: ignore[list-item]
    swarm = Swarm("s", [a, b], entry="b")
    assert (swarm.entry, swarm.handoffs) == ("b", {"a": ("b",), "b": ("a",)})
