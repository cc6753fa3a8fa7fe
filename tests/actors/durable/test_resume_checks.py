"""A malformed decision is refused when its ``Resume`` is built, so it never uses up a pause.

``approved`` takes a bool and ``metadata`` a JSON object; anything else raises ``TypeError`` before
any claim, and the pause stays claimable by a correct decision. A decision read back from a row
decodes as before.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import anyio
import msgspec
import pytest
from conftest import Backend

from actors import ActorSystem, Agent, Resume, interrupt, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("approved", ["yes", None, 1, 0, 1.0, [True]])
def test_approved_must_be_a_bool(approved: Any) -> None:
    with pytest.raises(TypeError, match=r"approved=.*bool"):
        Resume(approved=approved)


@pytest.mark.parametrize(
    ("metadata", "named"),
    [
        (["approver", "alice"], "list"),
        ("alice", "str"),
        (None, "NoneType"),
        ({1: "alice"}, "not a str"),
        ({"when": datetime(2026, 1, 1)}, r"\$\.metadata\.when"),
        ({"x": float("nan")}, "finite"),
        ({"x": "\ud800"}, "surrogate"),
    ],
)
def test_metadata_must_be_a_json_object(metadata: Any, named: str) -> None:
    with pytest.raises(TypeError, match=named):
        Resume(approved=True, metadata=metadata)


def test_good_decisions_build_and_decode_strictly() -> None:
    assert Resume(True).metadata == {}
    decision = Resume(False, {"approver": "bob", "n": [1, 2.5, None, {"k": True}]})
    assert Resume.from_dict(decision.to_dict()) == decision
    assert Resume(True, {"order": ("a", 1)}).to_dict()["metadata"] == {"order": ["a", 1]}
    assert msgspec.json.decode(b'{"approved":true,"metadata":{"a":1}}', type=Resume) == Resume(True, {"a": 1})
    for bad in ({"approved": "yes"}, {"approved": True, "metadata": []}, {"approved": True, "x": 1}):
        with pytest.raises(msgspec.ValidationError):
            Resume.from_dict(bad)


def _agent() -> Agent:
    @tool
    async def refund(order: str) -> str:
        """Refund an order once a human approves."""
        decision = interrupt("approve the refund?", {"order": order})
        return f"{'approved' if decision.approved else 'refused'} by {decision.metadata['approver']}"

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"done: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("refund", {"order": messages[-1].content})])

    return Agent("resume-checks", FunctionModel(model), tools=[refund])


async def test_a_malformed_decision_leaves_the_pause_claimable(store_backend: Backend) -> None:
    runner = _agent()
    async with store_backend.open() as store, ActorSystem(store, runners=[runner]) as system:
        paused = await (await system.spawn(runner, "o1")).result(timeout=10)
        assert paused.status == "paused"
        eid = paused.execution_id
        rows = len(await system.history(eid))
        for approved, metadata in (("yes", {}), (None, {}), (1, {}), (True, ["approver", "x"])):
            with pytest.raises(TypeError):
                await system.claim(eid, Resume(approved=approved, metadata=metadata))
            with pytest.raises(TypeError):
                await system.resume(eid, Resume(approved=approved, metadata=metadata))
        assert len(await system.history(eid)) == rows  # nothing written, no pause used up
        assert [p.execution_id for p in await system.pending()] == [eid]
        good = Resume(approved=True, metadata={"approver": "alice"})
        await system.claim(eid, good)
        claimed = (await store.reentry(eid)).resume  # the decision as a sweep reads it back
        assert claimed is not None and Resume.from_dict(claimed) == good
        with anyio.fail_after(30):
            assert await system.sweep() == 1
        result = await system.ref(eid).result(timeout=10)
        assert result.output == "done: approved by alice"
