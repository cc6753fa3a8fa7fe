"""Bad input gets a clear typed error, and nothing stored is lost or half-written."""

from __future__ import annotations

import math
import os
import socket
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import Backend

from stores import (
    HITL_PAUSE,
    INTERRUPTED,
    REENTRY_SEQ,
    RESUME,
    Cached,
    Checkpoint,
    InvalidExecutionId,
    PostgresStore,
    RowTooLarge,
    RunNotFound,
    SerializationError,
    SQLiteStore,
    Store,
    StoreUnavailable,
    utcnow,
)
from stores.testing import make_message, make_pending, make_row

pytestmark = pytest.mark.anyio

BAD: list[tuple[str, Any]] = [
    ("nan", math.nan),
    ("inf", math.inf),
    ("bytes", b"\xff"),
    ("set", {1}),
    ("datetime", datetime(2024, 1, 1, tzinfo=UTC)),
    ("int-key", {7: "x"}),
    ("nul", "a\x00"),
    ("int-over-64-bits", 2**70),
    ("object", object()),
]
IDS = [b[0] for b in BAD]


async def _seeded(backend: Backend, **options: Any) -> tuple[Store, list[Checkpoint]]:
    store = backend.open(**options)
    await store.setup()
    rows = [make_row("run", 0, messages=[make_message(0)]), make_row("run", 1, messages=[make_message(0)])]
    for row in rows:
        await store.append(row)
    await store.cache_put("run", "k", {"kept": True})
    return store, rows


async def _unchanged(store: Store, rows: list[Checkpoint]) -> None:
    assert await store.history("run") == rows
    assert await store.cache_get("run", "k") == Cached({"kept": True})


@pytest.mark.parametrize(("label", "value"), BAD, ids=IDS)
async def test_every_refused_value_everywhere(store_backend: Backend, label: str, value: Any) -> None:
    store, rows = await _seeded(store_backend)
    try:
        with anyio.fail_after(30):
            msgs = [make_message(0), make_message(1), {"role": "tool", "content": value}]
            with pytest.raises(SerializationError) as info:
                await store.append(make_row("run", 2, messages=msgs))
            assert info.value.path == "$.state_snapshot.messages[2].content", label
            await _unchanged(store, rows)
            with pytest.raises(SerializationError) as info:
                await store.append(make_row("run", 2, node_input={"x": value}))
            assert info.value.path == "$.node_input.x"
            await _unchanged(store, rows)
            pause = make_row("run", 2, "turn:1/tool:t", step_type=HITL_PAUSE, status=INTERRUPTED)
            with pytest.raises(SerializationError) as info:
                await store.append_pause(pause, make_pending("run", pause, context={"c": [value]}))
            assert info.value.path == "$.context.c[0]"
            await _unchanged(store, rows)
            assert await store.pending("run") == []
            pending = make_pending("run", pause)
            await store.append_pause(pause, pending)
            rows.append(pause)
            claim = make_row("run", 3, step_type=RESUME, node_input={REENTRY_SEQ: 2, "resume": {"v": value}})
            with pytest.raises(SerializationError) as info:
                await store.claim(claim)
            assert info.value.path == "$.node_input.resume.v"
            await _unchanged(store, rows)
            assert await store.pending("run") == [pending]
            with pytest.raises(SerializationError):
                await store.cache_put("run", "k2", {"v": value})
            assert await store.cache_get("run", "k2") is None
            await _unchanged(store, rows)
            good = make_row("run", 3, messages=[make_message(0), make_message(1)])
            await store.append(good)
            assert await store.history("run") == [*rows, good]
    finally:
        await store.close()


async def test_unknown_runs_raise_run_not_found_naming_the_run(store_backend: Backend) -> None:
    store, rows = await _seeded(store_backend)
    try:
        with anyio.fail_after(30):
            with pytest.raises(RunNotFound, match="no-such-run-42"):
                await store.claim(make_row("no-such-run-42", 1, step_type=RESUME))
            with pytest.raises(RunNotFound, match="no-such-run-42"):
                await store.reentry("no-such-run-42")
            with pytest.raises(RunNotFound, match="no-such-run-42"):
                await store.forkable("no-such-run-42")
            assert await store.history("no-such-run-42") == []
            await _unchanged(store, rows)
    finally:
        await store.close()


