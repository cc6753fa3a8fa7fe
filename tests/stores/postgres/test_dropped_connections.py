"""Pool connections terminated while runs write and while ``@idempotent`` calls look up and put.

A killer task terminates this store's pool connections (``pg_terminate_backend``, the pids read
from its own pool, so no other store's connections are touched) every few milliseconds while 40
runs take turns and run a tool that charges twice through ``@idempotent``. A store error is a pause,
not a failure: every run completes, no tool result the model read mentions a store error, no run
has a failed marker or a gap in ``seq``, and each charge ran once (twice only under the same
``idempotency_key()``: a body whose put was cut is inside the documented at-least-once window).
"""

from __future__ import annotations

import logging
import random
from collections import Counter

import anyio
import asyncpg
import pytest
from conftest import PgSchema

from actors import ActorSystem, Agent, idempotency_key, idempotent, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import RUN_END, PostgresStore, StoreUnavailable

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@pytest.fixture
def anyio_backend() -> str:
    """asyncio: the test itself talks to PostgreSQL through asyncpg, an asyncio driver."""
    return "asyncio"


RUNS = 40
LIMIT = 120.0


def _agent(ledger: list[tuple[str, str]]) -> Agent:
    @idempotent
    async def charge(order: str, item: int) -> str:
        ledger.append((f"{order}/{item}", idempotency_key()))
        await anyio.sleep(0.01)
        return f"{order}/{item}"

    @tool
    async def process(order: str) -> str:
        """Charge both items of an order."""
        return "charged " + " ".join([await charge(order, 1), await charge(order, 2)])

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"done: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("process", {"order": messages[-1].content})])

    return Agent("dropped", FunctionModel(model), tools=[process])


async def _kill_pool_connections(store: PostgresStore, dsn: str, stop: anyio.Event) -> int:
    """Terminate one of the store's pool connections every few ms until ``stop``; how many."""
    killed = 0
    conn = await asyncpg.connect(dsn)
    try:
        while not stop.is_set():
            pool = store._db.pool
            pids = (
                [] if pool is None else [h._con.get_server_pid() for h in pool._holders if h._con is not None]
            )
            if pids:
                killed += bool(await conn.fetchval("SELECT pg_terminate_backend($1)", random.choice(pids)))
            await anyio.sleep(random.uniform(0.005, 0.03))
    finally:
        await conn.close()
    return killed


async def test_runs_ride_out_terminated_pool_connections(
    pg_schema: PgSchema, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tether")
    ledger: list[tuple[str, str]] = []
    runner = _agent(ledger)
    stop = anyio.Event()
    killed = 0
    store = PostgresStore(pg_schema.dsn, schema=pg_schema.schema, max_size=6)
    async with store, ActorSystem(store, runners=[runner], store_outage_grace=LIMIT) as system:

        async def killer() -> None:
            nonlocal killed
            killed = await _kill_pool_connections(store, pg_schema.dsn, stop)

        results = {}
        async with anyio.create_task_group() as tg:
            tg.start_soon(killer)

            async def one(i: int) -> None:
                ref = await system.spawn(runner, f"o{i}", execution_id=f"run-{i}")
                results[i] = await ref.result()

            with anyio.fail_after(LIMIT):
                async with anyio.create_task_group() as runs:
                    for i in range(RUNS):
                        runs.start_soon(one, i)
            stop.set()

        for i in range(RUNS):
            eid = f"run-{i}"
            assert results[i].status == "completed", results[i]
            assert results[i].output == f"done: charged o{i}/1 o{i}/2"
            rows = await system.history(eid)
            assert [r.seq for r in rows] == list(range(len(rows))), eid  # no gap
            assert [r.step_type for r in rows].count(RUN_END) == 1
            assert rows[-1].step_type == RUN_END and rows[-1].status == "completed"
            for message in rows[-1].state_snapshot["messages"]:
                if message["role"] == "tool":
                    assert message["content"] == f"charged o{i}/1 o{i}/2", message
    assert killed >= 5, killed
    assert any("store unusable: retrying" in r.getMessage() for r in caplog.records), "no outage was met"
    keys: dict[str, set[str]] = {}
    for item, key in ledger:
        keys.setdefault(item, set()).add(key)
    assert sorted(keys) == sorted(f"o{i}/{k}" for i in range(RUNS) for k in (1, 2))
    assert all(len(found) == 1 for found in keys.values()), keys  # a repeat reuses its key
    repeats = Counter(item for item, _ in ledger)
    assert max(repeats.values()) <= 2, repeats


async def test_serve_rides_out_every_connection_of_its_store_terminated(
    pg_schema: PgSchema, caplog: pytest.LogCaptureFixture
) -> None:
    """The lock connection, the listener and the pool, all terminated at once, three times, while
    ``serve`` drives queued runs: it never exits, and every run completes with each charge once."""
    caplog.set_level(logging.WARNING, logger="tether")
    ledger: list[tuple[str, str]] = []
    runner = _agent(ledger)
    store = PostgresStore(pg_schema.dsn, schema=pg_schema.schema)
    async with store, ActorSystem(store, runners=[runner]) as system:
        ids = [await system.enqueue(runner, f"o{i}", execution_id=f"run-{i}") for i in range(RUNS)]
        conn = await asyncpg.connect(pg_schema.dsn)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: system.serve(concurrency=8, poll=0.05))
                for _ in range(3):
                    await anyio.sleep(0.15)
                    await conn.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = ANY($1::int[])",
                        _store_pids(store),
                    )
                with anyio.fail_after(LIMIT):
                    while not await _all_completed(system, ids):  # noqa: ASYNC110
                        await anyio.sleep(0.1)
                tg.cancel_scope.cancel()
        finally:
            await conn.close()
        for eid in ids:
            rows = await system.history(eid)
            assert [r.seq for r in rows] == list(range(len(rows))), eid
            assert [r.step_type for r in rows].count(RUN_END) == 1
    assert any("lost its liveness lock" in r.getMessage() for r in caplog.records)
    repeats = Counter(item for item, _ in ledger)
    assert sorted(repeats) == sorted(f"o{i}/{k}" for i in range(RUNS) for k in (1, 2))
    assert max(repeats.values()) == 1, repeats


async def _all_completed(system: ActorSystem, ids: list[str]) -> bool:
    """Whether every run completed (``False`` while this test's own read meets a dropped connection)."""
    try:
        return {(await system.status(eid)).status for eid in ids} == {"completed"}
    except StoreUnavailable:
        return False


def _store_pids(store: PostgresStore) -> list[int]:
    """The server pids of every connection of the store: pool, lock connection, listener."""
    pids = (
        [h._con.get_server_pid() for h in store._db.pool._holders if h._con is not None]
        if store._db.pool
        else []
    )
    for conn in (store._lock_conn, store._notices._conn):
        if conn is not None and not conn.is_closed():
            pids.append(conn.get_server_pid())
    return pids
