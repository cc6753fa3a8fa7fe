"""Durable runs through ``ActorSystem``: what the boundary proofs (tests/proofs) do not cover.

Errors of spawn/send/resume/fork/history and that a refused resume writes nothing; ``max_turns``;
rule 12 (a failed run's actor is not restarted); tool errors and unknown tools; cancel of a paused,
a running, a completed and a never-seen run; fork with input and from a named checkpoint;
``current_run()``; sibling calls after a crash (a child process killed with ``os._exit``);
``pending()`` order; a light prune; step logging; ``RunRef`` timeouts and sends; tool-call ids.

Rule numbers are those of ``docs/durability.md``. Tests about the store run on SQLite and PostgreSQL
(``store_backend``); every test is time-bounded.
"""

from __future__ import annotations

import io
import logging
import os
import sys
import textwrap
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager, redirect_stderr, redirect_stdout
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import Backend

from actors import (
    ActorSystem,
    Agent,
    AlreadyResumed,
    MaxTurnsExceeded,
    Resume,
    ResumeRequired,
    RunExists,
    RunnerNotFound,
    RunNotFound,
    RunRef,
    RunResult,
    ToolNotFound,
    current_run,
    interrupt,
    tool,
)
from actors.lowlevel import SIBLING_NOTE, Tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import Checkpoint, Store

pytestmark = pytest.mark.anyio

#: Bound on one test's body (seconds); a hang fails instead of stalling the suite.
LIMIT = 20.0
#: Bound on a child process.
CHILD_LIMIT = 60.0
TESTS_DIR = Path(__file__).resolve().parents[2]

ModelFn = Callable[[list[Message]], str | ModelReply]


# -- helpers ----------------------------------------------------------------------------------------


@asynccontextmanager
async def opened(backend: Backend) -> AsyncIterator[Store]:
    """A fresh store instance on ``backend``, set up, closed afterwards."""
    store = backend.open()
    await store.setup()
    try:
        yield store
    finally:
        await store.close()


@asynccontextmanager
async def running(backend: Backend, *runners: Agent) -> AsyncIterator[tuple[Store, ActorSystem]]:
    """A fresh store instance on ``backend`` and an ActorSystem on it with ``runners``."""
    async with opened(backend) as store, ActorSystem(store, runners=runners) as system:
        yield store, system


def calls(*names: str) -> ModelReply:
    """A model reply asking for the tools ``names`` (no arguments), in order."""
    return ModelReply(tool_calls=[ToolCall(name, {}) for name in names])


def tool_then_answer(*names: str) -> ModelFn:
    """A model that calls ``names`` on the first turn and, once tools replied, answers with what they said."""

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return "answer: " + " | ".join(m.content for m in messages if m.role == "tool")
        return calls(*names)

    return model


def approval_agent(name: str = "approver", *, tools: Sequence[Tool] | None = None) -> Agent:
    """An agent whose only tool pauses for a manager and then says what was decided."""

    @tool
    def refund(order: str, amount: int) -> str:
        """Refund an order (needs approval)."""
        decision = interrupt("manager_approval", {"order": order, "amount": amount})
        return f"approved={decision.approved}"

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"Done: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("refund", {"order": "1042", "amount": 500})])

    return Agent(name, FunctionModel(model), tools=[refund] if tools is None else tools)


def blocking_agent(name: str = "blocker") -> tuple[Agent, anyio.Event, anyio.Event]:
    """An agent whose tool signals ``entered`` and then waits for ``release``."""
    entered, release = anyio.Event(), anyio.Event()

    @tool
    async def wait() -> str:
        """Wait until released."""
        entered.set()
        await release.wait()
        return "released"

    return Agent(name, FunctionModel(tool_then_answer("wait")), tools=[wait]), entered, release


def shape(rows: Sequence[Checkpoint]) -> list[tuple[str, str, str]]:
    return [(r.node_id, r.step_type, r.status) for r in rows]


async def paused_run(system: ActorSystem, agent: Agent, execution_id: str | None = None) -> str:
    """Spawn ``agent`` and wait until it pauses; returns its id."""
    result = await (await system.spawn(agent, "refund please", execution_id=execution_id)).result(timeout=5)
    assert result.status == "paused", result
    return result.execution_id