async def test_row_over_the_size_limit(store_backend: Backend) -> None:
    store, rows = await _seeded(store_backend, max_row_bytes=2048)
    try:
        with anyio.fail_after(30):
            with pytest.raises(RowTooLarge) as info:
                await store.append(make_row("run", 2, messages=[make_message(0), make_message(1, size=4000)]))
            assert isinstance(info.value, SerializationError) and "2048" in str(info.value)
            with pytest.raises(RowTooLarge):
                await store.append(make_row("run", 2, node_output={"blob": "z" * 4000}))
            await _unchanged(store, rows)
            good = make_row("run", 2, messages=[make_message(0), make_message(1)])
            await store.append(good)
            assert await store.history("run") == [*rows, good]
    finally:
        await store.close()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_unreachable_dsn_is_store_unavailable_quickly() -> None:
    port = _closed_port()
    dsn = f"postgresql://postgres@127.0.0.1:{port}/test"
    store = PostgresStore(dsn, schema="t_unreachable")
    started = time.monotonic()
    try:
        with anyio.fail_after(30):
            with pytest.raises(StoreUnavailable) as info:
                await store.setup()
    finally:
        with anyio.move_on_after(5):
            await store.close()
    assert time.monotonic() - started < 10
    assert str(info.value) == (
        f"cannot reach PostgreSQL at 127.0.0.1:{port}/test: connection refused "
        "(is the server running and accepting TCP connections there?)"
    )


@pytest.mark.parametrize("content", [os.urandom(4096), b"not a database, just notes\n" * 40])
async def test_a_file_that_is_not_sqlite_is_store_unavailable(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(content)
    store = SQLiteStore(path)
    try:
        with anyio.fail_after(30):
            with pytest.raises(StoreUnavailable):
                await store.setup()
            with pytest.raises(StoreUnavailable):
                await store.append(make_row("run", 0))
    finally:
        with anyio.move_on_after(5):
            await store.close()
    assert path.read_bytes() == content


async def test_a_lone_surrogate_id_is_refused_by_heads_status_and_runs(store_backend: Backend) -> None:
    """An id UTF-8 cannot encode (what ``$'\\xff'`` on a command line becomes) is refused by name
    before any I/O, by the listings as by every other store method."""
    from actors import ActorSystem

    store, rows = await _seeded(store_backend)
    with pytest.raises(InvalidExecutionId, match="lone surrogate"):
        await store.heads(execution_id="run\udcff")
    with pytest.raises(InvalidExecutionId, match="lone surrogate"):
        await store.heads(before=(utcnow(), "\ud800"))
    with pytest.raises(SerializationError, match="runner"):
        await store.heads(runner="agent\udcff")
    async with ActorSystem(store) as system:
        with pytest.raises(InvalidExecutionId, match="lone surrogate"):
            await system.status("\udcff")
        with pytest.raises(SerializationError, match="runner"):
            await system.runs(runner="\udcff", status="running")
        assert [s.execution_id for s in await system.runs()] == ["run"]
    await _unchanged(store, rows)
    await store.close()


def test_tether_show_of_an_undecodable_id_prints_one_line(tmp_path: Path) -> None:
    """``tether show $'\\xff'``: one line naming the refusal, status 1, no traceback."""
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'cli.db'}"
    tether = [sys.executable, "-m", "tether"]
    subprocess.run([*tether, "migrate", "--store", url], check=True, capture_output=True, timeout=60)
    done = subprocess.run(
        [*tether, "show", b"\xff", "--store", url], capture_output=True, timeout=60, check=False
    )
    err = done.stderr.decode("utf-8", "replace")
    assert done.returncode == 1, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("InvalidExecutionId:") and "lone surrogate" in err


async def test_a_tool_argument_counts_twice_against_max_row_bytes(tmp_path: Path) -> None:
    """The documented figure: the tool's row holds its arguments twice (the model's message that
    asked for the call, and the row's ``node_input``), so arguments of 45% of ``max_row_bytes`` are
    kept and arguments of 55% fail the run with ``RowTooLarge``."""
    from actors import ActorSystem, Agent, tool
    from actors.models import FunctionModel, Message, ModelReply, ToolCall

    limit = 256 * 1024
    sizes = iter([int(limit * 0.45), int(limit * 0.55)])

    def respond(messages: list[Message]) -> str | ModelReply:
        if any(m.role == "tool" for m in messages):
            return "done"
        return ModelReply(tool_calls=[ToolCall("process", {"blob": "x" * next(sizes)})])

    @tool
    async def process(blob: str) -> int:
        """Count a blob."""
        return len(blob)

    agent = Agent("big", FunctionModel(respond), tools=[process])
    async with ActorSystem(SQLiteStore(tmp_path / "big.db", max_row_bytes=limit), runners=[agent]) as system:
        kept = await (await system.spawn(agent, "go")).result(timeout=30)
        assert kept.status == "completed"
        refused = await (await system.spawn(agent, "go")).result(timeout=30)
        assert refused.status == "failed"
        assert "RowTooLarge" in str(refused.error) and "tool:process" in str(refused.error)
