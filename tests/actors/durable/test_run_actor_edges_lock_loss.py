"""A run whose process loses its liveness lock mid-step stops without writing, and says so.

In one process (PostgreSQL: the store's lock connection is terminated; SQLite: its lock file is
replaced under it):

- the run's answer is the run actor's own ``OwnershipLost``, which says that this process stopped
  the run without writing: it does not try to write a cancel marker the store would refuse;
- a run whose ``@idempotent`` body is in flight at the loss stops as soon as the body has stored
  its result, even when its tool catches the errors of that call: the tool does not go on.

Every test is time-bounded.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest
from _tool_agents import tool_agent
from conftest import Backend, on_asyncpg

from actors import ActorSystem, idempotent
from stores import Checkpoint, OwnershipLost, SQLiteStore, Store

pytestmark = pytest.mark.anyio

#: Bound on one test's body (seconds); a hang fails instead of stalling the suite.
LIMIT = 10.0
#: Bound on a wait that the behaviour under test makes prompt.
BOUND = 2.0


async def lose_lock(backend: Backend, store: Store) -> None:
    """Take the store's liveness lock away while its process lives; return once it has noticed."""
    lost = anyio.Event()
    store.on_ownership_lost(lambda runs: lost.set())
    if isinstance(store, SQLiteStore):
        fresh = Path(store.lock_path + ".new")
        fresh.write_bytes(b"")  # noqa: ASYNC240 (an empty local file)
        os.replace(fresh, store.lock_path)  # the store's locked file is no longer the one at the path
    else:
        pid = store._lock_conn.get_server_pid()  # type: ignore[attr-defined]

        assert await on_asyncpg(
            backend.target, lambda conn: conn.fetchval("SELECT pg_terminate_backend($1)", pid)
        )
    with anyio.fail_after(BOUND):
        await lost.wait()


async def steps(store: Store, execution_id: str) -> list[str]:
    return [row.step_type for row in await store.history(execution_id)]


async def test_a_run_stopped_by_a_lock_loss_answers_with_its_own_refusal(store_backend: Backend) -> None:
    entered, never = anyio.Event(), anyio.Event()

    async def body() -> str:
        entered.set()
        await never.wait()
        return "never"

    agent = tool_agent(body)
    with anyio.fail_after(LIMIT):
        async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
            ref = await system.spawn(agent, "go", execution_id="lost-1")
            await entered.wait()
            tried: list[str] = []
            real = store.append

            async def append(row: Checkpoint) -> None:
                tried.append(row.step_type)
                await real(row)

            store.append = append  # type: ignore[method-assign]
            await lose_lock(store_backend, store)
            with pytest.raises(OwnershipLost) as raised:
                await ref.result(timeout=BOUND)
            rows = await steps(store, "lost-1")
    assert "this process lost its liveness lock, so it stopped the run without writing" in str(raised.value)
    assert tried == []  # not even a marker the store would refuse
    assert rows == ["llm_call", "tool_call"]


async def test_a_tool_that_catches_errors_does_not_go_on_after_its_body_at_a_lock_loss(
    store_backend: Backend,
) -> None:
    entered, go, never = anyio.Event(), anyio.Event(), anyio.Event()
    went_on: list[str] = []

    @idempotent
    async def charge(order: str) -> str:
        entered.set()
        await go.wait()
        return f"charged {order}"

    async def body() -> str:
        try:
            result = await charge("o1")
        except Exception as error:  # a tool that reports what failed and goes on
            result = f"failed: {error!r}"
        await anyio.lowlevel.checkpoint()
        went_on.append(result)
        await never.wait()  # more work: never reached by a run this process lost
        return result

    agent = tool_agent(body)
    with anyio.fail_after(LIMIT):
        async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
            ref = await system.spawn(agent, "go", execution_id="lost-2")
            await entered.wait()
            await lose_lock(store_backend, store)
            go.set()  # the body finishes and stores its result; then the run stops
            with anyio.fail_after(BOUND), pytest.raises(OwnershipLost):
                await ref.result()
            entries = await store.cache_entries("lost-2")
            rows = await steps(store, "lost-2")
    assert went_on == []
    assert [entry.value for entry in entries] == ["charged o1"]
    assert rows == ["llm_call", "tool_call"]