async def wait_unlocked(backend: Backend, execution_id: str) -> None:
    """Wait (at most 5 s) until no session holds the run's ownership lock.

    After a child died with ``os._exit``, PostgreSQL frees its advisory lock once the server has seen
    the disconnect: measured up to ~10 ms after the child was reaped (the first try fails in ~3% of
    runs). The recovery proofs are about that moment; the tests here are about what recovery does.
    """
    async with opened(backend) as probe:
        for _ in range(500):
            if await probe.try_lock(execution_id):
                await probe.unlock(execution_id)
                return
            await anyio.sleep(0.01)
    pytest.fail(f"the ownership lock of run {execution_id!r} is still held 5 s after its owner died")


async def wait_passivated(system: ActorSystem, execution_id: str) -> None:
    """Wait (at most 5 s) until no live actor for ``execution_id`` is left in ``system``."""
    for _ in range(1000):
        if system.runtime.registry.lookup(execution_id) is None:
            return
        await anyio.sleep(0.005)
    pytest.fail(f"the actor of run {execution_id!r} is still live after 5 s")


# -- spawn --------------------------------------------------------------------------------------------


async def test_spawn_on_a_used_id_raises_run_exists_from_spawn(store_backend: Backend) -> None:
    done = Agent("done", FunctionModel(lambda messages: "ok"))
    blocker, entered, release = blocking_agent()
    with anyio.fail_after(LIMIT):
        async with running(store_backend, done, blocker) as (_, system):
            assert (
                await (await system.spawn(done, "hi", execution_id="used")).result()
            ).status == "completed"
            rows = await system.history("used")
            with pytest.raises(RunExists, match="'used'"):
                await system.spawn(done, "again", execution_id="used")
            assert await system.history("used") == rows

            ref = await system.spawn(blocker, "go", execution_id="live")
            await entered.wait()
            with pytest.raises(RunExists, match="'live'"):
                await system.spawn(blocker, "again", execution_id="live")
            # Another process (here: another system and store on the same database) is refused too.
            async with running(store_backend, blocker) as (_, other):
                with pytest.raises(RunExists, match="'live'"):
                    await other.spawn(blocker, "again", execution_id="live")
            release.set()
            assert (await ref.result(timeout=5)).status == "completed"
            assert shape(await system.history("live")) == [
                ("turn:0", "llm_call", "completed"),
                ("turn:0/tool:wait", "tool_call", "completed"),
                ("turn:1", "llm_call", "completed"),
                ("run_end", "run_end", "completed"),
            ]


async def test_spawn_without_id_is_unique_and_instructions_come_first(store_backend: Backend) -> None:
    agent = Agent("bot", FunctionModel(lambda messages: "ok"), instructions="Be brief.")
    with anyio.fail_after(LIMIT):
        async with running(store_backend, agent) as (_, system):
            refs = [await system.spawn(agent, f"hello {i}") for i in range(5)]
            ids = [ref.execution_id for ref in refs]
            assert len(set(ids)) == 5 and all(ids)
            for i, ref in enumerate(refs):
                result = await ref.result(timeout=5)
                assert result.execution_id == ref.execution_id and result.output == "ok"
                first = (await system.history(ref.execution_id))[0]
                assert first.state_snapshot["messages"][:2] == [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": f"hello {i}"},
                ]
            listed = await system.spawn(agent, [Message("user", "a"), Message("user", "b")])
            await listed.result(timeout=5)
            first = (await system.history(listed.execution_id))[0]
            assert [m["content"] for m in first.state_snapshot["messages"]] == ["Be brief.", "a", "b"]


# -- refusals that write nothing ----------------------------------------------------------------------


async def test_send_to_an_unknown_run_raises_run_not_found(store_backend: Backend) -> None:
    with anyio.fail_after(LIMIT):
        async with running(store_backend, approval_agent()) as (_, system):
            with pytest.raises(RunNotFound, match="'nope-42'"):
                await system.send("nope-42", Resume(approved=True))
            with pytest.raises(RunNotFound, match="'nope-42'"):
                await system.resume("nope-42")
            with pytest.raises(RunNotFound, match="'nope-42'"):
                await system.history("nope-42")
            with pytest.raises(RunNotFound, match="'nope-42'"):
                await system.fork("nope-42")
            with pytest.raises(RunNotFound, match="'nope-42'"):
                await system.cancel("nope-42")


