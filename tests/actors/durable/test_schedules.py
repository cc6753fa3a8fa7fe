"""Schedules: one run per tick across every serving worker (real processes), ``unschedule``, cron.

The run of a tick has the id ``"<name>@<tick>"``: its unique first row makes the tick exactly-once
whatever the number of workers; the schedule's next tick moves on by a compare-and-set.
"""

from __future__ import annotations

import itertools
import signal
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import anyio.abc
import pytest
from _wait_child import agent
from conftest import Backend
from test_waits import CHILD, ENV, _json_line, _ledger

from actors import ActorSystem, Schedule
from stores import RUN_END, utcnow

pytestmark = pytest.mark.anyio


async def test_every_second_served_by_three_workers_runs_each_tick_once_until_unscheduled(
    store_backend: Backend, tmp_path: Path
) -> None:
    args = [*store_backend.child_args(), str(tmp_path)]
    runner = agent(tmp_path)
    async with store_backend.open() as store, ActorSystem(store, runners=[runner]) as system:
        await store.setup()
        workers = [
            await anyio.open_process([sys.executable, str(CHILD), "worker", *args], env=ENV) for _ in range(3)
        ]
        try:
            for worker in workers:
                assert (await _json_line(worker)).get("ready")
            await system.schedule("beat", runner, "tick", every=timedelta(seconds=1))
            await anyio.sleep(6.0)
            assert await system.unschedule("beat") is True
            stopped = utcnow()
            await anyio.sleep(2.5)  # any tick after the unschedule would start meanwhile
        finally:
            for worker in workers:
                worker.send_signal(signal.SIGKILL)
            with anyio.fail_after(30):
                for worker in workers:
                    await worker.wait()
        assert await system.unschedule("beat") is False
        heads = [h for h in await store.heads(limit=1000) if h.execution_id.startswith("beat@")]
        ticks = sorted(datetime.fromisoformat(h.execution_id.split("@", 1)[1]) for h in heads)
        assert 4 <= len(ticks) <= 7, ticks
        gaps = {round((b - a).total_seconds(), 3) for a, b in itertools.pairwise(ticks)}
        assert gaps == {1.0}, ticks  # every tick once: none twice, none skipped while served
        assert all(tick <= stopped for tick in ticks)  # unschedule stopped it
        done = [h for h in heads if h.step_type == RUN_END and h.status == "completed"]
        assert len(done) >= len(heads) - 1  # the last may still be queued when the workers died
        ran = [line for line in _ledger(tmp_path) if line[1] == "after"]
        per_run = {eid: sum(1 for line in ran if line[0] == eid) for eid in {line[0] for line in ran}}
        assert set(per_run.values()) == {1}


async def test_a_cron_schedule_reports_the_next_minute_boundary_and_redeclaring_keeps_it(
    store_backend: Backend, tmp_path: Path
) -> None:
    runner = agent(tmp_path)
    async with store_backend.open() as store, ActorSystem(store, runners=[runner]) as system:
        before = datetime.now(UTC)
        await system.schedule("minutely", runner, "tick", cron="* * * * *")
        (found,) = await system.schedules()
        assert isinstance(found, Schedule)
        assert (found.name, found.runner, found.input, found.cron, found.every) == (
            "minutely",
            "rester",
            "tick",
            "* * * * *",
            None,
        )
        boundary = before.replace(second=0, microsecond=0) + timedelta(minutes=1)
        assert found.next_at in (boundary, boundary + timedelta(minutes=1))  # the minute turned
        assert found.next_at.second == 0 and found.next_at.microsecond == 0 and found.last_run is None
        await system.schedule("minutely", runner, "other input", cron="* * * * *")
        assert (await system.schedules())[0].next_at == found.next_at  # same timing: same next tick
        assert (await system.schedules())[0].input == "other input"
        with pytest.raises(ValueError, match="cron"):
            await system.schedule("bad", runner, "tick", cron="61 * * * *")
        with pytest.raises(ValueError, match="exactly one"):
            await system.schedule("bad", runner, "tick", cron="* * * * *", every=timedelta(seconds=1))
        with pytest.raises(ValueError, match="every"):
            await system.schedule("bad", runner, "tick", every=timedelta(0))
        assert [s.name for s in await system.schedules()] == ["minutely"]


async def test_missed_ticks_run_once_the_latest_after_downtime(
    store_backend: Backend, tmp_path: Path
) -> None:
    runner = agent(tmp_path)
    async with store_backend.open() as store, ActorSystem(store, runners=[runner]) as system:
        start = utcnow() - timedelta(seconds=10.5)  # ten ticks passed while nobody served
        await system.schedule("late", runner, "tick", every=timedelta(seconds=1), start_at=start)
        with anyio.fail_after(30):
            await system.sweep()
        heads = [h for h in await store.heads(limit=100) if h.execution_id.startswith("late@")]
        assert len(heads) == 1
        tick = datetime.fromisoformat(heads[0].execution_id.split("@", 1)[1])
        assert tick == start + timedelta(seconds=10)
        (found,) = await system.schedules()
        assert found.next_at == start + timedelta(seconds=11) and found.last_run == heads[0].execution_id
        await system.sweep()
        assert len([h for h in await store.heads(limit=100) if h.execution_id.startswith("late@")]) == 1
