"""``Swarm``: what a definition refuses and records, the handoff tool's arguments, and re-entry at
the rows a swarm run can rest on (an entry member's pause before any hop, a handoff tool row left by
a crash, rows the swarm never writes).

A crash is the run's rows up to the step in flight, copied under a new id by ``store.append`` (as a
topology fork copies them): the store cannot tell them from the rows of a process that died there,
and no other process is needed. Runs that re-enter from the store take both backends.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
import msgspec
import pytest
from conftest import Backend

from actors import ActorSystem, Agent, Resume, Supervisor, Swarm, ToolNotFound, interrupt, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import HANDOFF, LLM_CALL, Checkpoint, InvalidPath, SQLiteStore, Store, new_id

pytestmark = pytest.mark.anyio

LIMIT = 30.0
Seen = dict[str, list[list[Message]]]


def member(
    name: str, decide: Callable[[list[Message]], str | ModelReply], seen: Seen, **options: object
) -> Agent:
    """An agent that records the conversation each of its model calls saw."""

    def fn(messages: list[Message]) -> str | ModelReply:
        seen.setdefault(name, []).append(list(messages))
        return decide(messages)

    return Agent(name, FunctionModel(fn), **options)  # type: ignore[arg-type]


def hand(to: str, **arguments: object) -> ModelReply:
    return ModelReply(tool_calls=[ToolCall(f"handoff_to_{to}", dict(arguments))])


# -- the definition --------------------------------------------------------------------------------


def test_a_swarm_name_is_a_non_empty_str_without_separators_or_edge_spaces() -> None:
    a = Agent("a", FunctionModel(lambda m: "x"))
    for bad in ("", " s", "s ", "a:b", "a/b", 5, None):
        with pytest.raises(ValueError, match="must be a non-empty str without '/', ':' or edge spaces"):
            Swarm(bad, [a])  # type: ignore[arg-type]
    assert Swarm("s-1.x", [a]).name == "s-1.x"


def test_max_handoffs_is_an_int_of_zero_or_more_and_ten_by_default() -> None:
    model = FunctionModel(lambda m: "x")
    a, b = Agent("a", model), Agent("b", model)
    assert Swarm("s", [a, b]).max_handoffs == 10
    assert Swarm("s", [a, b], max_handoffs=0).max_handoffs == 0
    for bad in (True, False, "3", 1.5, None, -1):
        with pytest.raises(ValueError, match=r"swarm 's': max_handoffs must be an int >= 0, not "):
            Swarm("s", [a, b], max_handoffs=bad)  # type: ignore[arg-type]


def test_a_member_that_already_has_a_handoff_tool_for_a_peer_is_refused() -> None:
    @tool
    def handoff_to_b() -> str:
        """A tool of the member's own, under the name of a handoff."""
        return "mine"

    model = FunctionModel(lambda m: "x")
    a, b = Agent("a", model, tools=[handoff_to_b]), Agent("b", model)
    with pytest.raises(ValueError, match=r"^swarm 's': member 'a' already has a handoff_to_ tool$"):
        Swarm("s", [a, b])
    with pytest.raises(ValueError, match="member 'a' already has a handoff_to_ tool"):
        Swarm("s", [b, a], handoffs={"a": ["b"]})
    # The name only clashes with a peer the member may hand off to.
    assert Swarm("s", [a, b], handoffs={"b": ["a"]}).handoffs == {"a": (), "b": ("a",)}


def test_a_bad_version_names_the_swarm() -> None:
    a = Agent("a", FunctionModel(lambda m: "x"))
    with pytest.raises(ValueError, match=r"^swarm 's': version must be a non-empty str"):
        Swarm("s", [a], version=" 1")
    assert Swarm("s", [a], version="1").version == "1"


def test_repr_and_fingerprint() -> None:
    model = FunctionModel(lambda m: "x")
    swarm = Swarm("desk", [Agent("a", model), Agent("b", model)], entry="b")
    assert repr(swarm) == "Swarm('desk', agents=['a', 'b'], entry='b')"
    fingerprint = swarm.fingerprint
    assert set(fingerprint) == {"digest", "parts"} and len(fingerprint["digest"]) == 16
    assert "swarm:desk#swarm" in fingerprint["parts"]
    assert swarm.fingerprint is fingerprint  # computed once


# -- runs ------------------------------------------------------------------------------------------


