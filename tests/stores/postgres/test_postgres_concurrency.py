"""PostgresStore only: advisory locks, group commit and its kept writer connections."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import time
import uuid
from typing import Any

import anyio
import asyncpg
import pytest
from _pg_support import DSN, ROOT, Counter, row, schema_fixture, store_fixture  # noqa: F401 (fixtures)
from conftest import on_asyncpg

from stores import (
    PostgresStore,
    RunExists,
    StoreUnavailable,
)

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


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
    assert store._db.flushers == 0 and store._db.queue == []
    for i in range(8):
        assert len(await store.history(f"s{i}")) == 1


async def test_held_writer_connections_are_released_on_close(schema: str) -> None:
    store = PostgresStore(DSN, schema=schema)
    await store.setup()
    async with anyio.create_task_group() as tg:
        for i in range(16):
            tg.start_soon(store.append, row(f"w{i}", 0))
    assert store._db.writers  # appends keep their connections between flushes
    with anyio.fail_after(2):  # a writer not given back would hold close() for its full timeout (5 s)
        await store.close()


async def test_a_killed_writer_connection_is_replaced(store: PostgresStore) -> None:
    await store.append(row("r", 0))
    pids = [writer.get_server_pid() for writer in store._db.writers]
    assert pids

    async def terminate_writers(conn: asyncpg.Connection) -> None:
        for pid in pids:
            await conn.execute("SELECT pg_terminate_backend($1)", pid)

    await on_asyncpg(DSN, terminate_writers)
    with anyio.fail_after(10):
        try:
            await store.append(row("r", 1))
        except StoreUnavailable:
            await store.append(row("r", 1))  # the next flush takes a fresh connection
        await store.append(row("r", 2))
    assert [c.seq for c in await store.history("r")] == [0, 1, 2]
    assert pids[0] not in [writer.get_server_pid() for writer in store._db.writers]


async def test_a_kept_writer_prepares_each_statement_once(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    prepared: list[str] = []
    prepare = asyncpg.Connection.prepare

    async def counted(conn: asyncpg.Connection, query: str, **kw: Any) -> Any:
        prepared.append(query)
        return await prepare(conn, query, **kw)

    monkeypatch.setattr(asyncpg.Connection, "prepare", counted)
    for seq in range(5):
        await store.append(row("r", seq))
    # The first row's statement and the later rows' one, prepared once on the one kept writer.
    assert len(prepared) == 2
    [writer] = store._db.writers
    assert sorted(store._db.prepared[writer]) == ["append", "append_step"]
    assert [c.seq for c in await store.history("r")] == [0, 1, 2, 3, 4]
    await store.close()
    assert store._db.prepared == {}  # dropped with the writers


async def _advisory_locks_of(store: PostgresStore) -> int:
    """How many advisory locks (counting re-entries) the store's lock connection holds."""
    conn = store._lock_conn
    assert conn is not None
    pid = conn.get_server_pid()

    async def read_locks(conn: asyncpg.Connection) -> int:
        found: int = await conn.fetchval(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = $1 AND granted", pid
        )
        return found

    return await on_asyncpg(DSN, read_locks)


async def test_many_owned_runs_hold_one_advisory_lock(store: PostgresStore, schema: str) -> None:
    """50 runs owned at once hold ONE advisory lock (the owner's), each run owned exactly once."""
    await store.setup()
    taken: dict[str, bool] = {}

    async def take(run: str) -> None:
        taken[run] = await store.try_lock(run)

    async with anyio.create_task_group() as tg:
        for i in range(50):
            tg.start_soon(take, f"run-{i}")
    assert taken == {f"run-{i}": True for i in range(50)}
    assert await _advisory_locks_of(store) == 1
    other = PostgresStore(DSN, schema=schema)
    try:
        assert not await other.try_lock("run-7")
        async with anyio.create_task_group() as tg:
            for i in range(50):
                tg.start_soon(store.unlock, f"run-{i}")
        assert await _advisory_locks_of(store) == 1  # the liveness lock stays for the next runs
        assert await other.try_lock("run-7")
        assert not await store.try_lock("run-7")
    finally:
        await other.close()


async def test_cancelled_lock_attempts_leave_no_lock_behind(store: PostgresStore, schema: str) -> None:
    """A try_lock cancelled at any point either owns the run (it is held) or leaves it free."""
    await store.setup()
    assert await store.try_lock("warm")
    other = PostgresStore(DSN, schema=schema)
    try:
        for attempt in range(40):
            run = f"c-{attempt}"
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(store.try_lock, f"noise-{attempt}")  # another op at the same time
                    for _ in range(attempt % 4):
                        await anyio.lowlevel.checkpoint()
                    tg.start_soon(store.try_lock, run)
                    for _ in range(attempt % 3):
                        await anyio.lowlevel.checkpoint()
                    scope.cancel()
            if run in store._own.held:
                await store.unlock(run)
            assert await other.try_lock(run), f"attempt {attempt}: the ownership of {run} leaked"
            await other.unlock(run)
        assert await _advisory_locks_of(store) == 1
    finally:
        await other.close()
