"""Lock loss: an owner whose liveness lock goes while it lives abandons its runs and writes nothing.

Real processes: an owner A mid-tool loses its lock (PostgreSQL: its lock connection is terminated
with ``pg_terminate_backend``; SQLite: its lock file is replaced), a second process B recovers the
run, and then both tools are let go at once. The side effect runs once in total (B's), A writes no
row after the loss, and the run completes once.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import Backend, on_asyncpg

from stores import OwnershipLost, SQLiteStore

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[3]
CHILD = Path(__file__).with_name("_fleet_child.py")


async def _wait_for(path: Path, what: str, seconds: float = 30) -> None:
    with anyio.fail_after(seconds):
        while not path.exists():  # noqa: ASYNC110, ASYNC240 (another process makes it; a local stat)
            await anyio.sleep(0.005)


async def _line(stream: Any) -> dict[str, Any]:
    buffered = b""
    with anyio.fail_after(60):
        while b"\n" not in buffered:
            chunk = await stream.receive()
            buffered += chunk
    return dict(json.loads(buffered.split(b"\n", 1)[0]))


def _child(mode: str, backend: Backend, workdir: Path, *rest: str) -> list[str]:
    return [sys.executable, str(CHILD), mode, *backend.child_args(), str(workdir), *rest]


async def _lose_lock(backend: Backend, lock_pid: int | None) -> None:
    """Take the owner's liveness lock away while it lives."""
    if backend.name == "postgres":
        assert lock_pid is not None

        assert await on_asyncpg(
            backend.target, lambda conn: conn.fetchval("SELECT pg_terminate_backend($1)", lock_pid)
        )
        return
    lock_path = Path(backend.target + ".locks")
    fresh = lock_path.with_name(lock_path.name + ".new")
    fresh.write_bytes(b"")
    os.replace(fresh, lock_path)  # the owner's locked file is no longer the one at the path


async def test_an_owner_that_loses_its_lock_mid_tool_writes_nothing_and_charges_nothing(
    store_backend: Backend, tmp_path: Path
) -> None:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"}
    store = store_backend.open()
    await store.setup()  # the schema exists before two processes race to create it
    await store.close()
    (tmp_path / "hold").touch()
    eid = "order-7"
    async with await anyio.open_process(_child("own", store_backend, tmp_path, eid), env=env) as owner:
        assert owner.stdout is not None
        lock_pid = (await _line(owner.stdout))["lock_pid"]
        await _wait_for(tmp_path / f"entered-{owner.pid}", "the owner's tool")
        await _lose_lock(store_backend, lock_pid)
        recover = await anyio.open_process(_child("recover", store_backend, tmp_path, eid), env=env)
        async with recover:
            assert recover.stdout is not None
            await _wait_for(tmp_path / f"entered-{recover.pid}", "the recoverer's tool")
            (tmp_path / "go").touch()  # both tools go on at once: only the owner's may charge
            recovered = await _line(recover.stdout)
            with anyio.fail_after(60):
                await recover.wait()
        abandoned = await _line(owner.stdout)
        with anyio.fail_after(60):
            await owner.wait()
        assert owner.stderr is not None
        log = (await owner.stderr.receive()).decode() if owner.returncode == 0 else ""
    assert recovered == {"outcome": "completed", "output": f"done: charged {eid}"}
    assert abandoned["outcome"] == OwnershipLost.__name__, abandoned
    assert "lost its liveness lock" in log, log
    charges = [line.split() for line in (tmp_path / "charges").read_text().splitlines()]
    assert [(order, pid) for order, _key, pid in charges] == [(eid, str(recover.pid))]  # once, by B
    check = store_backend.open()
    try:
        rows = [(r.node_id, r.step_type) for r in await check.history(eid)]
    finally:
        await check.close()
    # The owner's rows end at the tool row; every later row is the recoverer's, and there is one end.
    assert rows == [
        ("turn:0", "llm_call"),
        ("turn:0/tool:refund", "tool_call"),
        ("turn:0/tool:refund", "recover"),
        ("turn:1", "llm_call"),
        ("run_end", "run_end"),
    ]


async def test_a_replaced_lock_file_is_seen_at_the_next_ownership_check(tmp_path: Path) -> None:
    """SQLite: the check before a tool or an @idempotent body looks at the lock file itself, so a
    replaced file stops the run even before the watcher thread's next look."""
    store = SQLiteStore(tmp_path / "t.db")
    try:
        assert await store.try_lock("r")
        store.check_owner("r")
        lost: list[list[str]] = []
        store.on_ownership_lost(lost.append)
        fresh = tmp_path / "fresh"
        fresh.write_bytes(b"")
        os.replace(fresh, store.lock_path)
        with pytest.raises(OwnershipLost, match="'r' was abandoned"):
            store.check_owner("r")
        assert lost == [["r"]]
        # A body that ran before the loss keeps its result, so the recoverer does not run it again.
        assert await store.cache_put("r", "k", 1) == 1
        await store.unlock("r")  # its ownership row stays for whoever takes the run over
        other = SQLiteStore(tmp_path / "t.db")
        try:
            assert await other.orphans() == ["r"]
            assert await other.try_lock("r")
        finally:
            await other.close()
        assert await store.try_lock("s")  # a fresh owner id and lock serve the next runs
    finally:
        await store.close()
