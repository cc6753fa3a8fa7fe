"""PostgresStore only: configuration, migrations, one statement per write, values, the message log."""

from __future__ import annotations

import math
import os
import sys
import textwrap
from datetime import UTC, timedelta
from typing import Any

import anyio
import asyncpg
import msgspec
import pytest
from _pg_support import DSN, ROOT, Counter, closed_port, pause, resume_row, row, schema_fixture, store_fixture  # noqa: F401 (fixtures)
from conftest import V1_LOGS, V1_ROWS, check_v1_history, on_asyncpg

from stores import (
    AlreadyResumed,
    Checkpoint,
    IncompatibleSchema,
    PostgresStore,
    RunExists,
    SerializationError,
    StoreUnavailable,
    WriteConflict,
)
from stores.lowlevel import postgres_schema_module

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

#: The schema version this code writes.
SCHEMA_VERSION = postgres_schema_module.SCHEMA_VERSION


# -- configuration and connection errors ------------------------------------------------------


async def test_bad_database_is_store_unavailable(schema: str) -> None:
    store = PostgresStore("postgresql://postgres@127.0.0.1:5432/no_such_db_tether", connect_timeout=5)
    with pytest.raises(StoreUnavailable, match="no_such_db_tether"):
        await store.setup()
    await store.close()


async def test_closed_store_refuses_and_close_is_idempotent(schema: str) -> None:
    s = PostgresStore(DSN, schema=schema)
    await s.append(row("r", 0))
    await s.close()
    await s.close()
    with pytest.raises(StoreUnavailable):
        await s.latest("r")


async def test_server_settings_applied(store: PostgresStore) -> None:
    await store.setup()
    assert store._db.pool is not None
    assert await store._db.pool.fetchval("SELECT current_setting('synchronous_commit')") == "on"
    assert await store.try_lock("r")
    conn = store._lock_conn
    assert conn is not None
    assert await conn.fetchval("SELECT current_setting('tcp_keepalives_idle')") == "5"
    assert await conn.fetchval("SELECT current_setting('tcp_keepalives_count')") == "5"
    # Settings live in server_settings, so the pool never undoes them: still on after reuse.
    for _ in range(3):
        assert await store._db.pool.fetchval("SELECT current_setting('synchronous_commit')") == "on"


# -- migrations --------------------------------------------------------------------------------


async def test_concurrent_setup_on_fresh_schema_all_succeed(schema: str) -> None:
    stores = [PostgresStore(DSN, schema=schema) for _ in range(6)]
    try:
        async with anyio.create_task_group() as tg:
            for s in stores:
                tg.start_soon(s.setup)
        await stores[0].append(row("r", 0))
        assert [c.seq for c in await stores[-1].history("r")] == [0]
    finally:
        for s in stores:
            await s.close()

    async def read_versions(conn: asyncpg.Connection) -> list[asyncpg.Record]:
        versions = await conn.fetch(f'SELECT version FROM "{schema}".schema_version')
        return versions

    versions = await on_asyncpg(DSN, read_versions)
    assert sorted(v[0] for v in versions) == list(range(1, SCHEMA_VERSION + 1))  # each applied once


