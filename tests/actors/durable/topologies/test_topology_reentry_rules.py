"""A topology keeps an agent's rules across a pause and a crash: rule 6 and ``max_handoffs``.

* Rule 6 inside a topology: a manager's reply asks for a delegation and another tool (a swarm
  member's reply for a handoff and another tool); the delegated worker (the member handed to)
  pauses. After the resume the other tool is not run, and the model reads the sibling note for it.
* ``max_handoffs`` counts the hops of one invocation of the swarm across re-entry: a swarm resumed
  after a pause, or recovered after its process died, gains no extra hop.

Both backends; the crash is a real process that kills itself mid-tool.
"""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import anyio
import pytest
from conftest import Backend

from actors import ActorSystem, Agent, AlreadyResumed, Resume, RunResult, Supervisor, Swarm, interrupt, tool
from actors.lowlevel import SIBLING_NOTE
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import HANDOFF

pytestmark = pytest.mark.anyio

HERE = Path(__file__).resolve().parent
LIMIT = 60.0


def answers(messages: list[Message]) -> dict[str, str]:
    """Each tool call of the conversation and what the model read for it, by the call's name."""
    names = {call.id: call.name for m in messages if m.role == "assistant" for call in m.tool_calls}
    return {names[m.tool_call_id or ""]: str(m.content) for m in messages if m.role == "tool"}


def gate_tool(ran: list[str]) -> object:
    @tool
    def gate(item: str) -> str:
        """Ask a human about an item."""
        decision = interrupt("approve", {"item": item})
        ran.append("gate")
        return f"{item}: approved={decision.approved}"

    return gate


def side_tool(ran: list[str]) -> object:
    @tool
    def side(note: str) -> str:
        """A sibling of the delegation or the handoff."""
        ran.append("side")
        return f"side ran: {note}"

    return side


