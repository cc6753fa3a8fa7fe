"""Rule 6 with more than one sibling: every call a pause left behind gets the note, none is run.

With three calls in a reply and the first pausing, the model reads, after the resume, the first
tool's result and the note for each of the other two; a request to a chat server with a call left
unanswered is refused, so every one must be answered. Both backends.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from conftest import Backend

from actors import ActorSystem, Agent, Resume, interrupt, tool
from actors.lowlevel import SIBLING_NOTE
from actors.models import FunctionModel, Message, ModelReply, ToolCall

pytestmark = pytest.mark.anyio


async def test_every_sibling_a_pause_left_behind_gets_the_note(
    store_backend: Backend, tmp_path: Path
) -> None:
    ran: list[str] = []

    @tool
    def ask() -> str:
        """Pauses for a decision."""
        decision = interrupt("approve", {"what": "three things"})
        return f"approved={decision.approved}"

    @tool
    def second() -> str:
        """A sibling."""
        ran.append("second")
        return "second ran"

    @tool
    def third() -> str:
        """Another sibling."""
        ran.append("third")
        return "third ran"

    seen: list[list[Message]] = []

    def model(messages: list[Message]) -> ModelReply | str:
        if messages[-1].role == "tool":
            seen.append(messages)
            return "done"
        return ModelReply(tool_calls=[ToolCall("ask", {}), ToolCall("second", {}), ToolCall("third", {})])

    agent = Agent("siblings3", FunctionModel(model), tools=[ask, second, third])
    store = store_backend.open()
    with anyio.fail_after(30):
        async with store, ActorSystem(store, runners=[agent]) as system:
            paused = await (await system.spawn(agent, "go", execution_id="three")).result(timeout=10)
            assert paused.status == "paused"
            result = await system.resume("three", Resume(approved=True), timeout=10)
    assert result.status == "completed" and ran == []
    (messages,) = seen
    calls = next(m for m in messages if m.role == "assistant" and m.tool_calls).tool_calls
    answers = {m.tool_call_id: m.content for m in messages if m.role == "tool"}
    assert answers == {calls[0].id: "approved=True", calls[1].id: SIBLING_NOTE, calls[2].id: SIBLING_NOTE}
