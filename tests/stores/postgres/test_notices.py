"""PostgreSQL wakes a run's watches with LISTEN/NOTIFY: every kind of write notifies, only its run
and only its schema's listeners."""

from __future__ import annotations

import time

import anyio
import pytest
from _pg_support import DSN, pause, resume_row, row, schema_fixture, store_fixture

from stores import PostgresStore, RowWatch

pytestmark = pytest.mark.anyio

__all__ = ["schema_fixture", "store_fixture"]


async def _noticed(watch: RowWatch, within: float = 1.5) -> bool:
    """Whether a notice (not the 2 s safety poll) ends the wait within ``within`` seconds."""
    started = time.monotonic()
    noticed = await watch.wait(30.0)
    return noticed and time.monotonic() - started < within


async def test_each_kind_of_write_wakes_the_runs_watch(store: PostgresStore, schema: str) -> None:
    writer = PostgresStore(DSN, schema=schema)
    await store.setup()
    watch, other_run = store.watch("run-a"), store.watch("run-b")
    try:
        with anyio.fail_after(60):
            assert await watch.wait(5.0)  # listening now: the first wait reads again at once
            assert await other_run.wait(5.0)
            await writer.append(row("run-a", 0))  # seq 0: the general statement
            assert await _noticed(watch)
            await writer.append(row("run-a", 1, step_type="tool_call"))  # the common step
            assert await _noticed(watch)
            paused, pending = pause("run-a", 2)
            await writer.append_pause(paused, pending)
            assert await _noticed(watch)
            await writer.claim(resume_row("run-a", 3, 2))
            assert await _noticed(watch)
            async with anyio.create_task_group() as tg:  # concurrent appends share a batch
                for seq in range(4, 8):
                    tg.start_soon(writer.append, row("run-a", seq))
                for seq in range(3):
                    tg.start_soon(writer.append, row(f"run-c{seq}", 0))
            assert await _noticed(watch)
            # Nothing was written to run-b: its watch sleeps until its poll interval.
            assert not await other_run.wait(0.5)
            assert [r.seq for r in await store.history("run-a", since=2)] == list(range(2, 8))
    finally:
        watch.close()
        other_run.close()
        await writer.close()


async def test_another_schemas_rows_do_not_wake(store: PostgresStore, schema: str) -> None:
    other_schema = f"{schema}_x"
    writer = PostgresStore(DSN, schema=other_schema)
    await store.setup()
    watch = store.watch("run-a")
    try:
        with anyio.fail_after(60):
            assert await watch.wait(5.0)
            await writer.append(row("run-a", 0))
            assert not await watch.wait(0.5)
    finally:
        watch.close()
        async with writer:
            pool = await writer._ready()
            await pool.execute(f'DROP SCHEMA "{other_schema}" CASCADE')