async def test_a_sibling_of_a_delegation_whose_worker_paused_is_not_run(store_backend: Backend) -> None:
    ran: list[str] = []
    manager_saw: list[list[Message]] = []

    def manager(messages: list[Message]) -> str | ModelReply:
        manager_saw.append(list(messages))
        if messages[-1].role == "tool":
            return "manager read: " + " | ".join(f"{k}={v}" for k, v in sorted(answers(messages).items()))
        return ModelReply(
            tool_calls=[ToolCall("delegate_to_clerk", {"task": "file 9"}), ToolCall("side", {"note": "n"})]
        )

    def clerk(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"clerk: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("gate", {"item": "9"})])

    sup = Supervisor(
        "ops",
        Agent("boss", FunctionModel(manager), tools=[side_tool(ran)]),
        {"clerk": Agent("clerk", FunctionModel(clerk), tools=[gate_tool(ran)])},
    )
    with anyio.fail_after(LIMIT):
        async with store_backend.open() as store, ActorSystem(store, runners=[sup]) as system:
            paused = await (await system.spawn(sup, "go", execution_id="sup-sib")).result(timeout=20)
            assert paused.status == "paused"
            assert paused.pending is not None
            assert paused.pending.agent_path == "supervisor:ops/worker:clerk/tool:gate"
            done = await system.resume("sup-sib", Resume(approved=True), timeout=20)
    assert ran == ["gate"]  # the sibling never ran
    assert done.status == "completed"
    assert done.output == f"manager read: delegate_to_clerk=clerk: 9: approved=True | side={SIBLING_NOTE}"
    assert len(manager_saw) == 2


async def test_a_sibling_of_a_handoff_whose_member_paused_is_not_run(store_backend: Backend) -> None:
    ran: list[str] = []
    b_saw: list[list[Message]] = []

    def a(messages: list[Message]) -> ModelReply:
        return ModelReply(tool_calls=[ToolCall("handoff_to_b", {}), ToolCall("side", {"note": "n"})])

    def b(messages: list[Message]) -> str | ModelReply:
        b_saw.append(list(messages))
        if messages[-1].role == "tool" and messages[-1].name == "gate":
            return "b read: " + " | ".join(f"{k}={v}" for k, v in sorted(answers(messages).items()))
        return ModelReply(tool_calls=[ToolCall("gate", {"item": "4"})])

    swarm = Swarm(
        "desk",
        [
            Agent("a", FunctionModel(a), tools=[side_tool(ran)]),
            Agent("b", FunctionModel(b), tools=[gate_tool(ran)]),
        ],
    )
    with anyio.fail_after(LIMIT):
        async with store_backend.open() as store, ActorSystem(store, runners=[swarm]) as system:
            paused = await (await system.spawn(swarm, "go", execution_id="sw-sib")).result(timeout=20)
            assert paused.status == "paused"
            done = await system.resume("sw-sib", Resume(approved=True), timeout=20)
    assert ran == ["gate"]
    assert done.status == "completed"
    assert (
        done.output == f"b read: gate=4: approved=True | handoff_to_b=handed off to b | side={SIBLING_NOTE}"
    )
    assert [len([m for m in seen if m.role == "tool"]) for seen in b_saw] == [2, 3]


def pingpong(ran: list[str], *, die_in_the_tool: bool = False) -> Swarm:
    """``a`` hands to ``b``; ``b`` runs its gate (a pause, or a crash) and then hands back to ``a``,
    one hop past ``max_handoffs=1``; ``a`` would answer."""

    @tool
    def gate(item: str) -> str:
        """Ask a human (or, in the crashing build, die the first time)."""
        if die_in_the_tool:
            marker = Path(os.environ["PINGPONG_MARKS"]) / "died"
            if not marker.exists():
                marker.write_text("1")
                os._exit(9)
            ran.append("gate")
            return f"{item}: recovered"
        decision = interrupt("approve", {"item": item})
        ran.append("gate")
        return f"{item}: approved={decision.approved}"

    def a(messages: list[Message]) -> str | ModelReply:
        if any(m.role == "tool" and m.name == "gate" for m in messages):
            return "a answered after a second hop"
        return ModelReply(tool_calls=[ToolCall("handoff_to_b", {})])

    def b(messages: list[Message]) -> ModelReply:
        if messages[-1].role == "tool" and messages[-1].name == "gate":
            return ModelReply(tool_calls=[ToolCall("handoff_to_a", {})])
        return ModelReply(tool_calls=[ToolCall("gate", {"item": "4"})])

    return Swarm(
        "pingpong",
        [Agent("a", FunctionModel(a)), Agent("b", FunctionModel(b), tools=[gate])],
        max_handoffs=1,
    )


def assert_limit_held(result: RunResult, hops: list[str]) -> None:
    assert result.status == "failed"
    assert result.error is not None and result.error.startswith("HandoffLimitExceeded: ")
    assert "max_handoffs=1" in result.error and "a -> b -> a" in result.error
    assert hops == ["handoff:0"]


async def test_max_handoffs_counts_the_hops_before_a_pause(store_backend: Backend) -> None:
    ran: list[str] = []
    swarm = pingpong(ran)
    with anyio.fail_after(LIMIT):
        async with store_backend.open() as store, ActorSystem(store, runners=[swarm]) as system:
            paused = await (await system.spawn(swarm, "go", execution_id="pp-pause")).result(timeout=20)
            assert paused.status == "paused"
        # Another system and store instance resumes it: the count comes from the rows.
        async with store_backend.open() as store, ActorSystem(store, runners=[swarm]) as system:
            done = await system.resume("pp-pause", Resume(approved=True), timeout=20)
            rows = await system.history("pp-pause")
    assert ran == ["gate"]
    assert_limit_held(done, [r.node_id for r in rows if r.step_type == HANDOFF])


CHILD = textwrap.dedent(
    """
    import os
    import sys
    from pathlib import Path

    import anyio

    sys.path[:0] = [{tests!r}, {here!r}]
    from conftest import Backend
    from test_topology_reentry_rules import child

    anyio.run(child, Backend(*sys.argv[1:3], sys.argv[3] if sys.argv[3] != "-" else ""), backend=os.environ.get("TETHER_TEST_LOOP", "asyncio"))
    """
)


async def child(backend: Backend) -> None:
    """Spawn the crashing pingpong; ``b``'s tool kills this process after the first hop."""
    swarm = pingpong([], die_in_the_tool=True)
    async with backend.open() as store, ActorSystem(store, runners=[swarm]) as system:
        await (await system.spawn(swarm, "go", execution_id="pp-crash")).result(timeout=30)
    raise SystemExit("the tool was supposed to kill this process")


async def test_max_handoffs_counts_the_hops_before_a_crash(
    store_backend: Backend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PINGPONG_MARKS", str(tmp_path))
    code = CHILD.format(tests=str(HERE.parents[2]), here=str(HERE))
    ran: list[str] = []
    swarm = pingpong(ran, die_in_the_tool=True)
    with anyio.fail_after(LIMIT):
        died = await anyio.run_process([sys.executable, "-c", code, *store_backend.child_args()], check=False)
        assert died.returncode == 9, died.stderr.decode()
        async with store_backend.open() as store, ActorSystem(store, runners=[swarm]) as system:
            for _ in range(500):  # a dead owner's lock goes within milliseconds
                try:
                    done = await system.resume("pp-crash", timeout=20)
                    break
                except AlreadyResumed:
                    await anyio.sleep(0.01)
            rows = await system.history("pp-crash")
    assert ran == ["gate"]
    assert_limit_held(done, [r.node_id for r in rows if r.step_type == HANDOFF])
