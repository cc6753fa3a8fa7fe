"""Shutdown: 1,000 live actors stop within 5 s, every stop hook runs, no task is left behind;
the same when the block is cancelled; and the system works from plain ``asyncio.run``."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from actors import Actor, ActorContext, ActorSystem, Restart


class Sleeper(Actor):
    """An idle actor (or a busy one with ``busy=True``) with a child; counts its stop hooks."""

    def __init__(self, stops: list[str], *, child: bool = False, busy: bool = False) -> None:
        self.stops = stops
        self.child = child
        self.busy = busy

    async def on_start(self, ctx: ActorContext) -> None:
        if self.child:
            await ctx.start_child(Sleeper(self.stops), restart=Restart.TRANSIENT)

    async def receive(self, ctx: ActorContext, message: Any) -> Any:
        if self.busy:
            await anyio.sleep_forever()
        return None

    async def on_stop(self, ctx: ActorContext) -> None:
        await anyio.lowlevel.checkpoint()  # a real await: the hook runs even while the block is cancelled
        self.stops.append(ctx.id)


def running_tasks() -> set[int]:
    """The ids of the tasks running now, on asyncio or trio."""
    return {task.id for task in anyio.get_running_tasks()}


def other_tasks(before: set[int]) -> set[int]:
    return running_tasks() - before


async def start_many(system: ActorSystem, stops: list[str], n: int) -> None:
    for i in range(n):
        ref = await system.start(Sleeper(stops, child=i % 10 == 0, busy=i % 100 == 0))
        if i % 100 == 0:
            ref.send_nowait("work")  # a few actors are stuck in a handler at exit


@pytest.mark.anyio
async def test_leaving_the_block_with_1000_actors() -> None:
    stops: list[str] = []
    before = running_tasks()
    with anyio.fail_after(15):
        async with ActorSystem() as system:
            await start_many(system, stops, 1000)
            assert system.runtime.live_actors == 1100
            started = time.perf_counter()
        elapsed = time.perf_counter() - started
    assert elapsed < 5.0, elapsed
    assert len(stops) == 1100 and len(set(stops)) == 1100
    assert system.runtime.live_actors == 0
    assert other_tasks(before) == set()


@pytest.mark.anyio
async def test_cancelling_the_block_with_1000_actors() -> None:
    stops: list[str] = []
    before = running_tasks()
    with anyio.fail_after(15):
        started = 0.0
        with anyio.CancelScope() as scope:
            async with ActorSystem() as system:
                await start_many(system, stops, 1000)
                started = time.perf_counter()
                scope.cancel()
                await anyio.sleep(30)
        elapsed = time.perf_counter() - started
    assert scope.cancelled_caught
    assert elapsed < 5.0, elapsed
    assert len(set(stops)) == 1100
    assert system.runtime.live_actors == 0
    assert other_tasks(before) == set()


@pytest.mark.anyio
async def test_the_block_s_own_error_propagates_unwrapped() -> None:
    stops: list[str] = []
    with anyio.fail_after(5):
        with pytest.raises(KeyError):
            async with ActorSystem() as system:
                await system.start(Sleeper(stops))
                raise KeyError("mine")
    assert len(stops) == 1


@pytest.mark.anyio
async def test_on_stop_is_time_bounded() -> None:
    class Stuck(Actor):
        async def on_stop(self, ctx: ActorContext) -> None:
            await anyio.sleep_forever()

    with anyio.fail_after(5):
        started = time.perf_counter()
        async with ActorSystem() as system:
            await system.start(Stuck(), stop_timeout=0.1)
        assert time.perf_counter() - started < 2


def test_works_from_plain_asyncio_run() -> None:
    class Echo(Actor):
        async def receive(self, ctx: ActorContext, message: Any) -> Any:
            return message

    async def main() -> Any:
        async with asyncio.timeout(5):
            async with ActorSystem() as system:
                ref = await system.start(Echo())
                return await ref.ask("hello", timeout=1)

    assert asyncio.run(main()) == "hello"


@pytest.mark.anyio
async def test_cancelling_the_block_cuts_a_busy_handler_at_once_not_at_its_stop_timeout() -> None:
    stops: list[str] = []
    with anyio.fail_after(15):
        with anyio.CancelScope() as scope:
            async with ActorSystem() as system:
                ref = await system.start(Sleeper(stops, busy=True), stop_timeout=10)
                ref.send_nowait("work")
                await anyio.sleep(0.01)  # the handler is stuck
                started = time.perf_counter()
                scope.cancel()
                await anyio.sleep(30)
        elapsed = time.perf_counter() - started
    assert elapsed < 2.0, elapsed
    assert len(stops) == 1  # its on_stop still ran
