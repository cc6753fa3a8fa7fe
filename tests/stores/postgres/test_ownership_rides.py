"""PostgresStore only: a run's take and release written by its rows' statements, batched or alone."""

from __future__ import annotations

import anyio
import pytest
from _pg_support import DSN, Counter, pause, row, schema_fixture, store_fixture  # noqa: F401 (fixtures)

from stores import RUN_END, OwnershipLost, PostgresStore, RunExists

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


async def test_first_rows_in_one_batch_take_their_runs_and_a_held_one_is_refused_alone(
    store: PostgresStore, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = PostgresStore(DSN, schema=schema)
    try:
        await store.setup()
        assert await other.try_lock("r3")  # a live other owner holds r3
        for i in range(8):
            assert await store.try_lock_with_first_row(f"r{i}")
        counter = Counter(store, monkeypatch)
        outcomes: dict[str, str] = {}

        async def first(i: int) -> None:
            try:
                await store.append(row(f"r{i}", 0))
                outcomes[f"r{i}"] = "ok"
            except RunExists:
                outcomes[f"r{i}"] = "taken"

        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(first, i)
        assert outcomes == {f"r{i}": ("taken" if i == 3 else "ok") for i in range(8)}
        assert counter.calls.count("fetch") >= 1 and len(counter.calls) < 8  # batched
        assert await other.owned([f"r{i}" for i in range(8)]) == {f"r{i}" for i in range(8)}
        assert not await other.try_lock("r0")
        assert await store.history("r3") == []
        for i in range(8):
            if i != 3:
                store.check_owner(f"r{i}")  # recorded: the run may act
        await store.unlock("r3")
        assert await other.owned(["r3"]) == {"r3"}  # still the other's

        # The run_ends release their runs in the same batch; unlock then writes nothing.
        async with anyio.create_task_group() as tg:
            for i in range(8):
                if i != 3:
                    tg.start_soon(store.append, row(f"r{i}", 1, step_type=RUN_END))
        calls = len(counter.calls)
        for i in range(8):
            if i != 3:
                await store.unlock(f"r{i}")
        assert len(counter.calls) == calls
        assert await other.owned([f"r{i}" for i in range(8)]) == {"r3"}
        assert await other.try_lock("r0")
    finally:
        await other.close()


async def test_a_lone_first_row_and_run_end_cost_no_ownership_statement(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert await store.orphans() == []  # the liveness lock is taken (once per owner id)
    counter = Counter(store, monkeypatch)
    assert await store.try_lock_with_first_row("r")
    with pytest.raises(OwnershipLost, match="first row is not written"):
        store.check_owner("r")
    await store.append(row("r", 0))
    store.check_owner("r")
    await store.append(row("r", 1))
    await store.append(row("r", 2, step_type=RUN_END))
    await store.unlock("r")
    assert len(counter.calls) == 3  # the three rows, nothing else
    assert await store.owned(["r"]) == set() and await store.unowned(["r"]) == set()
    assert await store.orphans() == []


async def test_a_run_left_mid_step_is_handed_to_the_fleet(store: PostgresStore, schema: str) -> None:
    assert await store.try_lock_with_first_row("r")
    await store.append(row("r", 0))
    await store.unlock("r")  # no run_end: the take written with the first row is handed on
    other = PostgresStore(DSN, schema=schema)
    try:
        assert await other.unowned(["r"]) == {"r"}
        assert await other.orphans() == ["r"]
        assert await other.try_lock("r")
    finally:
        await other.close()


async def test_a_first_write_that_is_a_pause_takes_the_run_first(store: PostgresStore, schema: str) -> None:
    other = PostgresStore(DSN, schema=schema)
    try:
        assert await other.try_lock("held")
        assert await store.try_lock_with_first_row("held")
        with pytest.raises(RunExists, match="owned by another live process"):
            await store.append_pause(*pause("held", 0))
        await store.unlock("held")
        assert await store.history("held") == []
        assert await other.owned(["held"]) == {"held"}

        assert await store.try_lock_with_first_row("free")
        await store.append_pause(*pause("free", 0))  # taken and rested in one transaction
        with pytest.raises(OwnershipLost, match="it rests"):
            store.check_owner("free")
        assert await other.owned(["free"]) == set() and await other.unowned(["free"]) == set()
        await store.unlock("free")  # nothing left to release
        assert await other.owned(["free"]) == set() and await other.unowned(["free"]) == set()
        assert await other.orphans() == []
    finally:
        await other.close()


async def test_a_first_row_refused_for_its_seq_leaves_the_take_to_unlock(store: PostgresStore) -> None:
    await store.append(row("r", 0))  # the run exists, owned by no one
    assert await store.try_lock_with_first_row("r")
    with pytest.raises(RunExists):
        await store.append(row("r", 0))
    await store.unlock("r")  # the take rode on a refused row: released as after a separate take
    assert await store.owned(["r"]) == set()
    assert await store.try_lock("r")
