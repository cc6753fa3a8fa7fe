"""What only the SQLite store promises: file settings, group commit, the message log, the OFD lock."""

from __future__ import annotations

import os
import sqlite3
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import msgspec
import pytest
from conftest import V1_LOGS, V1_ROWS, check_v1_history

from stores import (
    AlreadyResumed,
    Checkpoint,
    IncompatibleSchema,
    InvalidStoreURL,
    PendingInterrupt,
    RunExists,
    RunNotFound,
    SerializationError,
    SQLiteStore,
    StoreUnavailable,
    WriteConflict,
)

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Each test runs under both of anyio's event loops: the store's threads wake either."""
    return str(request.param)


def row(eid: str, seq: int, messages: list[dict[str, Any]] | None = None, **kw: Any) -> Checkpoint:
    snapshot: dict[str, Any] = {"turn": seq}
    if messages is not None:
        snapshot["messages"] = messages
    kw.setdefault("agent_path", "agent:a")
    kw.setdefault("node_id", f"turn:{seq}")
    return Checkpoint(execution_id=eid, seq=seq, runner="a", state_snapshot=snapshot, **kw)


def msg(i: int) -> dict[str, Any]:
    return {"role": "user", "content": f"message {i}"}


def exists(path: str) -> bool:
    return os.path.exists(path)


def message_rows(path: Path) -> int:
    """How many messages are stored: the sum of every row's chunk."""
    with sqlite3.connect(path) as conn:
        found = conn.execute("SELECT coalesce(sum(json_array_length(new_messages)), 0) FROM checkpoints")
        return int(found.fetchone()[0])


async def test_files_are_private_and_settings_applied(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    store = SQLiteStore(path)
    try:
        await store.append(row("r", 0))
        assert await store.try_lock("r")
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(f"{path}.locks").st_mode) == 0o600
        pragmas = await store._read(
            lambda c: (
                c.execute("PRAGMA journal_mode").fetchone()[0],
                c.execute("PRAGMA synchronous").fetchone()[0],
            )
        )
        assert pragmas == ("wal", 2)  # synchronous=FULL
    finally:
        await store.close()


async def test_not_a_database_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    content = b"these are my notes, not a database\n" * 100
    path.write_bytes(content)
    store = SQLiteStore(path)
    with pytest.raises(StoreUnavailable, match=r"notes\.txt"):
        await store.append(row("r", 0))
    await store.close()
    assert path.read_bytes() == content
    assert not exists(f"{path}-wal")


async def test_unopenable_path_is_unavailable(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "missing" / "dir" / "t.db")
    with pytest.raises(StoreUnavailable, match="missing"):
        await store.setup()
    await store.close()


def test_a_url_is_refused_with_a_hint(tmp_path: Path) -> None:
    """SQLiteStore takes a path; a URL (for open_store) is refused before any file is made."""
    for url in ("sqlite:///runs.db", "postgresql://user:secret@db.example/runs"):
        with pytest.raises(InvalidStoreURL, match=r"SQLiteStore takes a file path.*open_store\(") as info:
            SQLiteStore(url)
        assert "secret" not in str(info.value)
    assert list(tmp_path.iterdir()) == []


async def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    store = SQLiteStore(path)
    await store.setup()
    await store.setup()
    await store.close()
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version = 999")
    store = SQLiteStore(path)
    with pytest.raises(IncompatibleSchema, match="999"):
        await store.setup()
    await store.close()


async def test_group_commit_batches_concurrent_writes(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "t.db")
    try:
        await store.setup()
        before = store.transactions
        async with anyio.create_task_group() as tg:
            for i in range(64):
                tg.start_soon(store.append, row(f"run{i}", 0, [msg(i)]))
        assert store.transactions - before < 64
        for i in range(64):
            history = await store.history(f"run{i}")
            assert [r.state_snapshot["messages"] for r in history] == [[msg(i)]]
    finally:
        await store.close()


