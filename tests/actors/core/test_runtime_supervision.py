"""Supervision: the three strategies, the three restart types, restart intensity and escalation."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from actors import (
    Actor,
    ActorContext,
    ActorCrashed,
    ActorRef,
    ActorSystem,
    Restart,
    RestartIntensityExceeded,
    RestartStrategy,
    Supervision,
)


async def until(predicate: Callable[[], bool]) -> None:
    """Poll a condition; callers bound it with ``anyio.fail_after``."""
    while not predicate():  # noqa: ASYNC110 (polling a plain condition in a test)
        await anyio.sleep(0.005)


class Worker(Actor):
    """Records its hooks; ``"crash"`` raises in the handler, ``"exit"`` ends it normally."""

    def __init__(self, name: str, events: Counter[str]) -> None:
        self.name = name
        self.events = events

    async def on_start(self, ctx: ActorContext) -> None:
        self.events[f"start:{self.name}"] += 1

    async def on_stop(self, ctx: ActorContext) -> None:
        self.events[f"stop:{self.name}"] += 1

    async def receive(self, ctx: ActorContext, message: Any) -> Any:
        if message == "crash":
            raise RuntimeError(f"{self.name} crashed")
        if message == "exit":
            ctx.stop()
        return self.name


class Parent(Actor):
    """Starts workers a, b, c in order under its ``supervision``."""

    def __init__(self, events: Counter[str], refs: dict[str, ActorRef], restart: Restart) -> None:
        self.events = events
        self.refs = refs
        self.restart = restart

    async def on_start(self, ctx: ActorContext) -> None:
        self.events["start:parent"] += 1
        for name in "abc":
            self.refs[name] = await ctx.start_child(
                lambda name=name: Worker(name, self.events),  # type: ignore[misc]
                name=name,
                restart=self.restart,
            )

    async def on_stop(self, ctx: ActorContext) -> None:
        self.events["stop:parent"] += 1


def parent_class(strategy: RestartStrategy, max_restarts: int = 3) -> type[Parent]:
    return type(
        "P", (Parent,), {"supervision": Supervision(strategy=strategy, max_restarts=max_restarts, within=5)}
    )


async def crash(ref: ActorRef) -> None:
    with pytest.raises(ActorCrashed) as info:
        await ref.ask("crash", timeout=1)
    assert isinstance(info.value.__cause__, RuntimeError)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        (RestartStrategy.ONE_FOR_ONE, {"a": 1, "b": 2, "c": 1}),
        (RestartStrategy.ONE_FOR_ALL, {"a": 2, "b": 2, "c": 2}),
        (RestartStrategy.REST_FOR_ONE, {"a": 1, "b": 2, "c": 2}),
    ],
)
async def test_strategies(strategy: RestartStrategy, expected: dict[str, int]) -> None:
    events: Counter[str] = Counter()
    refs: dict[str, ActorRef] = {}
    with anyio.fail_after(5):
        async with ActorSystem() as system:
            cls = parent_class(strategy)
            await system.start(lambda: cls(events, refs, Restart.PERMANENT))
            await crash(refs["b"])
            await until(lambda: all(events[f"start:{n}"] == k for n, k in expected.items()))
            await anyio.sleep(0.05)  # nothing else restarts late
            assert {n: events[f"start:{n}"] for n in "abc"} == expected
            # a restarted sibling ran on_stop before its new on_start
            for name, starts in expected.items():
                assert events[f"stop:{name}"] == starts - 1
            # the refs survive in-place restarts
            for name in "abc":
                assert await refs[name].ask("ping", timeout=1) == name
            assert events["start:parent"] == 1
        assert events["stop:parent"] == 1


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("restart", "after_crash", "after_exit"),
    [
        (Restart.PERMANENT, True, True),
        (Restart.TRANSIENT, True, False),
        (Restart.TEMPORARY, False, False),
    ],
)
async def test_restart_types(restart: Restart, after_crash: bool, after_exit: bool) -> None:
    events: Counter[str] = Counter()
    with anyio.fail_after(5):
        async with ActorSystem() as system:
            ref = await system.start(lambda: Worker("w", events), restart=restart)
            await crash(ref)
            await anyio.sleep(0.02)
            assert ref.alive is after_crash
            assert events["start:w"] == (2 if after_crash else 1)
            if after_crash:
                await ref.ask("exit", timeout=1)
                await anyio.sleep(0.02)
                assert ref.alive is after_exit
                assert events["start:w"] == (3 if after_exit else 2)
            if ref.alive:
                await ref.stop()  # an explicit stop is never restarted, whatever the type
                assert not ref.alive
                await anyio.sleep(0.02)
                assert not ref.alive


@pytest.mark.anyio
async def test_intensity_exceeded_fails_the_parent_which_its_parent_restarts() -> None:
    events: Counter[str] = Counter()
    refs: dict[str, ActorRef] = {}
    with anyio.fail_after(5):
        async with ActorSystem() as system:
            cls = parent_class(RestartStrategy.ONE_FOR_ONE, max_restarts=2)
            parent = await system.start(lambda: cls(events, refs, Restart.PERMANENT))
            first_b = refs["b"]
            for _ in range(3):
                await until(lambda: first_b.alive)
                await crash(first_b)
            # the third crash exceeds 2 restarts: the parent stops a, b, c and fails to the root,
            # which restarts it (a fresh parent with fresh children)
            # the fresh parent counts its start before it starts its children: wait for the last
            await until(lambda: events["start:parent"] == 2 and events["start:c"] == 2)
            assert not first_b.alive
            assert refs["b"] is not first_b and refs["b"].alive
            assert parent.alive
            assert events["stop:parent"] == 1
            assert events["stop:a"] == 1 and events["stop:c"] == 1
            assert system.escalations == []


@pytest.mark.anyio
async def test_escalation_to_the_system_stops_everything_and_raises() -> None:
    events: Counter[str] = Counter()
    with anyio.fail_after(5):
        with pytest.raises(RestartIntensityExceeded) as info:
            async with ActorSystem(supervision=Supervision(max_restarts=1, within=5)) as system:
                bystander = await system.start(lambda: Worker("bystander", events))
                ref = await system.start(lambda: Worker("w", events))
                await crash(ref)
                await until(lambda: ref.alive and events["start:w"] == 2)
                await crash(ref)
                await anyio.sleep(30)  # cancelled by the escalation
        assert isinstance(info.value.__cause__, RuntimeError)
        assert system.escalations == [info.value]
        assert not bystander.alive
        assert events["stop:bystander"] == 1
        assert events["stop:w"] == 2
        assert system.runtime.live_actors == 0