async def test_resume_refusals_write_nothing(store_backend: Backend) -> None:
    agent = approval_agent()
    with anyio.fail_after(LIMIT):
        async with opened(store_backend) as reader:
            async with running(store_backend, agent) as (_, system):
                run_id = await paused_run(system, agent)
            before = await reader.history(run_id)
            pending_before = await reader.pending(run_id)
            assert len(pending_before) == 1

            async def unchanged() -> None:
                assert await reader.history(run_id) == before
                assert await reader.pending(run_id) == pending_before

            # A paused run resumed without a decision.
            async with running(store_backend, agent) as (_, system):
                with pytest.raises(ResumeRequired, match=f"'{run_id}'") as info:
                    await system.resume(run_id)
                assert "manager_approval" in str(info.value)
                await unchanged()

            # A process whose runners do not include the stored runner's name.
            other_agent = Agent("someone-else", FunctionModel(lambda messages: "ok"))
            async with running(store_backend, other_agent) as (_, system):
                with pytest.raises(RunnerNotFound) as runner_info:
                    await system.send(run_id, Resume(approved=True))
                text = str(runner_info.value)
                assert "'approver'" in text and f"'{run_id}'" in text
                assert runner_info.value.runner == "approver" and runner_info.value.execution_id == run_id
                await unchanged()

            # The runner is there but its paused tool was renamed away.
            @tool
            def refund_v2(order: str, amount: int) -> str:
                """The renamed tool."""
                return "never"

            async with running(store_backend, approval_agent(tools=[refund_v2])) as (_, system):
                with pytest.raises(ToolNotFound) as tool_info:
                    await system.resume(run_id, Resume(approved=True))
                assert "'refund'" in str(tool_info.value) and f"'{run_id}'" in str(tool_info.value)
                await unchanged()
                with pytest.raises(ResumeRequired):
                    await system.resume(run_id)  # no decision: refused before the tool is looked up
                await unchanged()

            # The original runner still resumes it, once.
            async with running(store_backend, approval_agent()) as (_, system):
                result = await system.resume(run_id, Resume(approved=True), timeout=5)
                assert result.status == "completed" and result.output == "Done: approved=True"
                assert await system.pending() == []


# -- max_turns and failures -----------------------------------------------------------------------------


async def test_max_turns_fails_the_run(store_backend: Backend) -> None:
    @tool
    def again() -> str:
        """Go round once more."""
        return "more"

    agent = Agent("looper", FunctionModel(lambda messages: calls("again")), tools=[again], max_turns=3)
    with anyio.fail_after(LIMIT):
        async with running(store_backend, agent) as (_, system):
            result = await (await system.spawn(agent, "loop")).result(timeout=5)
            assert result.status == "failed"
            assert result.error is not None and "MaxTurnsExceeded" in result.error
            rows = await system.history(result.execution_id)
            assert [r.node_id for r in rows if r.step_type == "llm_call"] == ["turn:0", "turn:1", "turn:2"]
            end = rows[-1]
            assert (end.step_type, end.status) == ("run_end", "failed")
            assert "MaxTurnsExceeded" in end.state_snapshot["run_error"]
            assert "max_turns=3" in end.state_snapshot["run_error"]
            assert issubclass(MaxTurnsExceeded, Exception)


async def test_a_model_that_raises_fails_the_run_and_the_actor_is_not_restarted(
    store_backend: Backend,
) -> None:
    model_calls: list[int] = []

    def broken(messages: list[Message]) -> str:
        model_calls.append(len(messages))
        raise RuntimeError("model down")

    agent = Agent("fragile", FunctionModel(broken))
    with anyio.fail_after(LIMIT):
        async with running(store_backend, agent) as (_, system):
            ref = await system.spawn(agent, "hi")
            result = await ref.result(timeout=5)
            assert result.status == "failed"
            assert result.error == "RuntimeError: model down"
            await wait_passivated(system, ref.execution_id)
            await anyio.sleep(0.05)  # a restart would have called the model again by now
            assert model_calls == [1]
            assert system.runtime.registry.lookup(ref.execution_id) is None
            rows = await system.history(ref.execution_id)
            assert shape(rows) == [("turn:0", "llm_call", "completed"), ("run_end", "run_end", "failed")]
            assert rows[-1].state_snapshot["run_error"] == "RuntimeError: model down"
            # A failed run is read back as failed by a ref with nothing in flight.
            assert (await RunRef(system._runs, ref.execution_id).result()).status == "failed"