async def test_a_caller_answered_by_a_batch_writes_next_with_the_rows_queued_meanwhile(
    tmp_path: Path,
) -> None:
    # A writes row 0 (its batch goes to the writer thread); B queues a row while that batch
    # commits. A's next row, written as soon as A is answered, shares B's batch: the next batch
    # is formed one loop turn after the answers, not from what was queued before them.
    store = SQLiteStore(tmp_path / "t.db")
    try:
        await store.setup()
        await store.append(row("warm", 0))
        before = store.transactions

        async def first() -> None:
            await store.append(row("a", 0, [msg(0)]))
            await store.append(row("a", 1, [msg(0), msg(1)]))

        async def second() -> None:
            await anyio.lowlevel.checkpoint()  # A's row is queued and its batch posted first
            await anyio.lowlevel.checkpoint()
            await store.append(row("b", 0, [msg(2)]))

        async with anyio.create_task_group() as tg:
            tg.start_soon(first)
            tg.start_soon(second)
        assert [r.seq for r in await store.history("a")] == [0, 1]
        assert [r.seq for r in await store.history("b")] == [0]
        assert store.transactions - before == 2
    finally:
        await store.close()


async def test_a_conflict_in_a_batch_rolls_back_only_itself(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "t.db")
    try:
        original = row("taken", 0, [msg(0)])
        await store.append(original)
        results: dict[str, BaseException | None] = {}

        async def put(r: Checkpoint) -> None:
            try:
                await store.append(r)
                results[r.execution_id] = None
            except Exception as exc:
                results[r.execution_id] = exc

        before = store.transactions
        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(put, row(f"ok{i}", 0))
            tg.start_soon(put, row("taken", 0, [msg(9)]))
        assert store.transactions - before < 9
        assert isinstance(results.pop("taken"), RunExists)
        assert all(v is None for v in results.values())
        assert await store.history("taken") == [original]
        with pytest.raises(WriteConflict):
            await store.append(row("taken", 1, checkpoint_id=original.checkpoint_id))
    finally:
        await store.close()


async def test_messages_are_stored_once_and_survive_a_new_process(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    store = SQLiteStore(path)
    messages = [msg(0)]
    for seq in range(5):
        messages = [*messages, msg(seq + 1)]
        await store.append(row("r", seq, messages))
    await store.close()
    assert message_rows(path) == 6

    again = SQLiteStore(path)  # a new process: nothing in memory
    try:
        found = await again.reentry("r")
        assert found.step.state_snapshot["messages"] == messages
        await again.append(row("r", 5, [*messages, msg(99)]))
        assert message_rows(path) == 7
        assert (await again.latest("r")) is not None
        assert (await again.history("r"))[-1].state_snapshot["messages"] == [*messages, msg(99)]
    finally:
        await again.close()


async def test_a_failed_write_does_not_leave_a_gap_in_the_log(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "t.db")
    try:
        await store.append(row("r", 0, [msg(0)]))
        await store.append(row("r", 1, [msg(0), msg(1)]))
        with pytest.raises(WriteConflict):  # seq 1 is taken: its new message must not count as stored
            await store.append(row("r", 1, [msg(0), msg(1), msg(2)]))
        await store.append(row("r", 2, [msg(0), msg(1), msg(2), msg(3)]))
        rows = await store.history("r")
        assert rows[-1].state_snapshot["messages"] == [msg(0), msg(1), msg(2), msg(3)]
    finally:
        await store.close()


async def test_bad_json_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "t.db")
    try:
        await store.append(row("r", 0, [msg(0)]))
        before = store.transactions
        with pytest.raises(SerializationError) as info:
            await store.append(row("r", 1, [msg(0), {"role": "user", "content": float("nan")}]))
        assert info.value.path == "$.state_snapshot.messages[1].content"
        with pytest.raises(SerializationError):
            await store.cache_put("r", "k", {1, 2})
        assert store.transactions == before
        assert len(await store.history("r")) == 1
    finally:
        await store.close()


