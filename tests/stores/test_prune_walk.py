"""Prune (rule 10) at the edges of its re-entry walk: a waiting run keeps its cache with its rows, the
levels above a nested step are found past markers and bookkeeping rows, a run whose rows carry no
path has no level above its own, and the walk down from a marker ends.

Both backends, except the walk's own bound: prune runs it on the store's thread (SQLite) or its
loop (PostgreSQL), where no cancel scope reaches a walk that does not end, so that case asks the
shared rule itself, under an alarm, first (a walk that never ends fails it instead of hanging the
store tests after it).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from types import FrameType
from typing import Any

import anyio
import pytest
from conftest import Backend, until_status

from actors import ActorSystem, Agent, idempotent, tool, wait_signal
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import FAILED, FORK_ORIGIN, HANDOFF, RECOVER, REENTRY_SEQ, RUN_END, TOOL_CALL, Store
from stores.lowlevel import PruneRow, doomed
from stores.testing import make_row

LIMIT = 30.0


async def write_old(store: Store, rows: list[Any]) -> None:
    """Append ``rows``; once this returns, all of them are older than a cutoff of now."""
    for row in rows:
        await store.append(row)
    await anyio.sleep(0.01)


@contextmanager
def alarm(seconds: float) -> Iterator[None]:
    """Raise ``TimeoutError`` in the block's synchronous code once it has run ``seconds``."""

    def expire(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError(f"still walking after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_the_walk_down_from_a_marker_or_a_bookkeeping_row_ends() -> None:
    def row(seq: int, step_type: str = "llm_call", status: str = "completed", **node_input: Any) -> PruneRow:
        return PruneRow(seq, step_type, status, True, node_input, "agent:a")

    with alarm(5):
        assert doomed("r", [row(0), row(1, TOOL_CALL), row(2, RUN_END, FAILED)]) == (False, [0])
        assert doomed("r", [row(0), row(1, TOOL_CALL), row(2, RECOVER)]) == (False, [0])
        assert doomed("r", [row(0, RUN_END, FAILED)]) == (False, [])


@pytest.mark.anyio
async def test_prune_keeps_the_cache_of_a_waiting_run(store_backend: Backend) -> None:
    charges: list[str] = []

    @idempotent
    async def charge(order: str) -> str:
        charges.append(order)
        return f"charged {order}"

    @tool
    async def refund(order: str) -> str:
        """Charge the order, then wait for the approval."""
        receipt = await charge(order)
        approval = await wait_signal("approved")
        return f"{receipt}, approved by {approval.payload if approval else None}"

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return messages[-1].content
        return ModelReply(tool_calls=[ToolCall("refund", {"order": "1042"})])

    agent = Agent("clerk", FunctionModel(model), tools=[refund])
    with anyio.fail_after(LIMIT):
        async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
            assert (
                await (await system.spawn(agent, "refund", execution_id="w")).result()
            ).status == "waiting"
            before = await system.history("w")
            await anyio.sleep(0.01)
            assert await system.prune(timedelta(0)) == 0
            assert await system.history("w") == before
            assert [entry.value for entry in await store.cache_entries("w")] == ["charged 1042"]
            await system.signal("w", "approved", "ann")
            await until_status(system, "w", "completed")
            done = await system.ref("w").result()
    assert done.output == "charged 1042, approved by ann"
    assert charges == ["1042"]  # the woken tool got its charge back from the cache


@pytest.mark.anyio
async def test_prune_finds_the_levels_above_past_markers_and_bookkeeping(store_backend: Backend) -> None:
    """A fork of a supervisor run (its ``fork_origin`` before the swarm's hop) that failed deep in a
    worker swarm: its failed ``run_end`` is at the root's path, where the delegation row is."""
    ops, support = "supervisor:ops", "supervisor:ops/worker:support"

    def at(seq: int, path: str, node_id: str, step_type: str = "llm_call", **fields: Any) -> Any:
        return make_row("r", seq, node_id, step_type=step_type, agent_path=path, **fields)

    rows = [
        at(0, ops, "turn:0"),
        at(1, f"{ops}/tool:delegate_to_support", "turn:0/tool:delegate_to_support", TOOL_CALL),
        at(2, f"{support}/agent:a", "turn:0"),
        at(3, ops, FORK_ORIGIN, FORK_ORIGIN),
        at(4, f"{support}/agent:a/tool:handoff_to_b", "turn:0/tool:handoff_to_b", TOOL_CALL),
        at(5, support, "handoff:0", HANDOFF),
        at(6, f"{support}/agent:b", "turn:0"),
        at(7, f"{support}/agent:b/tool:refund", "turn:0/tool:refund", TOOL_CALL),
        at(8, ops, RUN_END, RUN_END, status=FAILED),
    ]
    with anyio.fail_after(LIMIT):
        async with store_backend.open() as store:
            await write_old(store, rows)
            step = (await store.reentry("r")).step
            assert await store.prune(timedelta(0)) == 5
            # The step (7) and the marker (8), the swarm's hop (5), the manager's delegation (1).
            assert [row.seq for row in await store.history("r")] == [1, 5, 7, 8]
            assert (await store.reentry("r")).step == step


@pytest.mark.anyio
async def test_a_run_whose_rows_carry_no_path_has_no_level_above(store_backend: Backend) -> None:
    rows = [
        make_row("r", 0, agent_path=None),
        make_row("r", 1, "turn:0/tool:t", step_type=TOOL_CALL, agent_path=None),
        make_row("r", 2, "turn:1", step_index=1, agent_path=None),
        # A recovery that re-enters the tool row: the model turn after it is off the walk.
        make_row("r", 3, "turn:0/tool:t", step_type=RECOVER, node_input={REENTRY_SEQ: 1}, agent_path=None),
    ]
    with anyio.fail_after(LIMIT):
        async with store_backend.open() as store:
            await write_old(store, rows)
            assert await store.prune(timedelta(0)) == 2
            assert [row.seq for row in await store.history("r")] == [1, 3]
            assert (await store.reentry("r")).step.seq == 1
