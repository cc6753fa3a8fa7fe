"""agent_path and node_id are built and parsed by stores alone (rule 3 and the row grammar)."""

from __future__ import annotations

import pytest

from stores import (
    FORK_ORIGIN,
    RUN_END,
    InvalidPath,
    NodeId,
    TetherError,
    child_path,
    conversation_of,
    handoff_node,
    parse_node_id,
    parse_path,
    tool_node,
    tool_path,
    turn_node,
)


def test_paths_of_a_nested_topology_round_trip() -> None:
    manager = child_path(None, "supervisor", "ops")
    worker = child_path(manager, "worker", "support")
    member = child_path(worker, "agent", "billing")
    tool = tool_path(member, "refund")
    assert tool == "supervisor:ops/worker:support/agent:billing/tool:refund"
    assert parse_path(tool) == (
        ("supervisor", "ops"),
        ("worker", "support"),
        ("agent", "billing"),
        ("tool", "refund"),
    )
    assert child_path("", "agent", "a") == "agent:a"
    assert tool_path(None, "t") == "tool:t"


@pytest.mark.parametrize(
    ("path", "conversation"),
    [
        (None, ""),
        ("", ""),
        ("agent:a", "agent:a"),
        ("agent:a/tool:refund", "agent:a"),
        ("tool:refund", ""),
        ("swarm:s/agent:b/tool:x", "swarm:s/agent:b"),
        ("swarm:s/agent:tool:x", "swarm:s/agent:tool:x"),
    ],
)
def test_conversation_of_drops_only_a_trailing_tool(path: str | None, conversation: str) -> None:
    assert conversation_of(path) == conversation


def test_node_ids_round_trip() -> None:
    assert parse_node_id(turn_node(3)) == NodeId("turn", 3)
    assert parse_node_id(tool_node(0, "refund")) == NodeId("turn", 0, "refund")
    assert tool_node(2, "delegate_to_support") == "turn:2/tool:delegate_to_support"
    assert parse_node_id(handoff_node(1)) == NodeId("handoff", 1)
    assert parse_node_id(RUN_END) == NodeId(RUN_END)
    assert parse_node_id(FORK_ORIGIN) == NodeId(FORK_ORIGIN)


@pytest.mark.parametrize(
    "bad", ["", "turn", "turn:x", "turn:-1", "turn:1/agent:a", "handoff:1/tool:t", "turn:1/tool:", "step:1"]
)
def test_node_ids_outside_the_grammar_are_refused(bad: str) -> None:
    with pytest.raises(InvalidPath, match="node_id"):
        parse_node_id(bad)


@pytest.mark.parametrize(
    "bad", ["", "agent", "agent:", "robot:r", "agent:a/tool:t/agent:b", "agent:a//tool:t", ":a"]
)
def test_paths_outside_the_grammar_are_refused(bad: str) -> None:
    with pytest.raises(InvalidPath) as info:
        parse_path(bad)
    assert isinstance(info.value, TetherError) and isinstance(info.value, ValueError)


def test_building_refuses_bad_parts() -> None:
    with pytest.raises(InvalidPath, match="kind"):
        child_path(None, "robot", "r")
    with pytest.raises(InvalidPath, match="'/'"):
        child_path("agent:a", "agent", "b/c")
    with pytest.raises(InvalidPath, match="non-empty"):
        tool_path("agent:a", "")
    with pytest.raises(InvalidPath, match="int"):
        turn_node(-1)
    with pytest.raises(InvalidPath, match="int"):
        turn_node(True)