async def test_max_handoffs_zero_fails_the_first_hop(tmp_path: Path) -> None:
    seen: Seen = {}
    swarm = Swarm(
        "none", [member("a", lambda m: hand("b"), seen), member("b", lambda m: "b", seen)], max_handoffs=0
    )
    async with SQLiteStore(tmp_path / "t.db") as store, ActorSystem(store) as system:
        with anyio.fail_after(LIMIT):
            result = await (await system.spawn(swarm, "go", execution_id="zero")).result()
        rows = await system.history("zero")
    assert result.status == "failed" and result.error is not None
    assert "max_handoffs=0" in result.error and "(hops: a -> b)" in result.error
    assert HANDOFF not in [row.step_type for row in rows]
    assert "b" not in seen


async def test_a_system_message_of_the_input_is_not_passed_to_members(tmp_path: Path) -> None:
    seen: Seen = {}
    swarm = Swarm(
        "desk",
        [
            member("a", lambda m: hand("b"), seen, instructions="You are a."),
            member("b", lambda m: "done", seen, instructions="You are b."),
        ],
    )
    given = [Message("system", "Speak like a pirate."), Message("user", "help")]
    async with SQLiteStore(tmp_path / "t.db") as store, ActorSystem(store) as system:
        with anyio.fail_after(LIMIT):
            result = await (await system.spawn(swarm, given, execution_id="sys")).result()
    assert result.output == "done"
    # Each member speaks under its own instructions only.
    (a_saw,) = seen["a"]
    assert [(m.role, m.content) for m in a_saw] == [("system", "You are a."), ("user", "help")]
    (b_saw,) = seen["b"]
    assert [m.content for m in b_saw if m.role == "system"] == ["You are b."]


async def test_handoff_arguments_are_checked_and_the_reason_defaults_to_empty(tmp_path: Path) -> None:
    seen: Seen = {}
    attempts = [
        hand("b", reason="r", urgent=True),  # an argument the tool does not take
        hand("b", reason="r", context="not an object"),
        hand("b", reason=7, context={}),
        hand("b"),  # neither: an empty reason, no context
    ]

    def a(messages: list[Message]) -> ModelReply:
        return attempts[len(seen["a"]) - 1]

    swarm = Swarm("args", [member("a", a, seen), member("b", lambda m: "b took over", seen)])
    async with SQLiteStore(tmp_path / "t.db") as store, ActorSystem(store) as system:
        with anyio.fail_after(LIMIT):
            result = await (await system.spawn(swarm, "go", execution_id="args")).result()
        rows = await system.history("args")
    assert result.output == "b took over"
    refusal = "Tool 'handoff_to_b' failed: it takes reason (a string) and context (an object)"
    assert [saw[-1].content for saw in seen["a"][1:]] == [refusal] * 3
    (hop,) = [row for row in rows if row.step_type == HANDOFF]
    assert hop.node_input == {"from": "a", "to": "b", "reason": ""}
    assert hop.state_snapshot.get("shared", {}) == {}


# -- re-entry --------------------------------------------------------------------------------------


def gated_desk(with_gate: bool = True) -> Swarm:
    """``a`` (the entry) calls ``gate``, which pauses, before any hop; then hands to ``b``."""

    @tool
    def gate(item: str) -> str:
        """Ask a human about an item."""
        decision = interrupt("approve", {"item": item})
        return f"{item}: approved={decision.approved}"

    def a(messages: list[Message]) -> ModelReply:
        if messages[-1].role == "tool":
            return hand("b", reason=messages[-1].content)
        return ModelReply(tool_calls=[ToolCall("gate", {"item": "5"})])

    def b(messages: list[Message]) -> str:
        return f"b: {messages[-1].content}"

    return Swarm(
        "desk",
        [Agent("a", FunctionModel(a), tools=[gate] if with_gate else []), Agent("b", FunctionModel(b))],
    )


