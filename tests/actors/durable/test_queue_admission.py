"""A sweep's admission under a queue's limits, in one process: a full queue (or a full key) does not
hide the runs listed after it, each run is taken once, and ``serve`` looks again when a queue's
rate admits the next start rather than at its next poll. The fleet of worker processes is in
``test_queue_processes.py``; the store's take in ``tests/stores/test_queues.py``.
"""

from __future__ import annotations

import time
from datetime import timedelta

import anyio
import pytest
from conftest import Backend

from actors import ActorSystem, Agent, Queue
from actors.models import FunctionModel, Message

pytestmark = pytest.mark.anyio

LIMIT = 30.0


def _agent() -> Agent:
    def model(messages: list[Message]) -> str:
        return f"done: {messages[-1].content}"

    return Agent("queued", FunctionModel(model))


async def _statuses(system: ActorSystem, ids: list[str]) -> dict[str, str]:
    return {eid: (await system.status(eid)).status for eid in ids}


async def test_a_sweep_takes_the_higher_priority_first_then_the_older(store_backend: Backend) -> None:
    agent = _agent()
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        for eid, priority in (("p0", 0), ("p5", 5), ("p1", 1), ("p5b", 5)):
            await system.enqueue(agent, eid, execution_id=eid, queue="q", priority=priority)
        taken = []
        for _ in range(4):
            assert await system.sweep(limit=1) == 1
            taken += [eid for eid, status in (await _statuses(system, ["p0", "p5", "p1", "p5b"])).items()
                      if status == "completed" and eid not in taken]  # fmt: skip
        assert taken == ["p5", "p5b", "p1", "p0"]


async def test_a_full_queue_does_not_hide_the_runs_listed_after_it(store_backend: Backend) -> None:
    agent = _agent()
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        await store.declare_queues([Queue("q", concurrency=1)])
        for eid in ("a1", "a2", "a3"):
            await system.enqueue(agent, eid, execution_id=eid, queue="q", priority=5)
        await system.enqueue(agent, "b1", execution_id="b1")
        # The first listing holds two of q's runs: the second is refused, so the listing is read
        # again without q and the default queue's run is taken in the same pass.
        assert await system.sweep(limit=2) == 2
        assert await _statuses(system, ["a1", "a2", "a3", "b1"]) == {
            "a1": "completed",
            "a2": "queued",
            "a3": "queued",
            "b1": "completed",
        }
        assert await system.sweep(limit=2) == 1  # q's one slot again
        assert await system.sweep(limit=2) == 1
        assert await system.sweep(limit=2) == 0
        assert set((await _statuses(system, ["a2", "a3"])).values()) == {"completed"}


async def test_a_full_key_does_not_hide_the_other_keys_runs(store_backend: Backend) -> None:
    agent = _agent()
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        await store.declare_queues([Queue("k", per_key=1)])
        await system.enqueue(agent, "x1", execution_id="x1", queue="k", key="x", priority=5)
        await system.enqueue(agent, "x2", execution_id="x2", queue="k", key="x", priority=5)
        await system.enqueue(agent, "y1", execution_id="y1", queue="k", key="y", priority=1)
        assert await system.sweep(limit=2) == 2
        assert await _statuses(system, ["x1", "x2", "y1"]) == {
            "x1": "completed",
            "x2": "queued",
            "y1": "completed",
        }
        assert await system.sweep(limit=2) == 1


async def test_a_rate_refusal_skips_the_run_and_takes_the_rest(store_backend: Backend) -> None:
    agent = _agent()
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        await store.declare_queues([Queue("r", rate=(1, timedelta(seconds=30)))])
        await system.enqueue(agent, "r1", execution_id="r1", queue="r", priority=5)
        await system.enqueue(agent, "r2", execution_id="r2", queue="r", priority=5)
        await system.enqueue(agent, "d1", execution_id="d1")
        assert await system.sweep(limit=3) == 2
        assert await _statuses(system, ["r1", "r2", "d1"]) == {
            "r1": "completed",
            "r2": "queued",
            "d1": "completed",
        }


