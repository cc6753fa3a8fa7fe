"""``pending(limit=, after=)`` reads one index range per page: the same work at 1,000 and 50,000 pauses.

The cost is counted, not timed: on SQLite the virtual-machine instructions the page's statement
executes (a progress handler called every instruction), on PostgreSQL the plan of the store's own
statement (``EXPLAIN ANALYZE``: an index scan that reads ``limit`` entries, no sort), with sorting
and sequential scans priced out so that a missing index shows as a sort instead of hiding behind one.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from conftest import Backend, on_asyncpg

from stores import PendingInterrupt, PostgresStore, SQLiteStore
from stores.lowlevel import pending_query, ts

pytestmark = pytest.mark.anyio

PAGE = 50
BASE = datetime(2026, 1, 1, tzinfo=UTC)


def _created(i: int) -> datetime:
    return BASE + timedelta(seconds=i // 3, microseconds=i % 3)  # ties of three broken by id


async def _fill(backend: Backend, start: int, stop: int) -> None:
    """Insert pending rows ``start..stop`` straight into the table (no checkpoints: pending() reads
    only this table)."""
    if backend.name == "sqlite":
        with sqlite3.connect(backend.target) as conn:
            conn.executemany(
                "INSERT INTO pending_interrupts (execution_id, reason, context, node_id, agent_path, "
                "created_at) VALUES (?, 'approve', ?, 'turn:0/tool:t', 'agent:a', ?)",
                [(f"run-{i:06d}", b'{"i": %d}' % i, ts(_created(i))) for i in range(start, stop)],
            )
        return

    async def insert_pauses(conn: asyncpg.Connection) -> None:
        await conn.executemany(
            f'INSERT INTO "{backend.schema}".pending_interrupts '
            "(execution_id, reason, context, node_id, agent_path, created_at) "
            "VALUES ($1, 'approve', $2, 'turn:0/tool:t', 'agent:a', $3)",
            [(f"run-{i:06d}", json.dumps({"i": i}), _created(i)) for i in range(start, stop)],
        )
        await conn.execute(f'ANALYZE "{backend.schema}".pending_interrupts')

    await on_asyncpg(backend.target, insert_pauses)


def _sqlite_cost(path: str, after: PendingInterrupt | None) -> int:
    """VM instructions of one page's statement (the store's own SQL), and no sort step in its plan."""
    sql, args = pending_query(None, PAGE, after)
    with sqlite3.connect(path) as conn:
        plan = " | ".join(r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", args))
        assert "pending_created" in plan and "TEMP B-TREE" not in plan, plan
        steps = [0]

        def count() -> int:
            steps[0] += 1
            return 0

        conn.set_progress_handler(count, 1)
        assert len(conn.execute(sql, args).fetchall()) == PAGE
    return steps[0]


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(n for child in plan.get("Plans", []) for n in _nodes(child))]


async def _postgres_cost(store: PostgresStore, backend: Backend, after: PendingInterrupt | None) -> int:
    """Entries the index scan of one page reads (the store's own SQL, ``EXPLAIN ANALYZE``)."""
    name, params = (
        ("pending_page", [PAGE])
        if after is None
        else ("pending_after", [PAGE, after.created_at, after.execution_id])
    )

    async def explain(conn: asyncpg.Connection) -> Any:
        await conn.execute("SET enable_seqscan = off; SET enable_sort = off")
        found = await conn.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {store._sql[name]}", *params)
        return found

    found = await on_asyncpg(backend.target, explain)
    nodes = _nodes(json.loads(found)[0]["Plan"])
    kinds = [n["Node Type"] for n in nodes]
    assert "Sort" not in kinds and "Incremental Sort" not in kinds, kinds
    scans = [n for n in nodes if n.get("Index Name") == "pending_interrupts_created_idx"]
    assert len(scans) == 1, kinds
    rows: int = scans[0]["Actual Rows"]
    return rows


async def test_one_page_costs_the_same_at_1000_and_50000_pauses(store_backend: Backend) -> None:
    store = store_backend.open()
    await store.setup()
    try:
        costs: dict[int, list[int]] = {}
        filled = 0
        for size in (1_000, 50_000):
            await _fill(store_backend, filled, size)
            filled = size
            first = await store.pending(limit=PAGE)
            middle = (await store.pending(limit=PAGE, after=first[-1]))[-1]
            newest = [f"run-{i:06d}" for i in range(size - 1, size - 1 - PAGE, -1)]
            assert [p.execution_id for p in first] == newest  # newest first, ties by execution_id
            costs[size] = []
            for after in (None, middle):
                if isinstance(store, SQLiteStore):
                    costs[size].append(_sqlite_cost(store_backend.target, after))
                else:
                    assert isinstance(store, PostgresStore)
                    costs[size].append(await _postgres_cost(store, store_backend, after))
        # SQLite: the instruction count of a page does not grow with the table (a B-tree one level
        # deeper adds a handful); PostgreSQL: the index scan stops after the page's entries.
        for small, large in zip(costs[1_000], costs[50_000], strict=True):
            assert large <= small * 1.1 + 20, costs
        if isinstance(store, PostgresStore):
            assert costs[1_000] == costs[50_000] == [PAGE, PAGE]
    finally:
        await store.close()