async def test_a_pause_of_the_entry_member_before_any_hop_resumes(store_backend: Backend) -> None:
    with anyio.fail_after(LIMIT):
        async with store_backend.open() as store, ActorSystem(store, runners=[gated_desk()]) as system:
            paused = await (await system.spawn(gated_desk(), "go", execution_id="gate")).result(timeout=20)
            assert paused.status == "paused" and paused.pending is not None
            assert paused.pending.agent_path == "swarm:desk/agent:a/tool:gate"
        # A build of the swarm whose member lacks the paused tool: refused before anything is written.
        async with store_backend.open() as store, ActorSystem(store, runners=[gated_desk(False)]) as system:
            before = await system.history("gate")
            with pytest.raises(ToolNotFound) as refused:
                await system.resume("gate", Resume(approved=True), timeout=20)
            assert str(refused.value) == "agent 'a' has no tool named 'gate' (run 'gate')"
            assert await system.history("gate") == before
            assert (await system.status("gate")).status == "paused"
        async with store_backend.open() as store, ActorSystem(store, runners=[gated_desk()]) as system:
            done = await system.resume("gate", Resume(approved=True), timeout=20)
            rows = await system.history("gate")
    assert (done.status, done.output) == ("completed", "b: handed off to b")
    (hop,) = [row for row in rows if row.step_type == HANDOFF]
    assert hop.node_input == {"from": "a", "to": "b", "reason": "5: approved=True"}


async def crashed_at(store: Store, rows: list[Checkpoint], into: str) -> None:
    """``rows`` (a prefix of another run's) as the whole log of run ``into``: a run whose process
    died right after writing the last of them."""
    for row in rows:
        await store.append(msgspec.structs.replace(row, execution_id=into, checkpoint_id=new_id()))


async def test_a_crash_right_after_the_handoff_tool_row_recovers_into_the_hop(store_backend: Backend) -> None:
    seen: Seen = {}
    swarm = Swarm(
        "desk", [member("a", lambda m: hand("b", reason="yours"), seen), member("b", lambda m: "b", seen)]
    )
    with anyio.fail_after(LIMIT):
        async with store_backend.open() as store, ActorSystem(store, runners=[swarm]) as system:
            await (await system.spawn(swarm, "go", execution_id="whole")).result(timeout=20)
            whole = await system.history("whole")
            handing = next(
                i for i, row in enumerate(whole) if row.agent_path == "swarm:desk/agent:a/tool:handoff_to_b"
            )
            await crashed_at(store, whole[: handing + 1], "crashed")
            seen.clear()
            done = await system.resume("crashed", timeout=20)
            rows = await system.history("crashed")
    assert (done.status, done.output) == ("completed", "b")
    assert "a" not in seen  # the handoff tool row is re-run; a's model is not called again
    (hop,) = [row for row in rows if row.step_type == HANDOFF]
    assert hop.node_input == {"from": "a", "to": "b", "reason": "yours"}


async def test_a_row_the_swarm_never_writes_is_refused_naming_it(store_backend: Backend) -> None:
    seen: Seen = {}
    swarm = Swarm("desk", [member("a", lambda m: hand("b"), seen), member("b", lambda m: "b", seen)])
    with anyio.fail_after(LIMIT):
        async with store_backend.open() as store, ActorSystem(store, runners=[swarm]) as system:
            await (await system.spawn(swarm, "go", execution_id="whole")).result(timeout=20)
            first = (await system.history("whole"))[0]
            # A model turn at the swarm's own path (a swarm writes only hops there).
            await crashed_at(store, [first], "own")
            own = msgspec.structs.replace(first, seq=1, agent_path="swarm:desk", step_type=LLM_CALL)
            await crashed_at(store, [own], "own")
            with pytest.raises(TypeError, match=r"^swarm 'swarm:desk' wrote no row 'turn:0'$"):
                await system.resume("own", timeout=20)
            # A row without a path.
            await crashed_at(store, [first], "pathless")
            await crashed_at(store, [msgspec.structs.replace(first, seq=1, agent_path=None)], "pathless")
            with pytest.raises(InvalidPath, match=r"^an agent_path must be a non-empty string, not ''$"):
                await system.resume("pathless", timeout=20)


def test_agents_swarms_supervisors_and_roles_share_one_name_rule() -> None:
    model = FunctionModel(lambda m: "x")
    for bad in ("", " s", "s ", "a:b", "a/b", 5, None):
        for build in (
            lambda bad=bad: Agent(bad, model),
            lambda bad=bad: Swarm(bad, [Agent("a", model)]),
            lambda bad=bad: Supervisor(bad, Agent("m", model), {"w": Agent("a", model)}),
            lambda bad=bad: Supervisor("s", Agent("m", model), {bad: Agent("a", model)}),
        ):
            with pytest.raises(ValueError, match="must be a non-empty str without '/', ':' or edge spaces"):
                build()
