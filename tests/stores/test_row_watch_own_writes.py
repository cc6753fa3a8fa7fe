"""A watch on a run (``Store.watch``) hears the rows its own store writes at once, on both backends.

SQLite has no notices between processes, so another process's rows end a wait at the watch's poll;
a row the same store object writes ends it as soon as it commits. (PostgreSQL hears every process's
rows by their notices.)
"""

from __future__ import annotations

import time

import anyio
import pytest
from conftest import Backend

from stores.testing import make_row

pytestmark = pytest.mark.anyio


async def test_a_row_the_store_writes_ends_its_watchs_wait_at_once(store_backend: Backend) -> None:
    async with store_backend.open() as store:
        await store.append(make_row("watched", 0))
        watch = store.watch("watched")
        other = store.watch("another run")
        try:
            with anyio.fail_after(30):
                await watch.wait(0)  # PostgreSQL: listening from here on
                await other.wait(0)
                heard: list[tuple[bool, float]] = []

                async def waiting() -> None:
                    began = time.monotonic()
                    heard.append((await watch.wait(5.0), time.monotonic() - began))

                async with anyio.create_task_group() as tg:
                    tg.start_soon(waiting)
                    await anyio.wait_all_tasks_blocked()
                    await store.append(make_row("watched", 1))
                noticed, took = heard[0]
                assert noticed, "the wait ran out instead of hearing the row"
                assert took < 0.1, f"heard after {took:.3f} s, not at once (SQLite polls every 0.2 s)"
                # A row of another run wakes nothing here.
                assert not await other.wait(0.3)
        finally:
            watch.close()
            other.close()