async def test_a_tool_that_raises_is_read_by_the_model(store_backend: Backend) -> None:
    @tool
    def boom(order: str) -> str:
        """Always fails."""
        raise ValueError(f"no order {order}")

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"saw: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("boom", {"order": "7"})])

    agent = Agent("brave", FunctionModel(model), tools=[boom])
    with anyio.fail_after(LIMIT):
        async with running(store_backend, agent) as (_, system):
            result = await (await system.spawn(agent, "try")).result(timeout=5)
            assert result.status == "completed"
            assert result.output == "saw: Tool 'boom' failed: ValueError: no order 7"
            rows = await system.history(result.execution_id)
            assert rows[-1].status == "completed"


async def test_an_unknown_tool_is_an_error_the_model_reads(store_backend: Backend) -> None:
    agent = Agent("confused", FunctionModel(tool_then_answer("teleport")))
    with anyio.fail_after(LIMIT):
        async with running(store_backend, agent) as (_, system):
            result = await (await system.spawn(agent, "go")).result(timeout=5)
            assert result.status == "completed"
            assert result.output is not None
            assert "Tool 'teleport' failed" in result.output and "no tool named 'teleport'" in result.output
            rows = await system.history(result.execution_id)
            assert [r.node_id for r in rows] == ["turn:0", "turn:0/tool:teleport", "turn:1", "run_end"]


# -- cancel ---------------------------------------------------------------------------------------------


def run_ends(rows: Sequence[Checkpoint]) -> list[Checkpoint]:
    return [r for r in rows if r.step_type == "run_end"]


async def test_cancel_a_paused_run_then_resume_it(store_backend: Backend) -> None:
    agent = approval_agent()
    with anyio.fail_after(LIMIT):
        async with running(store_backend, agent) as (store, system):
            run_id = await paused_run(system, agent)
            assert [p.execution_id for p in await system.pending()] == [run_id]
            result = await system.cancel(run_id)
            assert result.status == "failed" and result.error is not None and "cancelled" in result.error
            assert await system.pending() == [] and await store.pending(run_id) == []
            rows = await system.history(run_id)
            assert [(r.node_id, r.status) for r in run_ends(rows)] == [("run_end", "failed")]
            assert rows[-1].state_snapshot["run_reason"] == "cancelled"
            assert "hitl_pause" in [r.step_type for r in rows]  # the pause itself is history

            # A cancelled run resumes like a failed one: the tool runs again and pauses again (rule 7).
            again = await system.resume(run_id, timeout=5)
            assert again.status == "paused" and again.pending is not None
            assert again.pending.reason == "manager_approval"
            done = await system.resume(run_id, Resume(approved=False), timeout=5)
            assert done.status == "completed" and done.output == "Done: approved=False"


async def test_cancel_a_running_run(store_backend: Backend) -> None:
    agent, entered, _release = blocking_agent()
    with anyio.fail_after(LIMIT):
        async with running(store_backend, agent) as (_, system):
            ref = await system.spawn(agent, "go")
            await entered.wait()
            with anyio.fail_after(2):
                cancelled = await system.cancel(ref.execution_id, reason="operator")
            assert cancelled.status == "failed"
            result = await ref.result(timeout=2)
            assert result.status == "failed" and result.error is not None and "operator" in result.error
            rows = await system.history(ref.execution_id)
            ends = run_ends(rows)
            assert len(ends) == 1, shape(rows)
            assert ends[0].status == "failed" and ends[0].state_snapshot["run_reason"] == "operator"
            assert rows[-1] is not None and rows[-1].step_type == "run_end"
            await wait_passivated(system, ref.execution_id)


async def test_cancel_of_a_completed_run_is_refused(store_backend: Backend) -> None:
    agent = Agent("quick", FunctionModel(lambda messages: "done"))
    with anyio.fail_after(LIMIT):
        async with running(store_backend, agent) as (_, system):
            run_id = (await (await system.spawn(agent, "hi")).result(timeout=5)).execution_id
            rows = await system.history(run_id)
            with pytest.raises(AlreadyResumed, match=f"'{run_id}'"):
                await system.cancel(run_id)
            assert await system.history(run_id) == rows


