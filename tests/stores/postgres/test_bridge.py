"""PostgresStore under trio: asyncpg runs on an asyncio loop the store owns in a thread of its own;
under asyncio it runs on the caller's loop, with no thread. Notices, a lost lock connection and
cancelled calls reach the trio side as they reach an asyncio caller."""

from __future__ import annotations

import threading
from datetime import timedelta

import anyio
import pytest
from conftest import PgSchema

from stores import PostgresStore
from stores.testing import make_row

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

LIMIT = 20.0


def _loop_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "tether-postgres" and t.is_alive()}


def _store(pg: PgSchema, **options: object) -> PostgresStore:
    return PostgresStore(pg.dsn, schema=pg.schema, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_a_loop_thread_only_under_trio_and_only_while_open(
    anyio_backend: str, pg_schema: PgSchema
) -> None:
    before = _loop_threads()
    store = _store(pg_schema)
    try:
        with anyio.fail_after(LIMIT):
            await store.append(make_row("r", 0))
            assert [row.seq for row in await store.history("r")] == [0]
        assert len(_loop_threads() - before) == (1 if anyio_backend == "trio" else 0)
    finally:
        await store.close()
    assert _loop_threads() - before == set()


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_a_notice_wakes_a_watch_on_trio(pg_schema: PgSchema) -> None:
    store, other = _store(pg_schema), _store(pg_schema)
    try:
        with anyio.fail_after(LIMIT):
            await store.append(make_row("r", 0))
            watch = store.watch("r")
            try:
                await watch.wait(0.01)  # opens the listening connection
                await other.append(make_row("r", 1))
                # Woken by the row's NOTIFY: without it the wait would end at its poll, saying so.
                assert await watch.wait(LIMIT) is True
                assert [row.seq for row in await store.history("r")] == [0, 1]
            finally:
                watch.close()
    finally:
        await other.close()
        await store.close()


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_a_lost_lock_connection_reaches_the_owner_on_trio(pg_schema: PgSchema) -> None:
    owner, operator = _store(pg_schema), _store(pg_schema)
    lost: list[list[str]] = []
    owner.on_ownership_lost(lost.append)
    try:
        with anyio.fail_after(LIMIT):
            assert await owner.try_lock("r")
            assert await operator.terminate_owner("r") is not None
            while not lost:  # noqa: ASYNC110 (a plain list listener, read as the test's probe)
                await anyio.sleep(0.02)
        assert lost == [["r"]]
    finally:
        await operator.close()
        await owner.close()


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_cancelled_calls_leave_no_connection_taken_on_trio(pg_schema: PgSchema) -> None:
    store = _store(pg_schema, min_size=1, max_size=2)
    try:
        with anyio.fail_after(LIMIT):
            await store.append(make_row("r", 0))
        for i in range(40):  # cancelled at every point of a call: acquire, statement, release
            with anyio.move_on_after(0.0005 * (i % 10)):
                await store.prune(timedelta(days=1))
        with anyio.fail_after(LIMIT):  # a lent connection never given back would leave the pool empty
            for _ in range(3):
                assert await store.prune(timedelta(days=1)) == 0
            await store.append(make_row("r", 1))
            assert [row.seq for row in await store.history("r")] == [0, 1]
    finally:
        await store.close()
