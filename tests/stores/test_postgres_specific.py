"""PostgreSQL-specific behaviour of :class:`stores.PostgresStore` (the shared contract is in the conformance suite)."""

from __future__ import annotations

import math
import os
import signal
import socket
import sys
import textwrap
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import msgspec
import pytest
from conftest import V1_LOGS, V1_ROWS, check_v1_history

from stores import (
    AlreadyResumed,
    Checkpoint,
    IncompatibleSchema,
    PendingInterrupt,
    PostgresStore,
    RunExists,
    SerializationError,
    StoreError,
    StoreUnavailable,
    WriteConflict,
)
from stores.postgres._schema import SCHEMA_VERSION

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

DSN = os.environ.get("TETHER_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    name = f"t_{uuid.uuid4().hex}"
    yield name
    conn = await asyncpg.connect(DSN)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    finally:
        await conn.close()


@pytest.fixture
async def store(schema: str) -> AsyncIterator[PostgresStore]:
    s = PostgresStore(DSN, schema=schema)
    yield s
    await s.close()


def row(eid: str, seq: int, messages: list[Any] | None = None, **kw: Any) -> Checkpoint:
    snapshot: dict[str, Any] = {"turn": seq}
    if messages is not None:
        snapshot["messages"] = messages
    kw.setdefault("node_id", f"turn:{seq}")
    kw.setdefault("agent_path", "agent:a")
    return Checkpoint(execution_id=eid, seq=seq, runner="a", state_snapshot=snapshot, **kw)


def pause(eid: str, seq: int) -> tuple[Checkpoint, PendingInterrupt]:
    r = row(eid, seq, node_id="turn:0/tool:t", step_type="hitl_pause", status="interrupted")
    return r, PendingInterrupt(execution_id=eid, reason="approve?", context={"amount": 5})


def resume_row(eid: str, seq: int, target: int) -> Checkpoint:
    return row(
        eid,
        seq,
        node_id="turn:0/tool:t",
        step_type="resume",
        node_input={"resume": {"approved": True}, "reentry_seq": target},
    )


class Counter:
    """Counts the statements sent by every asyncpg connection (the pool's and the held writers')."""

    def __init__(self, store: PostgresStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[str] = []
        for name in ("fetch", "fetchrow", "fetchval", "execute", "executemany"):
            monkeypatch.setattr(
                asyncpg.Connection, name, self._counted(name, getattr(asyncpg.Connection, name))
            )

    def _counted(self, name: str, method: Any) -> Any:
        def call(conn: asyncpg.Connection, *args: Any, **kw: Any) -> Any:
            self.calls.append(name)
            return method(conn, *args, **kw)

        return call


# -- configuration and connection errors ------------------------------------------------------


@pytest.mark.parametrize("bad", ["", "1abc", "a-b", 'x"; DROP TABLE y; --', "a b", "é", "a" * 64])
def test_schema_name_is_validated(bad: str) -> None:
    with pytest.raises(StoreError, match="schema"):
        PostgresStore(DSN, schema=bad)


async def test_unreachable_dsn_is_store_unavailable_quickly_without_password() -> None:
    store = PostgresStore(f"postgresql://postgres:s3cret@127.0.0.1:{_closed_port()}/test", connect_timeout=2)
    start = time.monotonic()
    with pytest.raises(StoreUnavailable) as info:
        await store.latest("x")
    assert time.monotonic() - start < 3
    assert "127.0.0.1" in str(info.value) and "s3cret" not in str(info.value)
    with pytest.raises(StoreUnavailable):
        await store.try_lock("x")
    await store.close()


async def test_bad_database_is_store_unavailable() -> None:
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
    assert store._pool is not None
    assert await store._pool.fetchval("SELECT current_setting('synchronous_commit')") == "on"
    assert await store.try_lock("r")
    conn = store._lock_conn
    assert conn is not None
    assert await conn.fetchval("SELECT current_setting('tcp_keepalives_idle')") == "5"
    assert await conn.fetchval("SELECT current_setting('tcp_keepalives_count')") == "5"
    # Settings live in server_settings, so the pool never undoes them: still on after reuse.
    for _ in range(3):
        assert await store._pool.fetchval("SELECT current_setting('synchronous_commit')") == "on"


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
    conn = await asyncpg.connect(DSN)
    try:
        versions = await conn.fetch(f'SELECT version FROM "{schema}".schema_version')
    finally:
        await conn.close()
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
    from stores.postgres._schema import MIGRATIONS as _MIGRATIONS

    version, ddl = _MIGRATIONS[0]
    assert version == 1
    conn = await asyncpg.connect(DSN)
    try:
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
    finally:
        await conn.close()

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
    conn = await asyncpg.connect(DSN)
    try:
        versions = [r[0] for r in await conn.fetch(f'SELECT version FROM "{schema}".schema_version')]
        table = await conn.fetchval(f"SELECT to_regclass('\"{schema}\".messages')")
    finally:
        await conn.close()
    assert sorted(versions) == [1, 2] and SCHEMA_VERSION == 2
    assert table is None
    assert await _message_rows(schema) == len(V1_LOGS["a"]) + 2 + len(V1_LOGS["b"])  # each stored once


async def test_newer_schema_is_refused(store: PostgresStore, schema: str) -> None:
    await store.setup()
    conn = await asyncpg.connect(DSN)
    try:
        await conn.execute(f'INSERT INTO "{schema}".schema_version (version) VALUES ($1)', SCHEMA_VERSION + 7)
    finally:
        await conn.close()
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
    conn = await asyncpg.connect(DSN)
    try:
        count: int = await conn.fetchval(
            f'SELECT coalesce(sum(json_array_length(new_messages)), 0) FROM "{schema}".checkpoints'
        )
        return count
    finally:
        await conn.close()


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


# -- the ownership lock ------------------------------------------------------------------------


async def test_advisory_lock_is_exclusive_between_stores(store: PostgresStore, schema: str) -> None:
    other = PostgresStore(DSN, schema=schema)
    try:
        assert await store.try_lock("r")
        assert not await store.try_lock("r")  # a second holder in the same store
        assert not await other.try_lock("r")
        assert await other.try_lock("s")
        await store.unlock("r")
        assert await other.try_lock("r")
        await other.close()  # closing releases everything
        assert await store.try_lock("r") and await store.try_lock("s")
    finally:
        await other.close()


async def test_lock_is_scoped_by_schema(store: PostgresStore) -> None:
    other = PostgresStore(DSN, schema=f"t_{uuid.uuid4().hex}")
    try:
        assert await store.try_lock("r")
        assert await other.try_lock("r")
    finally:
        await other.close()


async def test_lock_freed_when_holder_is_killed(store: PostgresStore, schema: str) -> None:
    code = textwrap.dedent(
        f"""
        import anyio, sys
        from stores import PostgresStore
        async def main():
            s = PostgresStore({DSN!r}, schema={schema!r})
            assert await s.try_lock("r")
            print("held", flush=True)
            await anyio.sleep(60)
        anyio.run(main)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    async with await anyio.open_process([sys.executable, "-c", code], cwd=ROOT, env=env) as proc:
        assert proc.stdout is not None
        with anyio.fail_after(30):
            assert (await proc.stdout.receive()).startswith(b"held")
        assert not await store.try_lock("r")
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        start = time.monotonic()
        taken = await store.try_lock("r")
        for _ in range(100):  # the server notices the dead socket at once; allow a little slack
            if taken:
                break
            await anyio.sleep(0.01)
            taken = await store.try_lock("r")
        assert taken and time.monotonic() - start < 1


def _closed_port() -> int:
    """A TCP port on 127.0.0.1 that refuses connections (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# -- group commit --------------------------------------------------------------------------------


async def test_concurrent_appends_share_statements_and_keep_their_own_errors(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(12):
        await store.append(row(f"r{i}", 0, [{"role": "user", "content": "hi"}]))
    counter = Counter(store, monkeypatch)
    outcomes: dict[str, str] = {}

    async def write(i: int) -> None:
        seq = 0 if i == 3 else 1  # r3 asks for seq 0 again: RunExists for it alone
        try:
            await store.append(
                row(f"r{i}", seq, [{"role": "user", "content": "hi"}, {"role": "user", "content": "x"}])
            )
            outcomes[f"r{i}"] = "ok"
        except RunExists:
            outcomes[f"r{i}"] = "exists"

    async with anyio.create_task_group() as tg:
        for i in range(12):
            tg.start_soon(write, i)
    assert outcomes == {f"r{i}": ("exists" if i == 3 else "ok") for i in range(12)}
    assert counter.calls.count("fetch") >= 1  # batched
    assert len(counter.calls) < 12
    for i in range(12):
        history = await store.history(f"r{i}")
        assert [c.seq for c in history] == ([0] if i == 3 else [0, 1])
        assert history[-1].state_snapshot["messages"][-1]["content"] == ("hi" if i == 3 else "x")
    ids = [c.checkpoint_id for c in await store.fetch_unsynced(100)]
    assert len(ids) == 23


async def test_cancelled_waiting_appender_leaves_no_row(store: PostgresStore) -> None:
    await store.setup()
    async with anyio.create_task_group() as tg:
        for i in range(8):
            tg.start_soon(store.append, row(f"r{i}", 0))
        tg.cancel_scope.cancel()
    # Whatever was written is whole; the store still works and no flusher slot leaked.
    async with anyio.create_task_group() as tg:
        for i in range(8):
            tg.start_soon(store.append, row(f"s{i}", 0))
    assert store._flushers == 0 and store._queue == []
    for i in range(8):
        assert len(await store.history(f"s{i}")) == 1


async def test_held_writer_connections_are_released_on_close(schema: str) -> None:
    store = PostgresStore(DSN, schema=schema)
    await store.setup()
    async with anyio.create_task_group() as tg:
        for i in range(16):
            tg.start_soon(store.append, row(f"w{i}", 0))
    assert store._writers  # appends keep their connections between flushes
    with anyio.fail_after(2):  # a writer not given back would hold close() for its full timeout (5 s)
        await store.close()


async def test_a_killed_writer_connection_is_replaced(store: PostgresStore) -> None:
    await store.append(row("r", 0))
    pids = [writer.get_server_pid() for writer in store._writers]
    assert pids
    conn = await asyncpg.connect(DSN)
    try:
        for pid in pids:
            await conn.execute("SELECT pg_terminate_backend($1)", pid)
    finally:
        await conn.close()
    with anyio.fail_after(10):
        try:
            await store.append(row("r", 1))
        except StoreUnavailable:
            await store.append(row("r", 1))  # the next flush takes a fresh connection
        await store.append(row("r", 2))
    assert [c.seq for c in await store.history("r")] == [0, 1, 2]
    assert pids[0] not in [writer.get_server_pid() for writer in store._writers]


async def _advisory_locks_of(store: PostgresStore) -> int:
    """How many advisory locks (counting re-entries) the store's lock connection holds."""
    conn = store._lock_conn
    assert conn is not None
    pid = conn.get_server_pid()
    probe = await asyncpg.connect(DSN)
    try:
        found: int = await probe.fetchval(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = $1 AND granted", pid
        )
    finally:
        await probe.close()
    return found


async def test_concurrent_locks_share_round_trips(store: PostgresStore, schema: str) -> None:
    """50 runs taking their locks at once cost a few round trips, not 50; each is held once."""
    await store.setup()
    assert await store.try_lock("first")  # opens the lock connection
    before = store._locks.round_trips
    taken: dict[str, bool] = {}

    async def take(run: str) -> None:
        taken[run] = await store.try_lock(run)

    async with anyio.create_task_group() as tg:
        for i in range(50):
            tg.start_soon(take, f"run-{i}")
    assert taken == {f"run-{i}": True for i in range(50)}
    assert store._locks.round_trips - before <= 3, store._locks.round_trips - before
    assert await _advisory_locks_of(store) == 51
    other = PostgresStore(DSN, schema=schema)
    try:
        assert not await other.try_lock("run-7")
        before = store._locks.round_trips
        async with anyio.create_task_group() as tg:
            for i in range(50):
                tg.start_soon(store.unlock, f"run-{i}")
        assert store._locks.round_trips - before <= 3
        assert await _advisory_locks_of(store) == 1
        assert await other.try_lock("run-7")
    finally:
        await other.close()


async def test_release_then_take_in_one_batch_keeps_one_lock(store: PostgresStore) -> None:
    """A release and a new take of the same run queued together run in order: one lock remains."""
    assert await store.try_lock("r")
    assert await store.try_lock("pad")
    results: list[bool] = []

    async def retake() -> None:
        results.append(await store.try_lock("r"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(store.unlock, "pad")  # the flusher: the next two queue behind its round trip
        tg.start_soon(store.unlock, "r")
        tg.start_soon(retake)
    assert results == [True]
    assert await _advisory_locks_of(store) == 1  # "r" once, not twice (session locks re-enter)
    await store.unlock("r")
    assert await _advisory_locks_of(store) == 0


async def test_cancelled_lock_attempts_leave_no_lock_behind(store: PostgresStore, schema: str) -> None:
    """A try_lock cancelled at any point either owns the lock (it returned) or leaves it free."""
    await store.setup()
    assert await store.try_lock("warm")
    other = PostgresStore(DSN, schema=schema)
    try:
        for attempt in range(40):
            run = f"c-{attempt}"
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(store.try_lock, f"noise-{attempt}")  # another op in the batch
                    for _ in range(attempt % 4):
                        await anyio.lowlevel.checkpoint()
                    tg.start_soon(store.try_lock, run)
                    for _ in range(attempt % 3):
                        await anyio.lowlevel.checkpoint()
                    scope.cancel()
            if run in store._locks.held:
                await store.unlock(run)
            assert await other.try_lock(run), f"attempt {attempt}: the lock of {run} leaked"
            await other.unlock(run)
        held = set(store._locks.held)
        assert await _advisory_locks_of(store) == len(held), held
    finally:
        await other.close()