async def test_cancel_from_a_process_that_never_saw_the_run(store_backend: Backend) -> None:
    agent = approval_agent()
    with anyio.fail_after(LIMIT):
        async with running(store_backend, agent) as (_, system):
            run_id = await paused_run(system, agent)
        async with running(store_backend, approval_agent()) as (store, stranger):
            result = await stranger.cancel(run_id, reason="stale")
            assert result.status == "failed"
            assert await store.pending(run_id) == []
            end = (await stranger.history(run_id))[-1]
            assert (end.step_type, end.status, end.state_snapshot["run_reason"]) == (
                "run_end",
                "failed",
                "stale",
            )
        async with running(store_backend, agent) as (_, system):
            assert await system.pending() == []
            assert run_ends(await system.history(run_id))[-1].state_snapshot["run_reason"] == "stale"


async def test_cancel_from_elsewhere_stops_the_live_owner_at_its_next_write(store_backend: Backend) -> None:
    agent, entered, release = blocking_agent()
    with anyio.fail_after(LIMIT):
        async with running(store_backend, agent) as (_, owner):
            ref = await owner.spawn(agent, "go")
            await entered.wait()
            async with running(store_backend, blocking_agent()[0]) as (_, stranger):
                assert (await stranger.cancel(ref.execution_id, reason="elsewhere")).status == "failed"
            release.set()  # the owner's tool returns; its next row loses to the marker (the log is the lock)
            with pytest.raises(AlreadyResumed):
                await ref.result(timeout=5)
            rows = await owner.history(ref.execution_id)
            assert shape(rows) == [
                ("turn:0", "llm_call", "completed"),
                ("turn:0/tool:wait", "tool_call", "completed"),
                ("run_end", "run_end", "failed"),
            ]
            assert rows[-1].state_snapshot["run_reason"] == "elsewhere"
            await wait_passivated(owner, ref.execution_id)


# -- fork -----------------------------------------------------------------------------------------------


def fork_model(messages: list[Message]) -> str | ModelReply:
    last = messages[-1]
    if last.role == "user" and last.content.startswith("and also"):
        return f"also: {last.content[len('and also ') :]}"
    if last.role == "tool":
        return f"looked up {last.content}"
    return ModelReply(tool_calls=[ToolCall("lookup", {"order": "1042"})])


async def test_fork_with_input_leaves_the_original_alone(store_backend: Backend) -> None:
    lookups: list[str] = []
    paths: list[str | None] = []

    @tool
    def lookup(order: str) -> str:
        """Look an order up."""
        lookups.append(order)
        info = current_run()
        paths.append(info.agent_path if info is not None else None)
        return f"order {order}"

    agent = Agent("forker", FunctionModel(fork_model), tools=[lookup])
    with anyio.fail_after(LIMIT):
        async with running(store_backend, agent) as (_, system):
            base_id = (await (await system.spawn(agent, "find 1042")).result(timeout=5)).execution_id
            original = await system.history(base_id)
            base_step = original[-2]  # the newest step (the marker is not one)
            assert base_step.node_id == "turn:1"

            ref = await system.fork(base_id, input="and also X")
            assert ref.execution_id != base_id
            result = await ref.result(timeout=5)
            assert result.status == "completed" and result.output == "also: X"
            rows = await system.history(ref.execution_id)
            origin = rows[0]
            assert (origin.node_id, origin.step_type, origin.seq) == ("fork_origin", "fork_origin", 0)
            assert origin.parent_checkpoint_id == base_step.checkpoint_id
            assert origin.state_snapshot["messages"][-1] == {"role": "user", "content": "and also X"}
            assert origin.state_snapshot["messages"][:-1] == base_step.state_snapshot["messages"]
            assert lookups == ["1042"]  # the fork asked the model, it did not re-run the tool
            assert await system.history(base_id) == original

            # From a named checkpoint (the tool row): the fork re-runs that tool with its arguments.
            tool_row = next(r for r in original if r.step_type == "tool_call")
            named = await system.fork(base_id, checkpoint_id=tool_row.checkpoint_id)
            named_result = await named.result(timeout=5)
            assert named_result.status == "completed" and named_result.output == "looked up order 1042"
            named_rows = await system.history(named.execution_id)
            assert named_rows[0].parent_checkpoint_id == tool_row.checkpoint_id
            assert lookups == ["1042", "1042"]
            assert paths == ["agent:forker/tool:lookup"] * 2  # the re-run tool runs as the tool (rule 3)
            assert await system.history(base_id) == original

            with pytest.raises(RunNotFound, match="'no-such-run'"):
                await system.fork("no-such-run", input="x")


