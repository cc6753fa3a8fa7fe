"""A lock loss while an ``@idempotent`` body runs: the body finishes and stores its result first.

In one process on SQLite (the lock file replaced under the owner): a run abandoned on a lost lock
stops at once, unless an ``@idempotent`` body of that run is in flight, which finishes and stores
its result before the run stops, so the run's recovery finds the result instead of running the
side effect again. Either way the run writes no row after the loss.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from actors import ActorSystem, Agent, idempotent, tool
from actors.lowlevel import run_actor_module
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import OwnershipLost, SQLiteStore

pytestmark = pytest.mark.anyio

LIMIT = 20.0


def _agent(work: object) -> Agent:
    @tool
    async def refund(order: str) -> str:
        """Refund an order."""
        return await work(order)  # type: ignore[operator,no-any-return]

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"done: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("refund", {"order": str(messages[-1].content)})])

    return Agent("refunds", FunctionModel(model), tools=[refund])


async def _lose_lock(store: SQLiteStore) -> None:
    """Replace the store's lock file and wait until the store has noticed."""
    lost: list[list[str]] = []
    store.on_ownership_lost(lost.append)
    fresh = Path(store.lock_path + ".new")
    fresh.write_bytes(b"")  # noqa: ASYNC240 (an empty local file)
    os.replace(fresh, store.lock_path)
    with anyio.fail_after(LIMIT):
        while not lost:  # noqa: ASYNC110 (the store's watcher thread reports it)
            await anyio.sleep(0.01)


async def _rows(store: SQLiteStore, execution_id: str) -> list[tuple[str, str]]:
    return [(row.node_id, row.step_type) for row in await store.history(execution_id)]


async def test_a_body_in_flight_at_a_lock_loss_finishes_and_stores_its_result(tmp_path: Path) -> None:
    entered, go = anyio.Event(), anyio.Event()
    charged: list[str] = []

    @idempotent
    async def charge(order: str) -> str:
        entered.set()
        await go.wait()
        charged.append(order)
        return f"charged {order}"

    went_on: list[str] = []

    async def work(order: str) -> str:
        result = await charge(order)
        await anyio.sleep(0.2)  # the tool's own work after the body: never once the lock is lost
        went_on.append(order)
        return str(result)

    agent = _agent(work)
    store = SQLiteStore(tmp_path / "t.db")
    async with store, ActorSystem(store, runners=[agent]) as system:
        ref = await system.spawn(agent, "o1", execution_id="run-1")
        with anyio.fail_after(LIMIT):
            await entered.wait()
        await _lose_lock(store)
        await anyio.sleep(0.1)  # the run was told; its body is still waiting
        go.set()
        with pytest.raises(OwnershipLost):
            await ref.result(timeout=LIMIT)
        assert charged == ["o1"]
        assert went_on == []  # the run stopped as soon as the body had stored its result
        entries = await store.cache_entries("run-1")
        assert [entry.value for entry in entries] == ["charged o1"]  # stored before the run stopped
        assert await _rows(store, "run-1") == [
            ("turn:0", "llm_call"),
            ("turn:0/tool:refund", "tool_call"),
        ]


async def test_a_run_with_no_body_in_flight_stops_at_once_on_a_lock_loss(tmp_path: Path) -> None:
    entered, never = anyio.Event(), anyio.Event()

    async def wait(order: str) -> str:
        entered.set()
        await never.wait()
        return order

    agent = _agent(wait)
    store = SQLiteStore(tmp_path / "t.db")
    async with store, ActorSystem(store, runners=[agent]) as system:
        ref = await system.spawn(agent, "o1", execution_id="run-1")
        with anyio.fail_after(LIMIT):
            await entered.wait()
        await _lose_lock(store)
        with anyio.fail_after(5):  # not the bound a body in flight gets
            with pytest.raises(OwnershipLost):
                await ref.result(timeout=LIMIT)
        assert await _rows(store, "run-1") == [
            ("turn:0", "llm_call"),
            ("turn:0/tool:refund", "tool_call"),
        ]


async def test_the_run_waits_for_every_body_in_flight(tmp_path: Path) -> None:
    """Two bodies of one run in flight at the loss: the first to finish does not stop the other."""
    entered = {order: anyio.Event() for order in ("a", "b")}
    go = {order: anyio.Event() for order in ("a", "b")}
    charged: list[str] = []

    @idempotent
    async def charge(order: str) -> str:
        entered[order].set()
        await go[order].wait()
        charged.append(order)
        return f"charged {order}"

    async def both(order: str) -> str:
        results: dict[str, str] = {}

        async def one(part: str) -> None:
            results[part] = await charge(part)

        async with anyio.create_task_group() as tg:
            tg.start_soon(one, "a")
            tg.start_soon(one, "b")
        return f"{results['a']} {results['b']}"

    agent = _agent(both)
    store = SQLiteStore(tmp_path / "t.db")
    async with store, ActorSystem(store, runners=[agent]) as system:
        ref = await system.spawn(agent, "o1", execution_id="run-1")
        with anyio.fail_after(LIMIT):
            await entered["a"].wait()
            await entered["b"].wait()
        await _lose_lock(store)
        go["a"].set()
        await anyio.sleep(0.2)  # "a" has stored its result; "b" still runs
        go["b"].set()
        with pytest.raises(OwnershipLost):
            await ref.result(timeout=LIMIT)
        assert sorted(charged) == ["a", "b"]
        entries = await store.cache_entries("run-1")
        assert sorted(entry.value for entry in entries) == ["charged a", "charged b"]
        assert await _rows(store, "run-1") == [
            ("turn:0", "llm_call"),
            ("turn:0/tool:refund", "tool_call"),
        ]


async def test_a_body_that_never_finishes_is_cut_at_its_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wait for a body in flight is bounded: one that hangs past the bound is cut, the run
    stops, and nothing is stored or written for it."""
    monkeypatch.setattr(run_actor_module, "_BODY_BOUND", 0.5)
    entered, never = anyio.Event(), anyio.Event()

    @idempotent
    async def charge(order: str) -> str:
        entered.set()
        await never.wait()
        return f"charged {order}"

    agent = _agent(charge)
    store = SQLiteStore(tmp_path / "t.db")
    async with store, ActorSystem(store, runners=[agent]) as system:
        ref = await system.spawn(agent, "o1", execution_id="run-1")
        with anyio.fail_after(LIMIT):
            await entered.wait()
        await _lose_lock(store)
        lost = anyio.current_time()
        with anyio.fail_after(5):  # the bound, not the body
            with pytest.raises(OwnershipLost):
                await ref.result(timeout=LIMIT)
        assert 0.4 <= anyio.current_time() - lost < 5
        assert await store.cache_entries("run-1") == []
        assert await _rows(store, "run-1") == [
            ("turn:0", "llm_call"),
            ("turn:0/tool:refund", "tool_call"),
        ]