async def test_serve_looks_again_when_the_rate_admits_the_next_start(store_backend: Backend) -> None:
    agent = _agent()
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        for eid in ("s1", "s2"):
            await system.enqueue(agent, eid, execution_id=eid, queue="s")
        started = time.monotonic()
        async with anyio.create_task_group() as tg:
            # A poll far longer than the rate's window: the second start comes from the rate's
            # retry time, not from the poll.
            tg.start_soon(lambda: system.serve(poll=60, queues=[Queue("s", rate=(1, timedelta(seconds=1)))]))
            with anyio.fail_after(LIMIT):
                for eid in ("s1", "s2"):
                    await system.ref(eid).result(timeout=LIMIT)
            tg.cancel_scope.cancel()
        took = time.monotonic() - started
        assert 0.9 <= took < 10, took


async def test_serve_looks_again_as_soon_as_the_soonest_rate_admits(store_backend: Backend) -> None:
    """Two rated queues refuse in one pass: serve waits for the sooner of the two (a short window),
    never for the longer one listed after it, nor for a second when the window is shorter."""
    agent = _agent()
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        fast = [f"f{i}" for i in range(5)]
        for eid in fast:
            await system.enqueue(agent, eid, execution_id=eid, queue="fast", priority=5)
        for eid in ("s1", "s2"):
            await system.enqueue(agent, eid, execution_id=eid, queue="slow", priority=1)
        queues = [
            Queue("fast", rate=(1, timedelta(seconds=0.2))),
            Queue("slow", rate=(1, timedelta(seconds=60))),
        ]
        started = time.monotonic()
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: system.serve(poll=60, queues=queues))
            with anyio.fail_after(LIMIT):
                for eid in fast:
                    await system.ref(eid).result(timeout=LIMIT)
            took = time.monotonic() - started
            tg.cancel_scope.cancel()
        # Five starts 0.2 s apart: about 0.8 s. Waiting a whole second per start would take 4 s or
        # more; waiting for the slow queue's window, a minute.
        assert took < 3.0, took
        assert await _statuses(system, ["s1", "s2"]) == {"s1": "completed", "s2": "queued"}


async def test_bad_queues_keys_and_priorities_are_refused_writing_nothing(store_backend: Backend) -> None:
    agent = _agent()
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        with anyio.fail_after(5):  # refusals are at once
            with pytest.raises(TypeError, match="queues must be a sequence of Queue, not Queue"):
                await system.serve(queues=Queue("q"))  # type: ignore[arg-type]
            with pytest.raises(TypeError, match="queues must be a sequence of Queue, not str"):
                await system.serve(queues="q")  # type: ignore[arg-type]
            with pytest.raises(TypeError, match="queues must hold Queue objects, not int"):
                await system.serve(queues=[1])  # type: ignore[list-item]
            with pytest.raises(ValueError, match="queue 'q' is given twice"):
                await system.serve(queues=[Queue("q", concurrency=1), Queue("q", concurrency=2)])
            with pytest.raises(
                ValueError, match="key must be a non-empty str of at most 200 characters, not ''"
            ):
                await system.enqueue(agent, "go", execution_id="k1", key="")
            with pytest.raises(ValueError, match="key must be a non-empty str"):
                await system.enqueue(agent, "go", execution_id="k2", key=3)  # type: ignore[arg-type]
            with pytest.raises(ValueError, match="priority must be an int"):
                await system.enqueue(agent, "go", execution_id="k3", priority=True)
        for eid in ("k1", "k2", "k3"):
            assert await store.latest(eid) is None
        assert await system.runs() == []


async def test_a_full_queue_of_many_keys_does_not_hide_the_runs_listed_after_it(
    store_backend: Backend,
) -> None:
    """A full queue is left out of the pass as a whole, not key by key: ten runs of ten keys in a
    full queue do not use up the pass before the default queue's run is listed."""
    agent = _agent()
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        await store.declare_queues([Queue("q", concurrency=1)])
        keyed = [f"k{i}" for i in range(10)]
        for eid in keyed:
            await system.enqueue(agent, eid, execution_id=eid, queue="q", key=eid, priority=5)
        await system.enqueue(agent, "d1", execution_id="d1")
        assert await system.sweep(limit=2) == 2
        statuses = await _statuses(system, [*keyed, "d1"])
        assert statuses["d1"] == "completed"
        assert sorted(statuses.values()).count("completed") == 2
