"""``system.claim`` without a runner: the row it writes and each refusal, by its words.

A claim writes the ``resume`` row right after the pause (no gap in ``seq``) and nothing else; a
claim of something that is not a ``Resume``, of a run that is not paused, or of a pause already
claimed is refused before anything is written, naming what was wrong. Both backends.
"""

from __future__ import annotations

import anyio
import pytest
from conftest import Backend

from actors import ActorSystem, Agent, AlreadyResumed, Resume, RunNotFound, interrupt, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import RESUME

pytestmark = pytest.mark.anyio

LIMIT = 60.0


def gated(name: str = "claimed") -> Agent:
    @tool
    def refund(order: str) -> str:
        """Refund after a manager's approval."""
        decision = interrupt("approve?", {"order": order})
        return f"approved={decision.approved}"

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return str(messages[-1].content)
        return ModelReply(tool_calls=[ToolCall("refund", {"order": "3"})])

    return Agent(name, FunctionModel(model), tools=[refund])


async def test_a_claim_writes_its_resume_row_right_after_the_pause(store_backend: Backend) -> None:
    runner = gated()
    with anyio.fail_after(LIMIT):
        async with store_backend.open() as store, ActorSystem(store, runners=[runner]) as system:
            paused = await (await system.spawn(runner, "go", execution_id="c1")).result(timeout=20)
            assert paused.status == "paused"
        async with store_backend.open() as store, ActorSystem(store) as approver:
            before = await approver.history("c1")
            decision = Resume(approved=True, metadata={"by": "ann"})
            await approver.claim("c1", decision)
            rows = await approver.history("c1")
            second = approver.claim("c1", Resume(approved=False))
            with pytest.raises(AlreadyResumed, match=r"run 'c1' has no pending interrupt to claim"):
                await second
            assert await approver.history("c1") == rows
    assert rows[: len(before)] == before
    (claim,) = rows[len(before) :]
    assert [r.seq for r in rows] == list(range(len(rows)))
    assert (claim.step_type, claim.node_id) == (RESUME, before[-1].node_id)
    assert claim.node_input == {"reentry_seq": before[-1].seq, "resume": decision.to_dict()}


async def test_claim_refusals_name_what_was_wrong(store_backend: Backend) -> None:
    runner = gated("unpaused")

    def answers(messages: list[Message]) -> str:
        return "no pause here"

    plain = Agent("plain", FunctionModel(answers))
    with anyio.fail_after(LIMIT):
        async with store_backend.open() as store, ActorSystem(store, runners=[runner, plain]) as system:
            with pytest.raises(TypeError, match="a claim takes a Resume, not dict"):
                await system.claim("nobody", {"approved": True})  # type: ignore[arg-type]
            with pytest.raises(RunNotFound):
                await system.claim("nobody", Resume(approved=True))
            await (await system.spawn(plain, "hi", execution_id="done")).result(timeout=20)
            before = await system.history("done")
            with pytest.raises(AlreadyResumed, match=r"run 'done' already finished \(completed\)"):
                await system.claim("done", Resume(approved=True))
            assert await system.history("done") == before
            queued = await system.enqueue(runner, "later", execution_id="queued")
            before = await system.history(queued)
            refusal = (
                r"run 'queued' has no pending interrupt to claim: its newest step is 'turn:0' \(llm_call\)"
            )
            with pytest.raises(AlreadyResumed, match=refusal):
                await system.claim(queued, Resume(approved=True))
            assert await system.history(queued) == before