async def test_fork_of_a_paused_run_pauses_again_as_the_tool(store_backend: Backend) -> None:
    agent = approval_agent()
    with anyio.fail_after(LIMIT):
        async with running(store_backend, agent) as (_, system):
            base_id = await paused_run(system, agent)
            original = await system.history(base_id)
            ref = await system.fork(base_id)
            result = await ref.result(timeout=5)
            assert result.status == "paused" and result.pending is not None
            assert (result.pending.node_id, result.pending.agent_path) == (
                "turn:0/tool:refund",
                "agent:approver/tool:refund",
            )
            rows = await system.history(ref.execution_id)
            assert shape(rows) == [
                ("fork_origin", "fork_origin", "completed"),
                ("turn:0/tool:refund", "hitl_pause", "interrupted"),
            ]
            assert rows[0].parent_checkpoint_id == original[-1].checkpoint_id
            assert rows[1].agent_path == "agent:approver/tool:refund"
            assert rows[1].parent_checkpoint_id is None  # only the fork_origin row names the base
            pending = {p.execution_id: p for p in await system.pending()}
            assert set(pending) == {base_id, ref.execution_id}
            assert pending[ref.execution_id] == result.pending
            # The fork and its base are resumed independently.
            forked = await system.resume(ref.execution_id, Resume(approved=False), timeout=5)
            assert forked.output == "Done: approved=False"
            based = await system.resume(base_id, Resume(approved=True), timeout=5)
            assert based.output == "Done: approved=True"


# -- the run context ------------------------------------------------------------------------------------


async def test_current_run_inside_and_outside_a_tool(tmp_path: Path) -> None:
    seen: list[Any] = []

    @tool
    async def where() -> str:
        """Where am I (async)."""
        seen.append(current_run())
        return "here"

    @tool
    def where_sync() -> str:
        """Where am I (in a thread)."""
        seen.append(current_run())
        return "there"

    agent = Agent(
        "locator", FunctionModel(tool_then_answer("where", "where_sync")), tools=[where, where_sync]
    )
    assert current_run() is None
    with anyio.fail_after(LIMIT):
        async with running(Backend("sqlite", str(tmp_path / "ctx.db")), agent) as (_, system):
            ref = await system.spawn(agent, "go")
            assert (await ref.result(timeout=5)).status == "completed"
    assert [(info.execution_id, info.agent_path) for info in seen] == [
        (ref.execution_id, "agent:locator/tool:where"),
        (ref.execution_id, "agent:locator/tool:where_sync"),
    ]
    assert current_run() is None


# -- sibling tool calls after a crash -------------------------------------------------------------------

CRASH_CHILD = textwrap.dedent(
    """
    import os
    import sys
    sys.path[:0] = [{tests!r}, {here!r}]
    import anyio
    from conftest import Backend
    from test_runs import crash_child
    anyio.run(crash_child, Backend(*sys.argv[1:3], sys.argv[3] if sys.argv[3] != "-" else ""), sys.argv[4], backend=os.environ.get("TETHER_TEST_LOOP", "asyncio"))
    """
)


def sibling_agent(marks: Path) -> Agent:
    """Two tool calls in one turn; ``first`` kills the process on its first run (``os._exit``)."""

    @tool
    def first() -> str:
        """Crashes the process the first time."""
        mark = marks / "first-ran"
        crashed = mark.exists()
        with mark.open("a") as out:
            out.write(f"{os.getpid()}\n")
        if not crashed:
            os._exit(17)
        return "first done"

    @tool
    def second() -> str:
        """The sibling."""
        with (marks / "second-ran").open("a") as out:
            out.write(f"{os.getpid()}\n")
        return "second done"

    return Agent("siblings", FunctionModel(tool_then_answer("first", "second")), tools=[first, second])


async def crash_child(backend: Backend, execution_id: str) -> None:
    """The child's part: start the run; ``first`` kills this process."""
    agent = sibling_agent(Path(os.environ["TETHER_TEST_MARKS"]))
    async with running(backend, agent) as (_, system):
        await (await system.spawn(agent, "both please", execution_id=execution_id)).result(timeout=30)
    raise SystemExit("the run was supposed to kill this process")


