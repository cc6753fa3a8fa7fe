"""The watch on resting runs (``Store.watch_waits``), on SQLite and PostgreSQL, on asyncio and trio.

A signal that another process sends to a waiting run ends the watch's wait: on PostgreSQL by its
notice, well before the listening watch's 2 s safety poll; on SQLite by the watch's poll, after
which the store's index of waits lists the run as due. A ``wait`` row written while its signal is
already in the inbox is due at once and notifies too (no lost wake). Nothing else a run writes
ends the wait on PostgreSQL: the watch is for waits, not rows.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import anyio
import pytest
from conftest import Backend, PgSchema

from stores import WAIT, RowWatch, Store
from stores.testing import make_row

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
#: The sender: another process with the store alone, which signals a run and says when it committed.
SENDER = """
import sys, anyio
from stores import PostgresStore, SQLiteStore

async def main(backend, target, schema, execution_id):
    store = SQLiteStore(target) if backend == "sqlite" else PostgresStore(target, schema=schema)
    async with store:
        await store.signal(execution_id, "go", {"from": "another process"})
        print("sent", flush=True)

anyio.run(main, *sys.argv[1:5])
"""


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def _resting(store: Store, execution_id: str, name: str = "go") -> None:
    """A run at store level whose newest row is a tool's ``wait`` for the signal ``name``."""
    assert await store.try_lock(execution_id)
    await store.append(make_row(execution_id, 0))
    await store.append(make_row(execution_id, 1, "turn:0/tool:t", step_type="tool_call"))
    wait = make_row(execution_id, 2, "turn:0/tool:t", step_type=WAIT, status="interrupted")
    await store.append_wait(wait, name, None)


async def _drained(watch: RowWatch, backend: Backend) -> None:
    """The watch's first wait (PostgreSQL: it returns at once, listening from then on)."""
    with anyio.fail_after(30):
        heard = await watch.wait(5.0)
    assert heard == (backend.name == "postgres")


async def test_a_signal_from_another_process_ends_the_wait_of_the_watch_on_waits(
    store_backend: Backend,
) -> None:
    async with store_backend.open() as store:
        watch = store.watch_waits()
        try:
            await _resting(store, "resting")
            await _drained(watch, store_backend)
            assert await store.due_waits(10) == [] and await store.next_wake() is None
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            args = [sys.executable, "-c", SENDER, *store_backend.child_args(), "resting"]
            with anyio.fail_after(60):
                sent = await anyio.run_process(args, env=env)
            assert sent.stdout.decode().split() == ["sent"]
            committed = time.monotonic()  # at the latest: the child printed after the commit
            with anyio.fail_after(30):
                heard = await watch.wait(30.0)
            waited = time.monotonic() - committed
            if store_backend.name == "postgres":
                assert heard and waited < 1.5, waited  # the notice, not the 2 s safety poll
            else:
                assert not heard and waited < 1.0, waited  # the poll: SQLite hears no other process
            assert await store.due_waits(10) == [("resting", 2)]
        finally:
            watch.close()


async def test_a_wait_written_after_its_signal_is_due_at_once_and_heard(store_backend: Backend) -> None:
    async with store_backend.open() as store, store_backend.open() as other:
        watch = store.watch_waits()
        try:
            assert await other.try_lock("early")
            await other.append(make_row("early", 0))
            await other.append(make_row("early", 1, "turn:0/tool:t", step_type="tool_call"))
            await _drained(watch, store_backend)
            await other.signal("early", "go", 1)  # no wait yet: nothing is due
            await other.signal("early", "other", 2)
            if store_backend.name == "postgres":
                assert not await watch.wait(0.5)
            wait = make_row("early", 2, "turn:0/tool:t", step_type=WAIT, status="interrupted")
            await other.append_wait(wait, "go", None)
            with anyio.fail_after(30):
                heard = await watch.wait(30.0)
            assert heard == (store_backend.name == "postgres")
            assert await store.due_waits(10) == [("early", 2)]
            next_wake = await store.next_wake()
            assert next_wake is not None
        finally:
            watch.close()


async def test_rows_and_signals_that_wake_nothing_do_not_end_the_wait(pg_schema: PgSchema) -> None:
    """PostgreSQL only: SQLite's watch polls, it tells nothing apart."""
    backend = Backend("postgres", pg_schema.dsn, pg_schema.schema)
    async with backend.open() as store, backend.open() as other:
        watch = store.watch_waits()
        try:
            await _resting(other, "resting", name="go")
            await _drained(watch, backend)
            await other.signal("resting", "something-else", 1)  # not what it waits for
            assert await other.try_lock("busy")
            await other.append(make_row("busy", 0))  # a row of another run
            assert not await watch.wait(0.5)
            await other.signal("resting", "go", 1)
            with anyio.fail_after(30):
                assert await watch.wait(30.0)
        finally:
            watch.close()
