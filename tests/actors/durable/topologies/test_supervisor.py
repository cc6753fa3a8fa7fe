"""``Supervisor``: delegations run each worker on its own task once, at its path, on both backends."""

from __future__ import annotations

import anyio
import pytest
from conftest import Backend

from actors import ActorSystem, Agent, Supervisor, Swarm, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall

pytestmark = pytest.mark.anyio


def delegate(role: str, task: object) -> ToolCall:
    return ToolCall(f"delegate_to_{role}", {"task": task})


async def test_two_workers_and_one_worker_twice_with_two_tasks(store_backend: Backend) -> None:
    tasks: dict[str, list[list[str]]] = {"research": [], "writer": []}

    def worker(role: str) -> Agent:
        def fn(messages: list[Message]) -> str:
            users = [m.content for m in messages if m.role == "user"]
            tasks[role].append(users)
            return f"{role} did <{users[-1]}>"

        return Agent(role, FunctionModel(fn), instructions=f"You are the {role}.")

    def manager(messages: list[Message]) -> str | ModelReply:
        results = [m.content for m in messages if m.role == "tool"]
        if not results:
            return ModelReply(tool_calls=[delegate("research", "TASK-ONE"), delegate("research", "TASK-TWO")])
        if len(results) == 2:
            return ModelReply(tool_calls=[delegate("writer", "WRITE")])
        return "final: " + " | ".join(results)

    sup = Supervisor(
        "lead",
        Agent("manager", FunctionModel(manager), instructions="You manage."),
        {"research": worker("research"), "writer": worker("writer")},
    )
    async with store_backend.open() as store, ActorSystem(store) as system:
        with anyio.fail_after(20):
            result = await (await system.spawn(sup, "write a report", execution_id="sup")).result()
        rows = await system.history("sup")
    assert result.output == "final: research did <TASK-ONE> | research did <TASK-TWO> | writer did <WRITE>"
    # Each delegation is its own conversation with its own task, done once.
    assert tasks == {"research": [["TASK-ONE"], ["TASK-TWO"]], "writer": [["WRITE"]]}
    assert [(row.agent_path, row.node_id) for row in rows] == [
        ("supervisor:lead", "turn:0"),
        ("supervisor:lead/tool:delegate_to_research", "turn:0/tool:delegate_to_research"),
        ("supervisor:lead/worker:research", "turn:0"),
        ("supervisor:lead/tool:delegate_to_research", "turn:0/tool:delegate_to_research"),
        ("supervisor:lead/worker:research", "turn:0"),
        ("supervisor:lead", "turn:1"),
        ("supervisor:lead/tool:delegate_to_writer", "turn:1/tool:delegate_to_writer"),
        ("supervisor:lead/worker:writer", "turn:0"),
        ("supervisor:lead", "turn:2"),
        ("supervisor:lead", "run_end"),
    ]
    second = rows[4].state_snapshot["messages"]
    assert [(m["role"], m["content"]) for m in second] == [
        ("system", "You are the research."),
        ("user", "TASK-TWO"),
    ]
    assert rows[1].node_input == {"task": "TASK-ONE"} and rows[3].node_input == {"task": "TASK-TWO"}


async def test_a_failing_worker_and_a_bad_task_are_tool_errors_the_manager_reads(
    store_backend: Backend,
) -> None:
    @tool
    def explode() -> str:
        """Always raises."""
        raise RuntimeError("boom")

    def broken(messages: list[Message]) -> str:
        raise ValueError("worker model down")

    def manager(messages: list[Message]) -> str | ModelReply:
        results = [m.content for m in messages if m.role == "tool"]
        if not results:
            return ModelReply(tool_calls=[delegate("flaky", "try"), delegate("flaky", 42)])
        return " || ".join(results)

    sup = Supervisor(
        "s", Agent("m", FunctionModel(manager)), {"flaky": Agent("flaky", FunctionModel(broken))}
    )
    async with store_backend.open() as store, ActorSystem(store) as system:
        with anyio.fail_after(20):
            result = await (await system.spawn(sup, "go", execution_id="flaky")).result()
    assert result.status == "completed"
    assert result.output == (
        "Tool 'delegate_to_flaky' failed: ValueError: worker model down || "
        "Tool 'delegate_to_flaky' failed: it takes one argument, task (a string)"
    )


async def test_a_swarm_as_a_worker_is_labelled_by_its_role(store_backend: Backend) -> None:
    def a(messages: list[Message]) -> str | ModelReply:
        return ModelReply(tool_calls=[ToolCall("handoff_to_b", {})])

    desk = Swarm("desk", [Agent("a", FunctionModel(a)), Agent("b", FunctionModel(lambda m: "b answered"))])

    def manager(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return messages[-1].content
        return ModelReply(tool_calls=[delegate("support", "help")])

    sup = Supervisor("ops", Agent("boss", FunctionModel(manager)), {"support": desk})
    async with store_backend.open() as store, ActorSystem(store) as system:
        with anyio.fail_after(20):
            result = await (await system.spawn(sup, "go", execution_id="nest")).result()
        rows = await system.history("nest")
    assert result.output == "b answered"
    assert [row.agent_path for row in rows] == [
        "supervisor:ops",
        "supervisor:ops/tool:delegate_to_support",
        "supervisor:ops/worker:support/agent:a",
        "supervisor:ops/worker:support/agent:a/tool:handoff_to_b",
        "supervisor:ops/worker:support",
        "supervisor:ops/worker:support/agent:b",
        "supervisor:ops",
        "supervisor:ops",
    ]


def test_supervisor_definitions_are_checked() -> None:
    model = FunctionModel(lambda m: "x")
    boss = Agent("boss", model)
    with pytest.raises(ValueError, match="needs at least one worker"):
        Supervisor("s", boss, {})
    with pytest.raises(TypeError, match="the manager must be an Agent"):
        Supervisor("s", "boss", {"w": boss})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="worker 'w' is not an Agent"):
        Supervisor("s", boss, {"w": "x"})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="worker role name 'a/b'"):
        Supervisor("s", boss, {"a/b": boss})
    assert Supervisor("s", boss, {"w": Agent("w", model)}).label == "supervisor:s"
