"""A store outage is a pause, not a failure (SQLite, in one process).

Another connection holds SQLite's write lock while a run needs to write its next row. Shorter than
``store_outage_grace``, the write waits and the run completes. Longer, the run is abandoned: it
stops without writing (no failed marker, no gap in ``seq``), and once the lock is free a sweep of
this process (which may still be named as the run's owner) recovers it; its ``@idempotent``
charge ran once.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from actors import ActorSystem, Agent, idempotent, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import RUN_END, Checkpoint, SQLiteStore, StoreError, StoreUnavailable

pytestmark = pytest.mark.anyio


def _agent(charges: list[str], entered: anyio.Event, go: anyio.Event) -> Agent:
    @idempotent
    async def charge(order: str) -> str:
        charges.append(order)
        return f"charged {order}"

    @tool
    async def process(order: str) -> str:
        """Charge an order, then wait for the test to take the write lock."""
        done = await charge(order)
        entered.set()
        await go.wait()
        return done

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"done: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("process", {"order": messages[-1].content})])

    return Agent("outage", FunctionModel(model), tools=[process])


def _lock(path: Path) -> sqlite3.Connection:
    """Another connection holding the database's write lock."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("BEGIN IMMEDIATE")
    return conn


def _unlock(conn: sqlite3.Connection) -> None:
    conn.execute("ROLLBACK")
    conn.close()


@pytest.mark.parametrize(("grace", "held"), [(5.0, 1.0), (0.5, 2.0)])
async def test_a_run_waits_out_a_locked_store_or_is_abandoned_for_a_sweep(
    tmp_path: Path, grace: float, held: float
) -> None:
    path = tmp_path / "tether.db"
    charges: list[str] = []
    entered, go = anyio.Event(), anyio.Event()
    runner = _agent(charges, entered, go)
    async with (
        SQLiteStore(path, busy_timeout=0.1) as store,
        ActorSystem(store, runners=[runner], store_outage_grace=grace) as system,
    ):
        ref = await system.spawn(runner, "o1", execution_id="run-1")
        with anyio.fail_after(10):
            await entered.wait()
        conn = await anyio.to_thread.run_sync(_lock, path)
        try:
            go.set()  # the run's next row now meets the lock
            with anyio.fail_after(held + 10):
                if grace > held:
                    await anyio.sleep(held)
                else:
                    with pytest.raises(StoreError, match="run-1"):
                        await ref.result()
        finally:
            await anyio.to_thread.run_sync(_unlock, conn)
        if grace <= held:
            rows = await system.history("run-1")
            assert RUN_END not in [r.step_type for r in rows]  # abandoned: nothing written after
            with anyio.fail_after(20):
                assert await system.sweep() == 1
        with anyio.fail_after(20):
            result = await system.ref("run-1").result() if grace <= held else await ref.result()
        assert result.status == "completed" and result.output == "done: charged o1"
        rows = await system.history("run-1")
        assert [r.seq for r in rows] == list(range(len(rows)))
        assert [(r.step_type, r.status) for r in rows if r.step_type == RUN_END] == [(RUN_END, "completed")]
    assert charges == ["o1"]


async def test_the_grace_is_a_number_of_seconds() -> None:
    for bad in (-1, "60", None, True):
        with pytest.raises(ValueError, match="store_outage_grace"):
            ActorSystem(store_outage_grace=bad)  # type: ignore[arg-type]
    ActorSystem(store_outage_grace=0)


class _CommitThenLose(SQLiteStore):
    """A real SQLite store whose appends of ``node_id`` commit and then report a lost connection
    (the first ``times`` times): a write whose outcome the writer cannot know."""

    def __init__(self, path: Path, node_id: str, times: int) -> None:
        super().__init__(path)
        self.node_id, self.times = node_id, times

    async def append(self, row: Checkpoint) -> None:
        await super().append(row)
        if row.node_id == self.node_id and self.times > 0:
            self.times -= 1
            raise StoreUnavailable("the connection was lost while the commit was acknowledged")


@pytest.mark.parametrize("node_id", ["turn:0", "turn:0/tool:process", "turn:1", "run_end"])
async def test_a_retry_that_finds_its_own_row_committed_is_done(tmp_path: Path, node_id: str) -> None:
    charges: list[str] = []
    entered, go = anyio.Event(), anyio.Event()
    go.set()
    runner = _agent(charges, entered, go)
    async with (
        _CommitThenLose(tmp_path / "tether.db", node_id, times=1) as store,
        ActorSystem(store, runners=[runner]) as system,
    ):
        with anyio.fail_after(20):
            result = await (await system.spawn(runner, "o1", execution_id="run-1")).result()
        assert result.status == "completed" and result.output == "done: charged o1"
        assert store.times == 0  # the lost acknowledgement was met
        rows = await system.history("run-1")
    assert [r.seq for r in rows] == list(range(len(rows)))
    assert [r.node_id for r in rows] == ["turn:0", "turn:0/tool:process", "turn:1", "run_end"]
    assert charges == ["o1"]


async def test_a_row_the_store_refused_leaves_no_gap_before_the_failed_marker(tmp_path: Path) -> None:
    """A step row refused by the store (too large) fails the run: the marker takes the refused
    row's ``seq``."""

    @tool
    async def note(text: str) -> str:
        """Take a note."""
        return "noted"

    def model(messages: list[Message]) -> str | ModelReply:
        return ModelReply(tool_calls=[ToolCall("note", {"text": "x" * 20_000})])

    runner = Agent("refused", FunctionModel(model), tools=[note])
    async with (
        SQLiteStore(tmp_path / "tether.db", max_row_bytes=8_000) as store,
        ActorSystem(store, runners=[runner]) as system,
    ):
        result = await (await system.spawn(runner, "hi", execution_id="run-1")).result(timeout=20)
        assert result.status == "failed" and "RowTooLarge" in (result.error or "")
        rows = await system.history("run-1")
    assert [r.seq for r in rows] == list(range(len(rows)))
    assert [r.step_type for r in rows] == ["llm_call", RUN_END]