async def test_a_claim_loser_pays_no_write_transaction(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "t.db")
    try:
        await store.append(row("r", 0))
        pause = row("r", 1, step_type="hitl_pause", status="interrupted")
        await store.append_pause(pause, PendingInterrupt(execution_id="r", reason="approve?"))
        claimed = await store.claim(row("r", 2, step_type="resume", node_input={"reentry_seq": 1}))
        assert claimed.reason == "approve?"
        before = store.transactions
        with pytest.raises(AlreadyResumed, match="'r'"):
            await store.claim(row("r", 3, step_type="resume"))
        with pytest.raises(RunNotFound):
            await store.claim(row("nobody", 0, step_type="resume"))
        assert store.transactions == before
    finally:
        await store.close()


async def test_a_cancelled_writer_leaves_its_row_written_and_the_next_batch_going(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "t.db")
    try:
        await store.setup()
        with anyio.move_on_after(0) as scope:  # cancelled while its batch is at the writer
            await store.append(row("gone", 0, [msg(0)]))
        assert scope.cancelled_caught
        await store.append(row("next", 0, [msg(1)]))
        assert [r.seq for r in await store.history("next")] == [0]
        assert [r.seq for r in await store.history("gone")] == [0]  # committed all the same
    finally:
        await store.close()


async def test_racing_claims_have_one_winner(tmp_path: Path) -> None:
    stores = [SQLiteStore(tmp_path / "t.db") for _ in range(4)]
    try:
        await stores[0].append(row("r", 0))
        await stores[0].append_pause(
            row("r", 1, step_type="hitl_pause", status="interrupted"),
            PendingInterrupt(execution_id="r", reason="?"),
        )
        outcomes: list[str] = []

        async def claim(i: int) -> None:
            try:
                await stores[i % 4].claim(row("r", 2, step_type="resume", node_input={"reentry_seq": 1}))
                outcomes.append("won")
            except AlreadyResumed:
                outcomes.append("lost")

        async with anyio.create_task_group() as tg:
            for i in range(20):
                tg.start_soon(claim, i)
        assert sorted(outcomes) == ["lost"] * 19 + ["won"]
        assert await stores[0].pending() == []
    finally:
        for store in stores:
            await store.close()


async def test_prune_keeps_what_reentry_reads(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "t.db")
    try:
        for seq in range(3):
            await store.append(row("crashed", seq, [msg(i) for i in range(seq + 1)]))
        await store.append(row("crashed", 3, step_type="recover", node_input={"reentry_seq": 1}))
        await store.append(row("done", 0, [msg(0)]))
        await store.append(row("done", 1, node_id="run_end", step_type="run_end"))
        await store.cache_put("done", "k", 1)
        await store.cache_put("crashed", "k", 1)
        before = await store.reentry("crashed")
        assert (
            await store.prune(timedelta(0)) == 4
        )  # crashed: seq 0 and 2 (1 and 3 re-entry reads); done: both
        assert await store.reentry("crashed") == before
        assert await store.history("done") == []
        assert await store.cache_get("done", "k") is None
        assert await store.cache_get("crashed", "k") is not None
    finally:
        await store.close()