async def test_siblings_are_dispatched_after_a_crash(store_backend: Backend, tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    code = CRASH_CHILD.format(tests=str(TESTS_DIR), here=str(Path(__file__).parent))
    with anyio.fail_after(CHILD_LIMIT):
        child = await anyio.run_process(
            [sys.executable, "-c", code, *store_backend.child_args(), "crashy"],
            env={**os.environ, "TETHER_TEST_MARKS": str(marks)},
            check=False,
        )
    assert child.returncode == 17, child.stderr.decode()
    assert not (marks / "second-ran").exists()

    agent = sibling_agent(marks)
    with anyio.fail_after(LIMIT):
        await wait_unlocked(store_backend, "crashy")
        async with running(store_backend, agent) as (_, system):
            assert shape(await system.history("crashy")) == [
                ("turn:0", "llm_call", "completed"),
                ("turn:0/tool:first", "tool_call", "completed"),
            ]
            result = await system.resume("crashy", timeout=10)
            assert result.status == "completed"
            # The sibling ran (it had not started before the crash) and the model read its result.
            assert result.output == "answer: first done | second done"
            assert SIBLING_NOTE not in (result.output or "")
            rows = await system.history("crashy")
    assert [r.node_id for r in rows] == [
        "turn:0",
        "turn:0/tool:first",
        "turn:0/tool:first",  # the recover row
        "turn:0/tool:second",
        "turn:1",
        "run_end",
    ]
    assert rows[2].step_type == "recover"
    first_pids = (marks / "first-ran").read_text().split()
    assert len(first_pids) == 2 and first_pids[1] == str(os.getpid()) != first_pids[0]
    assert (marks / "second-ran").read_text().split() == [str(os.getpid())]


# -- reads: history, pending, prune ---------------------------------------------------------------------


async def test_pending_lists_paused_runs_newest_first(store_backend: Backend) -> None:
    agent = approval_agent()
    with anyio.fail_after(LIMIT):
        async with running(store_backend, agent) as (_, system):
            ids = [await paused_run(system, agent, execution_id=f"p{i}") for i in range(3)]
            pending = await system.pending()
            assert [p.execution_id for p in pending] == list(reversed(ids))
            assert all(p.reason == "manager_approval" for p in pending)
            assert all(p.node_id == "turn:0/tool:refund" for p in pending)
            assert all(p.agent_path == "agent:approver/tool:refund" for p in pending)
            assert pending[0].context == {"order": "1042", "amount": 500}
            await system.resume("p1", Resume(approved=True), timeout=5)
            assert [p.execution_id for p in await system.pending()] == ["p2", "p0"]
            page = await system.pending(limit=1)
            assert [p.execution_id for p in page] == ["p2"]
            assert [p.execution_id for p in await system.pending(limit=1, after=page[-1])] == ["p0"]
            assert await system.pending(limit=5, after=pending[-1]) == []


async def test_prune_keeps_a_paused_run_resumable(store_backend: Backend) -> None:
    agent = approval_agent()
    quick = Agent("quick", FunctionModel(lambda messages: "ok"))
    with anyio.fail_after(LIMIT):
        async with running(store_backend, agent, quick) as (_, system):
            run_id = await paused_run(system, agent)
            done_id = (await (await system.spawn(quick, "hi")).result(timeout=5)).execution_id
            pause = [r for r in await system.history(run_id) if r.step_type == "hitl_pause"]
            assert await system.prune(timedelta(0)) >= 4  # at least the finished run's rows
            with pytest.raises(RunNotFound):
                await system.history(done_id)
            assert [r for r in await system.history(run_id) if r.step_type == "hitl_pause"] == pause
            assert [p.execution_id for p in await system.pending()] == [run_id]
            result = await system.resume(run_id, Resume(approved=True), timeout=5)
            assert result.status == "completed" and result.output == "Done: approved=True"


# -- logging --------------------------------------------------------------------------------------------


async def test_a_run_is_quiet_by_default(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    agent = approval_agent()
    assert not logging.getLogger("tether").isEnabledFor(logging.INFO)
    out, err = io.StringIO(), io.StringIO()
    with anyio.fail_after(LIMIT), redirect_stdout(out), redirect_stderr(err):
        async with running(Backend("sqlite", str(tmp_path / "quiet.db")), agent) as (_, system):
            run_id = await paused_run(system, agent)
            await system.resume(run_id, Resume(approved=True), timeout=5)
    captured = capfd.readouterr()
    assert (out.getvalue(), err.getvalue(), captured.out, captured.err) == ("", "", "", "")


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


async def test_one_log_event_per_row_when_asked(tmp_path: Path) -> None:
    agent = approval_agent()
    logger = logging.getLogger("tether")
    handler = Records()
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        with anyio.fail_after(LIMIT):
            async with running(Backend("sqlite", str(tmp_path / "loud.db")), agent) as (_, system):
                run_id = await paused_run(system, agent)
                await system.resume(run_id, Resume(approved=True), timeout=5)
                rows = await system.history(run_id)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    messages = [r.getMessage() for r in handler.records if "event='tool finished'" not in r.getMessage()]
    assert len(messages) == len(rows), messages
    for row, message in zip(rows, messages, strict=True):
        assert f"step_type='{row.step_type}'" in message
        assert f"execution_id='{run_id}'" in message
        assert f"agent_path='{row.agent_path}'" in message
        assert f"node_id='{row.node_id}'" in message
    assert all(r.levelno == logging.INFO and r.name == "tether" for r in handler.records)


# -- RunRef ---------------------------------------------------------------------------------------------


async def test_run_ref_result_timeout_and_send(store_backend: Backend) -> None:
    blocker, entered, release = blocking_agent()
    approver = approval_agent()
    with anyio.fail_after(LIMIT):
        async with running(store_backend, blocker, approver) as (_, system):
            ref = await system.spawn(blocker, "go")
            await entered.wait()
            with pytest.raises(TimeoutError):
                await ref.result(timeout=0.1)
            # One live owner, also inside one process: a resume of the running run is refused at once.
            rows = await system.history(ref.execution_id)
            with anyio.fail_after(1.0), pytest.raises(AlreadyResumed, match="running in this process"):
                await system.resume(ref.execution_id)
            assert await system.history(ref.execution_id) == rows
            release.set()
            assert (await ref.result(timeout=5)).output == "answer: released"

            paused = await system.spawn(approver, "refund")
            assert (await paused.result(timeout=5)).status == "paused"
            sent = await paused.send(Resume(approved=True, metadata={"by": "ref"}))
            assert sent.execution_id == paused.execution_id
            result: RunResult = await sent.result(timeout=5)
            assert result.status == "completed" and result.output == "Done: approved=True"
            with pytest.raises(AlreadyResumed):
                await (await paused.send(Resume(approved=True))).result(timeout=5)


# -- tool-call ids --------------------------------------------------------------------------------------


async def test_generated_tool_call_ids_are_unique(tmp_path: Path) -> None:
    @tool
    def ping() -> str:
        """Ping."""
        return "pong"

    agent = Agent("pinger", FunctionModel(tool_then_answer("ping", "ping", "ping")), tools=[ping])
    with anyio.fail_after(LIMIT):
        async with running(Backend("sqlite", str(tmp_path / "ids.db")), agent) as (_, system):
            runs = [await system.spawn(agent, "go") for _ in range(3)]
            ids: list[str] = []
            for ref in runs:
                assert (await ref.result(timeout=5)).status == "completed"
                final = (await system.history(ref.execution_id))[-1].state_snapshot["messages"]
                assistant = next(m for m in final if m["role"] == "assistant" and m.get("tool_calls"))
                call_ids = [c["id"] for c in assistant["tool_calls"]]
                answered = [m["tool_call_id"] for m in final if m["role"] == "tool"]
                assert answered == call_ids
                ids.extend(call_ids)
    assert len(ids) == 9 == len(set(ids))
    many = [ToolCall("x", {}).id for _ in range(1000)] + ids
    assert len(set(many)) == len(many)
    for call_id in many:
        assert call_id.startswith("call_") and len(call_id) == 5 + 32
        int(call_id[5:], 16)
    # Another process draws from the same space without collisions.
    with anyio.fail_after(CHILD_LIMIT):
        child = await anyio.run_process(
            [sys.executable, "-c", "from actors.models import ToolCall; print(ToolCall('x', {}).id)"]
        )
    other = child.stdout.decode().strip()
    assert other.startswith("call_") and other not in many
