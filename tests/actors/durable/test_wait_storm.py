"""A storm of signals: runs each waiting for three signals in turn while a sender sends them and
the serving worker (a real process) is SIGKILLed and restarted at random moments.

Every payload is consumed exactly once, in order (the runs' ``signal`` rows, and the fsynced
ledger the tool writes after its third wait); every run completes. A small storm runs by default,
the full one (20 runs, more kills) under ``-m stress``.
"""

from __future__ import annotations

import random
import signal
import sys
from pathlib import Path

import anyio
import anyio.abc
import pytest
from _wait_child import agent
from conftest import Backend, until_ended
from test_waits import CHILD, ENV, _json_line, _ledger

from actors import ActorSystem
from stores import CONSUMES, RUN_END, SIGNAL

pytestmark = pytest.mark.anyio


async def _storm(backend: Backend, workdir: Path, *, runs: int, kills: int, seed: int) -> None:
    rng = random.Random(seed)
    args = [*backend.child_args(), str(workdir)]
    async with backend.open() as store:
        async with ActorSystem(store) as system:
            ids = [await system.enqueue(agent(workdir), "three") for _ in range(runs)]
        worker: list[anyio.abc.Process] = []

        async def start_worker() -> None:
            process = await anyio.open_process([sys.executable, str(CHILD), "worker", *args], env=ENV)
            worker.append(process)
            assert (await _json_line(process)).get("ready")

        async def kill_worker() -> None:
            process = worker.pop()
            process.send_signal(signal.SIGKILL)
            with anyio.fail_after(30):
                await process.wait()

        try:
            await start_worker()
            # A sender with no runner: it never wakes a run itself, the worker does.
            async with ActorSystem(store) as senders, anyio.create_task_group() as tg:

                async def send(execution_id: str, delays: list[float]) -> None:
                    for n, delay in enumerate(delays, start=1):
                        await anyio.sleep(delay)
                        await senders.signal(execution_id, "go", n)

                async def chaos() -> None:
                    for _ in range(kills):
                        await anyio.sleep(rng.uniform(0.3, 1.5))
                        await kill_worker()
                        await anyio.sleep(rng.uniform(0.0, 0.5))
                        await start_worker()

                for eid in ids:
                    tg.start_soon(send, eid, [rng.uniform(0.0, 1.5) for _ in range(3)])
                tg.start_soon(chaos)
            await until_ended(store, ids, timeout=120)
        finally:
            while worker:
                await kill_worker()
        for eid in ids:
            rows = await store.history(eid)
            consumed = [row for row in rows if row.step_type == SIGNAL]
            assert [row.node_input["payload"] for row in consumed] == [1, 2, 3], eid  # once each, in order
            ids_consumed = [row.node_input[CONSUMES][0] for row in consumed]
            assert len(set(ids_consumed)) == 3
            assert rows[-1].step_type == RUN_END and rows[-1].status == "completed"
            assert rows[-1].state_snapshot["output"] == "done: [1, 2, 3]"
            assert await store.signals(eid) == []  # nothing left unconsumed, nothing lost
        ledger = _ledger(workdir)
        for eid in ids:
            after = [line[2] for line in ledger if line[0] == eid and line[1] == "after"]
            assert after and set(after) == {"1,2,3"}, (eid, after)


async def test_a_small_storm_of_signals_and_worker_kills(store_backend: Backend, tmp_path: Path) -> None:
    await _storm(store_backend, tmp_path, runs=6, kills=2, seed=1)


@pytest.mark.stress
async def test_a_storm_of_twenty_runs_three_signals_each_and_worker_kills(
    store_backend: Backend, tmp_path: Path
) -> None:
    await _storm(store_backend, tmp_path, runs=20, kills=5, seed=2)