async def test_ownership_lock_in_process(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    first, second = SQLiteStore(path), SQLiteStore(path)
    try:
        assert await first.try_lock("r")
        assert not await first.try_lock("r")
        assert not await second.try_lock("r")
        assert await second.try_lock("other")
        await first.unlock("r")
        assert await second.try_lock("r")
        await second.close()  # releases both of its locks
        assert await first.try_lock("r")
        assert await first.try_lock("other")
    finally:
        await first.close()
        await second.close()


def _descriptors_of(name: str) -> int:
    """How many of this process's file descriptors are open on the file ``name``."""
    path = os.path.realpath(name)
    found = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            found += os.readlink(f"/proc/self/fd/{fd}") == path
        except OSError:
            continue
    return found


async def test_ownership_locks_share_one_descriptor(tmp_path: Path) -> None:
    """A store holds all of its runs' locks on one descriptor; releasing one run keeps the others."""
    path = tmp_path / "t.db"
    first, second = SQLiteStore(path), SQLiteStore(path)
    try:
        runs = [f"run-{i}" for i in range(20)]
        for run in runs:
            assert await first.try_lock(run)
        assert _descriptors_of(first.lock_path) == 1
        await first.unlock("run-3")
        assert await second.try_lock("run-3")
        for run in runs:
            if run != "run-3":
                assert not await second.try_lock(run), run  # still held by ``first``
        await first.close()  # closing the descriptor releases the other 19 at once
        assert _descriptors_of(first.lock_path) == 1  # ``second``'s own
        for run in runs:
            if run != "run-3":
                assert await second.try_lock(run), run
    finally:
        await first.close()
        await second.close()


async def test_outbox_round_trip(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "t.db")
    try:
        rows = [row("r", seq, [msg(i) for i in range(seq + 1)]) for seq in range(3)]
        for r in rows:
            await store.append(r)
        assert await store.fetch_unsynced(10) == rows
        await store.mark_synced([rows[0].checkpoint_id])
        await store.mark_quarantined({rows[1].checkpoint_id: "poison"})
        await store.mark_quarantined({})
        assert await store.fetch_unsynced(10) == [rows[2]]
        assert await store.sync_state(rows[1].checkpoint_id) == (True, "poison")
        assert await store.sync_state("nope") is None

        other = SQLiteStore(tmp_path / "other.db")
        try:
            assert await other.import_rows(rows) == 3
            assert await other.import_rows(rows) == 0
            assert await other.history("r") == rows
            assert await other.fetch_unsynced(10) == []
        finally:
            await other.close()
    finally:
        await store.close()


async def test_a_schema_1_file_is_converted_and_keeps_every_message(tmp_path: Path) -> None:
    """Schema 2 moves messages onto the rows that added them; every row reads what it read before."""
    from stores.lowlevel import sqlite_schema_module
    from stores.lowlevel import ts as _ts

    path = tmp_path / "v1.db"
    conn = sqlite3.connect(path)
    v1 = sqlite_schema_module.MIGRATIONS[1]
    assert isinstance(v1, tuple)
    for statement in v1:
        conn.execute(statement)
    now = _ts(datetime.now(UTC))
    for eid, seq, agent_path, log_id, count in V1_ROWS:
        conn.execute(
            "INSERT INTO checkpoints (checkpoint_id, execution_id, seq, runner, node_id, step_index, "
            "step_type, status, state_snapshot, log_id, message_count, node_input, node_output, "
            "interrupt_context, agent_path, created_at) "
            "VALUES (?, ?, ?, 'a', ?, ?, 'llm_call', 'completed', ?, ?, ?, '{}', '{}', '{}', ?, ?)",
            (f"{eid}-{seq}", eid, seq, f"turn:{seq}", seq, b'{"turn":1}', log_id, count, agent_path, now),
        )
    for log_id, messages in V1_LOGS.items():
        for idx, message in enumerate(messages):
            conn.execute(
                "INSERT INTO messages VALUES (?, ?, ?, ?)", ("r", log_id, idx, msgspec.json.encode(message))
            )
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()

    async with SQLiteStore(path) as store:
        await check_v1_history(store)
        # The converted log goes on: a store that never saw it extends it, and so does this one.
        more = [*V1_LOGS["a"], {"role": "user", "content": "a6"}]
        async with SQLiteStore(path) as fresh:
            await fresh.append(row("r", 6, more))
        await store.append(row("r", 7, [*more, {"role": "user", "content": "a7"}]))
        assert [c.state_snapshot["messages"] for c in (await store.history("r"))[-2:]] == [
            more,
            [*more, {"role": "user", "content": "a7"}],
        ]
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == sqlite_schema_module.SCHEMA_VERSION
        names = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()
    assert "messages" not in names and "pending_created" in names
    assert message_rows(path) == len(V1_LOGS["a"]) + 2 + len(V1_LOGS["b"])  # each message stored once


async def test_a_schema_2_file_keeps_its_outbox_without_the_index(tmp_path: Path) -> None:
    """Schema 3 replaces the partial index of unsynced rows by a mark: the same rows stay to send."""
    from stores.lowlevel import sqlite_schema_module

    path = tmp_path / "v2.db"
    async with SQLiteStore(path) as store:
        rows = [row(f"run-{i}", 0, [{"role": "user", "content": f"m{i}"}]) for i in range(6)]
        for one in rows:
            await store.append(one)
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE outbox")  # back to schema 2: the index, no mark (and no schema 4)
    conn.execute("DROP TABLE run_owners")
    conn.execute("DROP TABLE queues")  # and no schema 7
    conn.execute("DROP TABLE run_queues")
    conn.execute("DROP TABLE queue_starts")
    conn.execute("DROP INDEX pending_interrupts_expiry")
    conn.execute("ALTER TABLE pending_interrupts DROP COLUMN expires_at")
    v1 = sqlite_schema_module.MIGRATIONS[1]
    assert isinstance(v1, tuple)
    conn.execute(next(s for s in v1 if "checkpoints_unsynced" in s))
    conn.execute("UPDATE checkpoints SET synced = 1 WHERE execution_id IN ('run-0', 'run-1', 'run-3')")
    conn.execute("PRAGMA user_version = 2")
    conn.commit()
    conn.close()

    async with SQLiteStore(path) as store:
        assert await store.fetch_unsynced(100) == [rows[2], rows[4], rows[5]]
        await store.mark_synced([rows[2].checkpoint_id])
        assert await store.fetch_unsynced(100) == [rows[4], rows[5]]
    with sqlite3.connect(path) as conn:
        indexes = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        (low,) = conn.execute("SELECT low FROM outbox").fetchone()
        (first,) = conn.execute("SELECT id FROM checkpoints WHERE execution_id = 'run-4'").fetchone()
        plan = " ".join(
            str(r)
            for r in conn.execute(
                "EXPLAIN QUERY PLAN SELECT id FROM checkpoints WHERE id >= (SELECT low FROM outbox) AND synced = 0 "
                "ORDER BY id LIMIT 5"
            )
        )
    conn.close()
    assert "checkpoints_unsynced" not in indexes
    assert low == first  # the mark sits on the oldest row still to send
    assert "rowid>?" in plan  # fetching starts at the mark, not at the start of the table


def _locks_held(path: Path) -> list[str]:
    """This process's POSIX locks on ``path``, as /proc/locks lists them (type and byte range)."""
    inode = os.stat(path).st_ino
    with open("/proc/locks") as table:
        return [
            f"{fields[3]} {fields[-2]}-{fields[-1]}"
            for fields in (line.split() for line in table)
            if fields[1] == "POSIX" and fields[4] == str(os.getpid()) and fields[5].endswith(f":{inode}")
        ]


async def test_a_second_store_on_the_file_keeps_the_first_ones_locks(tmp_path: Path) -> None:
    """Opening and closing a second store instance on the file keeps the first one's SQLite locks.

    Closing any descriptor of a database file drops every POSIX lock the process holds on it; the
    last connection of another process may then checkpoint and delete the WAL under this one (proof
    2 saw "database disk image is malformed" that way before the store stopped opening the file).
    """
    path = tmp_path / "t.db"
    async with SQLiteStore(path) as first:
        await first.append(row("r", 0, [msg(0)]))
        before = _locks_held(path)
        assert before  # a WAL connection holds a shared lock on the database file while open
        async with SQLiteStore(path) as second:
            assert len(await second.history("r")) == 1
        assert _locks_held(path) == before
        assert len(await first.history("r")) == 1
