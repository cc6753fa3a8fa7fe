"""What the SQLite store's release of a run's lock leaves behind, seen by another store object on
the same file (standing for another process).

A process may take the lock of a run that already ended (a message to a finished run, a sweep's
take racing the run's end) and release it: the run rests, so it is no one's, and no sweep is asked
to take it. A run left mid-step is handed to the fleet instead: any sweep finds it and takes it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stores import COMPLETED, FAILED, HITL_PAUSE, INTERRUPTED, TOOL_CALL, WAIT, SQLiteStore
from stores.testing import make_pending, make_row, run_end_row

pytestmark = pytest.mark.anyio


async def _held_and_released(path: Path, execution_id: str) -> None:
    """Take the run's lock and release it, in a store object of its own."""
    async with SQLiteStore(path) as holder:
        assert await holder.try_lock(execution_id)
        await holder.unlock(execution_id)


@pytest.mark.parametrize("status", [COMPLETED, FAILED])
async def test_the_release_of_an_ended_run_leaves_it_no_ones(tmp_path: Path, status: str) -> None:
    path = tmp_path / "tether.db"
    async with SQLiteStore(path) as writer:
        await writer.append(make_row("ended", 0))
        await writer.append(run_end_row("ended", 1, status))
    await _held_and_released(path, "ended")
    async with SQLiteStore(path) as other:
        assert await other.unowned(["ended"]) == set()  # not handed to the fleet
        assert await other.owned(["ended"]) == set()
        assert await other.orphans() == []  # no sweep is asked to take it
        assert await other.try_lock("ended")
        await other.unlock("ended")


async def test_the_release_of_a_paused_run_leaves_it_no_ones(tmp_path: Path) -> None:
    path = tmp_path / "tether.db"
    async with SQLiteStore(path) as writer:
        await writer.append(make_row("paused", 0))
        pause = make_row(
            "paused",
            1,
            "turn:0/tool:refund",
            step_type=HITL_PAUSE,
            status=INTERRUPTED,
            step_index=0,
            agent_path="agent:a/tool:refund",
            interrupt_reason="approve",
        )
        await writer.append_pause(pause, make_pending("paused", pause))
    await _held_and_released(path, "paused")
    async with SQLiteStore(path) as other:
        assert await other.unowned(["paused"]) == set()
        assert await other.orphans() == []
        assert [p.execution_id for p in await other.pending()] == ["paused"]  # it waits for a person


async def test_the_release_of_a_run_resting_at_a_wait_leaves_it_no_ones(tmp_path: Path) -> None:
    """A wake that found the wait not yet due writes nothing: the run still rests at its wait."""
    path = tmp_path / "tether.db"
    async with SQLiteStore(path) as writer:
        await writer.append(make_row("waiting", 0))
        wait = make_row(
            "waiting",
            1,
            "turn:0/tool:nap",
            step_type=WAIT,
            status=INTERRUPTED,
            step_index=0,
            agent_path="agent:a/tool:nap",
            interrupt_reason="sleep",
        )
        await writer.append_wait(wait, None, None)
    await _held_and_released(path, "waiting")
    async with SQLiteStore(path) as other:
        assert await other.unowned(["waiting"]) == set()
        assert await other.orphans() == []


async def test_the_release_of_a_run_left_mid_step_hands_it_to_the_fleet(tmp_path: Path) -> None:
    path = tmp_path / "tether.db"
    async with SQLiteStore(path) as writer:
        await writer.append(make_row("mid", 0))
        await writer.append(make_row("mid", 1, "turn:0/tool:t", step_type=TOOL_CALL))
    await _held_and_released(path, "mid")
    async with SQLiteStore(path) as other:
        assert await other.unowned(["mid"]) == {"mid"}
        assert await other.owned(["mid"]) == set()
        assert await other.orphans() == ["mid"]
        assert await other.try_lock("mid")  # a sweep's take
        assert await other.unowned(["mid"]) == set() and await other.owned(["mid"]) == {"mid"}
        await other.unlock("mid")


async def test_the_release_of_a_run_with_no_rows_leaves_nothing(tmp_path: Path) -> None:
    path = tmp_path / "tether.db"
    await _held_and_released(path, "empty")
    async with SQLiteStore(path) as other:
        assert await other.unowned(["empty"]) == set()
        assert await other.orphans() == []


async def test_a_store_holds_its_lock_file_open_and_locked_across_takes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock file is opened and its byte locked once, by the first take: later takes and
    releases neither open it again nor let the lock go, even for an instant."""
    opened: list[str] = []
    real_open = os.open

    def counted_open(path: str, *args: object) -> int:
        opened.append(path)
        return real_open(path, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", counted_open)
    async with SQLiteStore(tmp_path / "tether.db") as store:
        for execution_id in ("a", "b", "c"):
            assert await store.try_lock(execution_id)
            await store.unlock(execution_id)
        lock_files = [path for path in opened if path == store.lock_path]
    assert len(lock_files) == 1, opened