async def test_two_processes_migrate_the_same_fresh_schema(schema: str) -> None:
    code = textwrap.dedent(
        f"""
        import anyio
        from stores import PostgresStore
        async def main():
            s = PostgresStore({DSN!r}, schema={schema!r})
            await s.setup()
            await s.close()
        anyio.run(main)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    codes: list[int | None] = []

    async def migrate() -> None:
        done = await anyio.run_process([sys.executable, "-c", code], cwd=ROOT, env=env, check=False)
        codes.append(done.returncode)

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(migrate)
    assert codes == [0, 0, 0]


async def test_a_schema_1_database_is_converted_and_keeps_every_message(schema: str) -> None:
    """Schema 2 moves messages onto the rows that added them; every row reads what it read before."""
    version, ddl = postgres_schema_module.MIGRATIONS[0]
    assert version == 1

    async def write_schema_1(conn: asyncpg.Connection) -> None:
        await conn.execute(
            f'CREATE SCHEMA "{schema}"; CREATE TABLE "{schema}".schema_version '
            "(version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now()); "
            f'INSERT INTO "{schema}".schema_version (version) VALUES (1)'
        )
        await conn.execute(ddl.replace("{s}", f'"{schema}"'))
        for eid, seq, agent_path, log_id, count in V1_ROWS:
            await conn.execute(
                f'INSERT INTO "{schema}".checkpoints (checkpoint_id, execution_id, seq, runner, node_id, '
                "step_index, step_type, status, state_snapshot, log_id, message_count, node_input, "
                "node_output, interrupt_context, agent_path, created_at) VALUES ($1, $2, $3, 'a', $4, $3, "
                "'llm_call', 'completed', '{\"turn\":1}', $5, $6, '{}', '{}', '{}', $7, now())",
                f"{eid}-{seq}",
                eid,
                seq,
                f"turn:{seq}",
                log_id,
                count,
                agent_path,
            )
        for log_id, messages in V1_LOGS.items():
            for idx, message in enumerate(messages):
                await conn.execute(
                    f'INSERT INTO "{schema}".messages VALUES ($1, $2, $3, $4)',
                    "r",
                    log_id,
                    idx,
                    msgspec.json.encode(message).decode(),
                )

    await on_asyncpg(DSN, write_schema_1)

    async with PostgresStore(DSN, schema=schema) as store:
        await check_v1_history(store)
        more = [*V1_LOGS["a"], {"role": "user", "content": "a6"}]
        async with PostgresStore(DSN, schema=schema) as fresh:
            await fresh.latest("r")  # as a resuming engine does: it learns the log it extends
            await fresh.append(row("r", 6, more))
        await store.latest("r")  # its memory of the log is stale now: read it again
        await store.append(row("r", 7, [*more, {"role": "user", "content": "a7"}]))
        assert [c.state_snapshot["messages"] for c in (await store.history("r"))[-2:]] == [
            more,
            [*more, {"role": "user", "content": "a7"}],
        ]

    async def read_schema(conn: asyncpg.Connection) -> tuple[list[int], Any, Any]:
        versions = [r[0] for r in await conn.fetch(f'SELECT version FROM "{schema}".schema_version')]
        table = await conn.fetchval(f"SELECT to_regclass('\"{schema}\".messages')")
        index = await conn.fetchval(f"SELECT to_regclass('\"{schema}\".pending_interrupts_created_idx')")
        return versions, table, index

    versions, table, index = await on_asyncpg(DSN, read_schema)
    assert sorted(versions) == list(range(1, SCHEMA_VERSION + 1))
    assert table is None and index is not None
    assert await _message_rows(schema) == len(V1_LOGS["a"]) + 2 + len(V1_LOGS["b"])  # each stored once


async def test_newer_schema_is_refused(store: PostgresStore, schema: str) -> None:
    await store.setup()

    async def add_newer_version(conn: asyncpg.Connection) -> None:
        await conn.execute(f'INSERT INTO "{schema}".schema_version (version) VALUES ($1)', SCHEMA_VERSION + 7)

    await on_asyncpg(DSN, add_newer_version)
    fresh = PostgresStore(DSN, schema=schema)
    with pytest.raises(IncompatibleSchema) as info:
        await fresh.setup()
    assert str(SCHEMA_VERSION + 7) in str(info.value) and str(SCHEMA_VERSION) in str(info.value)
    await fresh.close()


# -- one round trip per operation ----------------------------------------------------------------


async def test_writes_are_one_statement(store: PostgresStore, monkeypatch: pytest.MonkeyPatch) -> None:
    await store.setup()
    counter = Counter(store, monkeypatch)
    await store.append(row("r", 0, [{"role": "user", "content": "hi"}]))
    assert counter.calls == ["fetchval"]
    counter.calls.clear()
    await store.append_pause(*pause("r", 1))
    assert counter.calls == ["fetchval"]
    counter.calls.clear()
    await store.claim(resume_row("r", 2, 1))
    assert counter.calls == ["fetchrow"]
    counter.calls.clear()
    await store.cache_put("r", "k", {"v": 1})
    await store.latest("r")
    await store.history("r")
    assert counter.calls == ["fetchval", "fetchrow", "fetch"]


async def test_failed_claim_leaves_pending_row(store: PostgresStore) -> None:
    await store.append(row("r", 0))
    await store.append_pause(*pause("r", 1))
    with pytest.raises(WriteConflict):
        await store.claim(resume_row("r", 1, 1))  # seq 1 is taken
    assert [p.execution_id for p in await store.pending()] == ["r"]
    await store.claim(resume_row("r", 2, 1))
    assert await store.pending() == []


async def test_second_pause_rolls_back_whole_pause(store: PostgresStore) -> None:
    await store.append(row("r", 0))
    await store.append_pause(*pause("r", 1))
    with pytest.raises(WriteConflict):
        await store.append_pause(*pause("r", 2))
    assert [c.seq for c in await store.history("r")] == [0, 1]


async def test_claim_race_has_one_winner(store: PostgresStore) -> None:
    await store.append(row("r", 0))
    await store.append_pause(*pause("r", 1))
    outcomes: list[str] = []

    async def claim(i: int) -> None:
        try:
            await store.claim(resume_row("r", 2, 1))
            outcomes.append("won")
        except AlreadyResumed:
            outcomes.append("lost")

    async with anyio.create_task_group() as tg:
        for i in range(30):
            tg.start_soon(claim, i)
    assert outcomes.count("won") == 1 and len(outcomes) == 30


# -- values --------------------------------------------------------------------------------------


async def test_json_round_trips_exactly(store: PostgresStore) -> None:
    value = {
        "z": -0.0,
        "big": 1.7976931348623157e308,
        "tiny": 5e-324,
        "i": 2**63 - 1,
        "n": -(2**63),
        "a": [1.0],
    }
    await store.append(Checkpoint(execution_id="r", seq=0, runner="a", node_id="n", node_output=value))
    got = (await store.history("r"))[0]
    assert got.node_output == value
    assert list(got.node_output) == list(value)  # key order kept (json, not jsonb)
    assert math.copysign(1.0, got.node_output["z"]) == -1.0
    assert isinstance(got.node_output["a"][0], float) and isinstance(got.node_output["big"], float)
    assert got.created_at.tzinfo is not None and got.created_at.utcoffset() == timedelta(0)
    assert got.created_at.tzinfo == UTC


async def test_nul_in_text_field_is_serialization_error(store: PostgresStore) -> None:
    with pytest.raises(SerializationError) as info:
        await store.append(row("r", 0, node_id="a\x00b"))
    assert info.value.path == "$.node_id"
    assert await store.history("r") == []


async def test_run_exists_after_prune_removed_seq_zero(store: PostgresStore) -> None:
    await store.append(row("r", 0))
    await store.append(row("r", 1))
    await store.prune(timedelta(0))
    with pytest.raises(RunExists):
        await store.append(row("r", 0))


# -- the message log across processes -----------------------------------------------------------


async def _message_rows(schema: str) -> int:
    async def read_count(conn: asyncpg.Connection) -> int:
        count: int = await conn.fetchval(
            f'SELECT coalesce(sum(json_array_length(new_messages)), 0) FROM "{schema}".checkpoints'
        )
        return count

    return await on_asyncpg(DSN, read_count)


async def test_resumed_run_in_new_store_does_not_copy_conversation(store: PostgresStore, schema: str) -> None:
    msgs = [{"role": "user", "content": f"m{i}"} for i in range(10)]
    await store.append(row("r", 0, msgs[:5]))
    await store.append(row("r", 1, msgs[:8]))
    other = PostgresStore(DSN, schema=schema)
    try:
        entry = await other.reentry("r")
        assert entry.step.state_snapshot["messages"] == msgs[:8]
        await other.append(row("r", 2, msgs))
        assert await _message_rows(schema) == 10
        assert [c.state_snapshot["messages"] for c in await other.history("r")] == [msgs[:5], msgs[:8], msgs]
    finally:
        await other.close()


async def test_stale_log_memory_is_recovered(store: PostgresStore, schema: str) -> None:
    msgs = [{"role": "user", "content": f"m{i}"} for i in range(6)]
    await store.append(row("r", 0, msgs[:2]))
    other = PostgresStore(DSN, schema=schema)
    try:
        await other.reentry("r")
        await other.append(row("r", 1, msgs[:4]))  # extends the same log behind `store`'s back
    finally:
        await other.close()
    # `store` still believes the log holds 2 messages; its write must not fail or corrupt.
    await store.append(row("r", 2, [*msgs[:2], {"role": "user", "content": "other"}]))
    got = [c.state_snapshot["messages"] for c in await store.history("r")]
    assert got == [msgs[:2], msgs[:4], [*msgs[:2], {"role": "user", "content": "other"}]]


async def test_prune_keeps_crashed_run_resumable(store: PostgresStore) -> None:
    msgs = [{"role": "user", "content": "hi"}]
    await store.append(row("r", 0, msgs))
    await store.append(row("r", 1, msgs, node_id="turn:0/tool:t", step_type="tool_call"))
    await store.append(
        row("r", 2, msgs, node_id="turn:0/tool:t", step_type="recover", node_input={"reentry_seq": 1})
    )
    await store.append(row("r", 3, msgs, node_id="run_end", step_type="run_end", status="failed"))
    await store.cache_put("r", "k", 1)
    before = await store.reentry("r")
    assert await store.prune(timedelta(0)) == 1  # only seq 0 goes
    after = await store.reentry("r")
    assert after == before and after.step.state_snapshot["messages"] == msgs
    assert (await store.cache_get("r", "k")) is not None


async def test_cache_put_first_writer_wins_under_race(store: PostgresStore) -> None:
    results: list[Any] = []

    async def put(i: int) -> None:
        results.append(await store.cache_put("r", "k", {"writer": i}))

    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(put, i)
    assert len({r["writer"] for r in results}) == 1
    cached = await store.cache_get("r", "k")
    assert cached is not None and cached.value == results[0]


async def test_quarantine_is_one_statement_and_idempotent(store: PostgresStore) -> None:
    await store.append(row("r", 0))
    await store.append(row("r", 1))
    ids = [c.checkpoint_id for c in await store.fetch_unsynced(10)]
    await store.mark_quarantined({})
    await store.mark_quarantined({ids[0]: "bad"})
    await store.mark_quarantined({ids[0]: "worse"})
    assert await store.sync_state(ids[0]) == (True, "worse")
    assert [c.checkpoint_id for c in await store.fetch_unsynced(10)] == ids[1:]
    await store.mark_synced(ids[1:])
    await store.mark_synced([])
    assert await store.fetch_unsynced(10) == []
