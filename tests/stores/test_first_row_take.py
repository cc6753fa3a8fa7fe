"""Ownership written with the run's own rows: the take with a new run's first row, the release with
its resting row, each in that row's transaction, checked exactly like a separate take."""

from __future__ import annotations

import pytest
from conftest import Backend

from stores import HITL_PAUSE, INTERRUPTED, RUN_END, OwnershipLost, RunExists, SQLiteStore, Store
from stores.testing import make_pending, make_row

pytestmark = pytest.mark.anyio


async def _pair(backend: Backend) -> tuple[Store, Store]:
    first, second = backend.open(), backend.open()
    await first.setup()
    await second.setup()
    return first, second


async def test_first_row_records_the_take_and_run_end_releases_it(store_backend: Backend) -> None:
    store, other = await _pair(store_backend)
    try:
        before = store.transactions if isinstance(store, SQLiteStore) else 0
        assert await store.try_lock_with_first_row("run-a") is True
        assert await store.try_lock_with_first_row("run-a") is False  # held here already
        with pytest.raises(OwnershipLost, match="first row is not written"):
            store.check_owner("run-a")  # nothing acts for the run before its take is written
        await store.append(make_row("run-a", 0))
        store.check_owner("run-a")
        assert await other.try_lock("run-a") is False
        assert await other.owned(["run-a"]) == {"run-a"}
        await store.append(make_row("run-a", 1, "run_end", step_type=RUN_END))
        await store.unlock("run-a")
        if isinstance(store, SQLiteStore):
            assert store.transactions - before == 2  # the two rows, nothing else
        assert await other.owned(["run-a"]) == set()
        assert await other.try_lock("run-a") is True
        await other.unlock("run-a")
    finally:
        await store.close()
        await other.close()


async def test_first_row_refused_while_a_live_owner_holds_the_run(store_backend: Backend) -> None:
    store, other = await _pair(store_backend)
    try:
        assert await other.try_lock("run-a") is True
        assert await store.try_lock_with_first_row("run-a") is True  # checked with the first row
        with pytest.raises(RunExists, match="owned by another live process"):
            await store.append(make_row("run-a", 0))
        await store.unlock("run-a")
        assert await store.history("run-a") == []
        assert await store.owned(["run-a"]) == {"run-a"}
        assert await store.try_lock("run-a") is False  # still the other's
    finally:
        await store.close()
        await other.close()


async def test_a_pause_releases_with_its_row_and_the_next_write_takes_again(store_backend: Backend) -> None:
    store, other = await _pair(store_backend)
    try:
        assert await store.try_lock("run-a") is True
        await store.append(make_row("run-a", 0))
        pause = make_row(
            "run-a", 1, "turn:0/tool:t", step_type=HITL_PAUSE, status=INTERRUPTED, interrupt_reason="ok"
        )
        before = store.transactions if isinstance(store, SQLiteStore) else 0
        await store.append_pause(pause, make_pending("run-a", pause))
        if isinstance(store, SQLiteStore):
            assert store.transactions - before == 1  # the pause row, its pending row and the release
        assert await other.owned(["run-a"]) == set()
        # A write after the rest takes the run again, checked, in its own transaction.
        assert await other.try_lock("run-a") is True
        with pytest.raises(RunExists, match="owned by another live process"):
            await store.append(make_row("run-a", 2, "run_end", step_type=RUN_END))
        await other.unlock("run-a")
        await store.unlock("run-a")
        assert await other.owned(["run-a"]) == set()
        assert await other.try_lock("run-a") is True
        await other.unlock("run-a")
    finally:
        await store.close()
        await other.close()
