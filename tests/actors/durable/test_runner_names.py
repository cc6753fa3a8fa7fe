"""Runners by name: two objects with one name are two builds of one runner.

A web handler builds a fresh ``Agent(name="refund-bot")`` per request and spawns with it; ``spawn``
runs with the object it is given; a resume by name takes the runner given in ``runners=``, else the
one most recently spawned under that name in this process. On SQLite and PostgreSQL.
"""

from __future__ import annotations

import anyio
import pytest
from conftest import Backend

from actors import ActorSystem, Agent, Resume, interrupt, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall

pytestmark = pytest.mark.anyio

LIMIT = 30.0


def build(build_id: str, *, pause: bool = False) -> Agent:
    """One build of the runner ``refund-bot``; its answers say which build ran them."""

    @tool
    def refund(order: str) -> str:
        """Refund an order."""
        if pause:
            decision = interrupt("approval", {"order": order})
            return f"{build_id}:approved={decision.approved}"
        return f"{build_id}:refunded {order}"

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"{build_id} says {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("refund", {"order": messages[-1].content})])

    return Agent("refund-bot", FunctionModel(model), tools=[refund])


async def test_a_fresh_agent_per_request_spawns_with_the_object_it_is_given(store_backend: Backend) -> None:
    store = store_backend.open()
    await store.setup()
    try:
        with anyio.fail_after(LIMIT):
            async with ActorSystem(store) as system:
                for request in range(12):
                    handler_agent = build(f"build{request}")  # what a web handler does per request
                    ref = await system.spawn(handler_agent, f"order-{request}")
                    result = await ref.result(timeout=10)
                    assert result.status == "completed", result
                    assert result.output == f"build{request} says build{request}:refunded order-{request}"
    finally:
        await store.close()


async def test_resume_by_name_takes_the_newest_spawned_build(store_backend: Backend) -> None:
    store = store_backend.open()
    await store.setup()
    try:
        with anyio.fail_after(LIMIT):
            async with ActorSystem(store) as system:
                first = await (await system.spawn(build("old", pause=True), "o1")).result(timeout=10)
                assert first.status == "paused"
                second = await (await system.spawn(build("new", pause=True), "o2")).result(timeout=10)
                assert second.status == "paused"
                # Both runs are resumed by name: the newest build spawned under it runs the tool.
                for run in (first, second):
                    done = await system.resume(run.execution_id, Resume(approved=True), timeout=10)
                    assert done.status == "completed"
                    assert done.output is not None and done.output.startswith("new says new:approved=True")
    finally:
        await store.close()


async def test_resume_by_name_prefers_the_runner_given_in_runners(store_backend: Backend) -> None:
    store = store_backend.open()
    await store.setup()
    try:
        with anyio.fail_after(LIMIT):
            async with ActorSystem(store, runners=[build("given", pause=True)]) as system:
                paused = await (await system.spawn(build("spawned", pause=True), "o1")).result(timeout=10)
                assert paused.status == "paused"
                done = await system.resume(paused.execution_id, Resume(approved=False), timeout=10)
                assert done.output == "given says given:approved=False"
    finally:
        await store.close()


def test_a_runner_that_is_not_an_agent_is_refused() -> None:
    with pytest.raises(TypeError, match="a runner is an Agent, a Swarm or a Supervisor, not str"):
        ActorSystem(runners=["refund-bot"])  # type: ignore[list-item]
