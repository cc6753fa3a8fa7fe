"""A fork of a topology's fork from that fork's ``fork_origin`` row starts where the first fork
started: at the step its origin names, with the message it appended, then the one given now.

Both backends; a Swarm and a Supervisor.
"""

from __future__ import annotations

import anyio
import pytest
from conftest import Backend

from actors import ActorSystem, Agent, Supervisor, Swarm
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import FORK_ORIGIN

pytestmark = pytest.mark.anyio

LIMIT = 60.0


def users(messages: list[Message]) -> str:
    return " + ".join(m.content for m in messages if m.role == "user")


def desk() -> Swarm:
    """``a`` hands to ``b``, which answers with the user messages it saw."""
    hand = ModelReply(tool_calls=[ToolCall("handoff_to_b", {"reason": "yours"})])
    return Swarm("desk", [Agent("a", FunctionModel(lambda m: hand)), Agent("b", FunctionModel(users))])


def ops() -> Supervisor:
    """``boss`` delegates to ``w`` once, then answers with the user messages it saw."""

    def boss(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return users(messages)
        return ModelReply(tool_calls=[ToolCall("delegate_to_w", {"task": "look"})])

    return Supervisor(
        "ops", Agent("boss", FunctionModel(boss)), {"w": Agent("w", FunctionModel(lambda m: "seen"))}
    )


@pytest.mark.parametrize("build", [desk, ops])
async def test_a_fork_from_a_fork_origin_starts_where_that_fork_started(
    store_backend: Backend, build: object
) -> None:
    runner = build()  # type: ignore[operator]
    with anyio.fail_after(LIMIT):
        async with store_backend.open() as store, ActorSystem(store, runners=[runner]) as system:
            base = await (await system.spawn(runner, "go", execution_id="base")).result(timeout=20)
            assert (base.status, base.output) == ("completed", "go")
            first = await system.fork("base", input="first")
            assert (await first.result(timeout=20)).output == "go + first"
            (origin,) = [r for r in await system.history(first.execution_id) if r.step_type == FORK_ORIGIN]
            again = await system.fork(first.execution_id, checkpoint_id=origin.checkpoint_id)
            more = await system.fork(first.execution_id, checkpoint_id=origin.checkpoint_id, input="second")
            assert (await again.result(timeout=20)).output == "go + first"
            assert (await more.result(timeout=20)).output == "go + first + second"
            rows = await system.history(more.execution_id)
    origins = [r for r in rows if r.step_type == FORK_ORIGIN]
    assert [r.parent_checkpoint_id for r in origins] == [origin.parent_checkpoint_id, origin.checkpoint_id]
