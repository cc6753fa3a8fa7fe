"""Ownership that does not consume PostgreSQL's lock table: one advisory lock per process, however
many runs it owns, on default server settings (a session holding ~12,000 advisory locks exhausts the
shared lock table, and then no new session can connect at all).

The default suite owns 15,000 runs at the store level and 500 live runs (tools awaiting an event)
through an ActorSystem (500 here); the stress marker runs the contract's sizes through ActorSystems: 15,000
live runs in one process, and 4 processes x 5,000.
"""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import anyio
import pytest
from conftest import PgSchema, on_asyncpg

from actors import ActorSystem, Agent, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import PostgresStore

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[3]


async def _advisory_locks(pg: PgSchema) -> tuple[int, int]:
    """(sessions, advisory locks they hold) among the sessions holding the liveness lock of an owner
    recorded in ``pg``'s schema, read on a fresh connection (which must still succeed)."""
    found = await on_asyncpg(
        pg.dsn,
        lambda conn: conn.fetchrow(
            "WITH owners AS (SELECT DISTINCT l.pid FROM pg_locks l "
            "  WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted "
            f'  AND (l.classid::bigint << 32) | l.objid::bigint IN (SELECT owner_key FROM "{pg.schema}".run_owners)) '
            "SELECT (SELECT count(*) FROM owners), count(*) FROM pg_locks l "
            "WHERE l.locktype = 'advisory' AND l.pid IN (SELECT pid FROM owners)"
        ),
    )
    assert found is not None
    return int(found[0]), int(found[1])


def _waiting_agent(release: anyio.Event) -> Agent:
    @tool
    async def wait() -> str:
        """Wait for the release."""
        await release.wait()
        return "released"

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return "done"
        return ModelReply(tool_calls=[ToolCall("wait", {})])

    return Agent("waiter", FunctionModel(model), tools=[wait])


async def _own_live_runs(pg: PgSchema, count: int) -> None:
    """``count`` runs live at once in one ActorSystem, each mid-tool; one advisory lock for all."""
    release = anyio.Event()
    runner = _waiting_agent(release)
    async with (
        PostgresStore(pg.dsn, schema=pg.schema) as store,
        ActorSystem(store, runners=[runner]) as system,
    ):
        refs = []
        for i in range(count):
            refs.append(await system.spawn(runner, "go", execution_id=f"live-{i}"))
        owned = await store.owned([f"live-{i}" for i in range(count)])
        assert len(owned) == count
        assert await _advisory_locks(pg) == (1, 1)
        release.set()
        with anyio.fail_after(max(60, count / 50)):
            for ref in refs:
                assert (await ref.result()).status == "completed"


async def test_one_store_owns_15000_runs_with_one_advisory_lock(pg_schema: PgSchema) -> None:
    async with PostgresStore(pg_schema.dsn, schema=pg_schema.schema, max_size=10) as store:
        ids = [f"run-{i}" for i in range(15_000)]

        async def take(chunk: list[str]) -> None:
            for eid in chunk:
                assert await store.try_lock(eid)

        with anyio.fail_after(300):
            async with anyio.create_task_group() as tg:
                for start in range(0, len(ids), 1_000):
                    tg.start_soon(take, ids[start : start + 1_000])
        assert await _advisory_locks(pg_schema) == (1, 1)  # and a fresh session connects
        other = PostgresStore(pg_schema.dsn, schema=pg_schema.schema)
        try:
            assert not await other.try_lock("run-14999")
            assert await other.orphans() == []
        finally:
            await other.close()


async def test_one_process_owns_500_live_runs_with_one_advisory_lock(pg_schema: PgSchema) -> None:
    await _own_live_runs(pg_schema, 500)


@pytest.mark.stress
async def test_one_process_owns_15000_live_runs(pg_schema: PgSchema) -> None:
    await _own_live_runs(pg_schema, 15_000)


@pytest.mark.stress
async def test_four_processes_own_5000_live_runs_each(pg_schema: PgSchema, tmp_path: Path) -> None:
    code = textwrap.dedent(
        f"""
        import anyio, os, sys
        from actors import ActorSystem
        from stores import PostgresStore
        from test_ownership_scale import _waiting_agent

        async def main(prefix):
            release = anyio.Event()
            runner = _waiting_agent(release)
            async with PostgresStore({pg_schema.dsn!r}, schema={pg_schema.schema!r}) as store:
                async with ActorSystem(store, runners=[runner]) as system:
                    for i in range(5000):
                        await system.spawn(runner, "go", execution_id=f"{{prefix}}-{{i}}")
                    print("owning", flush=True)
                    await anyio.sleep(600)

        anyio.run(main, sys.argv[1], backend=os.environ.get("TETHER_TEST_LOOP", "asyncio"))
        """
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests"), str(Path(__file__).parent)]),
    }
    procs = [await anyio.open_process([sys.executable, "-c", code, f"p{n}"], env=env) for n in range(4)]
    try:
        with anyio.fail_after(900):
            for proc in procs:
                assert proc.stdout is not None
                assert (await proc.stdout.receive()).startswith(b"owning")
        assert await _advisory_locks(pg_schema) == (4, 4)
        probe = PostgresStore(pg_schema.dsn, schema=pg_schema.schema)
        try:
            ids = [f"p{n}-{i}" for n in range(4) for i in range(5000)]
            assert len(await probe.owned(ids)) == 20_000
        finally:
            await probe.close()
    finally:
        for proc in procs:
            proc.kill()
            await proc.wait()
