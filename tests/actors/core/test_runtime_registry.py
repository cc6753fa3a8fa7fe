"""The registry keyed by id: one activation per id under concurrency, exit clean-up, passivation."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from actors import Actor, ActorContext, ActorCrashed, ActorSystem


class Tally(Actor):
    """Counts activations and messages per key into shared counters."""

    def __init__(self, key: str, activations: Counter[str], seen: Counter[str]) -> None:
        self.key = key
        self.activations = activations
        self.seen = seen

    async def on_start(self, ctx: ActorContext) -> None:
        await anyio.sleep(0.01)  # a slow activation widens the race window
        self.activations[self.key] += 1

    async def receive(self, ctx: ActorContext, message: Any) -> Any:
        if message != "flush":
            self.seen[self.key] += 1
        if random.random() < 0.1:
            await anyio.lowlevel.checkpoint()
        return self.seen[self.key]


@pytest.mark.anyio
async def test_concurrent_first_messages_share_one_activation() -> None:
    activations: Counter[str] = Counter()
    seen: Counter[str] = Counter()
    with anyio.fail_after(10):
        async with ActorSystem() as system:
            runtime = system.runtime

            async def first_message(i: int) -> None:
                key = f"run-{i % 100}"
                await runtime.deliver(key, lambda: Tally(key, activations, seen), i)

            async with anyio.create_task_group() as tg:
                for i in range(1000):
                    tg.start_soon(first_message, i)
            assert sum(activations.values()) == 100
            assert set(activations.values()) == {1}
            assert len(runtime.registry) == 100
            ref = await runtime.get_or_activate("run-7", lambda: Tally("run-7", activations, seen))
            assert await ref.ask("count", timeout=1) == 11
            await ref.stop()
            assert "run-7" not in runtime.registry  # the entry disappears when the actor exits
            assert runtime.registry.lookup("run-7") is None
        assert len(runtime.registry) == 0


@pytest.mark.anyio
async def test_failed_activation_is_shared_and_not_cached() -> None:
    class Broken(Actor):
        async def on_start(self, ctx: ActorContext) -> None:
            await anyio.sleep(0.01)
            raise RuntimeError("no")

    with anyio.fail_after(5):
        async with ActorSystem() as system:
            runtime = system.runtime
            errors: list[BaseException] = []

            async def activate() -> None:
                try:
                    await runtime.get_or_activate("k", Broken)
                except ActorCrashed as exc:
                    errors.append(exc)

            async with anyio.create_task_group() as tg:
                for _ in range(10):
                    tg.start_soon(activate)
            assert len(errors) == 10
            assert "k" not in runtime.registry


@pytest.mark.anyio
async def test_passivation_and_reactivation_lose_no_message() -> None:
    activations: Counter[str] = Counter()
    seen: Counter[str] = Counter()
    sent: Counter[str] = Counter()
    with anyio.fail_after(20):
        async with ActorSystem() as system:
            runtime = system.runtime

            async def producer(p: int) -> None:
                rng = random.Random(p)
                for _ in range(150):
                    key = f"k{rng.randrange(5)}"
                    await runtime.deliver(key, lambda key=key: Tally(key, activations, seen), "m")  # type: ignore[misc]
                    sent[key] += 1
                    if rng.random() < 0.2:
                        await anyio.sleep(rng.random() * 0.01)

            async def passivator() -> None:
                rng = random.Random(99)
                while True:
                    runtime.passivate(f"k{rng.randrange(5)}")
                    await anyio.sleep(rng.random() * 0.005)

            async with anyio.create_task_group() as tg:
                tg.start_soon(passivator)
                async with anyio.create_task_group() as producers:
                    for p in range(8):
                        producers.start_soon(producer, p)
                tg.cancel_scope.cancel()
            for key in list(sent):  # an ask queues behind every earlier message of its key
                ref = await runtime.get_or_activate(key, lambda key=key: Tally(key, activations, seen))  # type: ignore[misc]
                await ref.ask("flush", timeout=5)
        assert sent == seen
        assert sum(sent.values()) == 8 * 150
        assert sum(activations.values()) > 5  # keys really were passivated and reactivated


@pytest.mark.anyio
async def test_a_passivation_during_activation_cannot_refuse_the_message_that_activates() -> None:
    """The message that activates an actor is its first: a passivation that comes while the actor
    starts (here from its own ``on_start``, every time) retires it only after that message."""
    seen: list[object] = []

    class RetiresAtOnce(Actor):
        async def on_start(self, ctx: ActorContext) -> None:
            ctx.passivate()

        async def receive(self, ctx: ActorContext, message: Any) -> Any:
            seen.append(message)

    with anyio.fail_after(5):
        async with ActorSystem() as system:
            for i in range(3):
                await system.runtime.deliver("k", RetiresAtOnce, i)
                while "k" in system.runtime.registry:  # noqa: ASYNC110 (bounded by fail_after)
                    await anyio.sleep(0.001)
    assert seen == [0, 1, 2]


@pytest.mark.anyio
async def test_idle_actors_passivate_and_reactivate() -> None:
    activations: Counter[str] = Counter()
    seen: Counter[str] = Counter()
    with anyio.fail_after(5):
        async with ActorSystem() as system:
            runtime = system.runtime

            def factory() -> Tally:
                return Tally("idle", activations, seen)

            ref = await runtime.deliver("idle", factory, "a", idle_timeout=0.05)
            assert await ref.ask("b", timeout=1) == 2
            while ref.alive:  # noqa: ASYNC110 (bounded by fail_after)
                await anyio.sleep(0.01)
            assert "idle" not in runtime.registry
            ref2 = await runtime.deliver("idle", factory, "c", idle_timeout=0.05)
            assert ref2 is not ref
            assert await ref2.ask("d", timeout=1) == 4
            assert activations["idle"] == 2


class Recorder(Actor):
    """Records the messages it handles, in order."""

    def __init__(self, seen: list[object]) -> None:
        self.seen = seen

    async def receive(self, ctx: ActorContext, message: Any) -> Any:
        self.seen.append(message)
        return len(self.seen)


@pytest.mark.anyio
async def test_a_reserved_key_holds_other_deliveries_until_its_actor_starts_with_its_first_message() -> None:
    seen: list[object] = []
    with anyio.fail_after(5):
        async with ActorSystem() as system:
            registry = system.runtime.registry
            assert registry.reserve("k")
            assert not registry.reserve("k")
            assert registry.reserved("k") and registry.lookup("k") is None
            delivered = anyio.Event()

            async def later() -> None:
                await system.runtime.deliver("k", lambda: Recorder(seen), "second")
                delivered.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(later)
                await anyio.sleep(0.01)
                assert not delivered.is_set()  # it waits for the reservation
                registry.activate_reserved("k", lambda: Recorder(seen), "first")
                assert not registry.reserved("k")
            ref = registry.lookup("k")
            assert ref is not None
            assert await ref.ask("third", timeout=1) == 3
            assert seen == ["first", "second", "third"]


@pytest.mark.anyio
async def test_a_reservation_given_up_lets_its_waiters_activate_their_own() -> None:
    seen: list[object] = []
    with anyio.fail_after(5):
        async with ActorSystem() as system:
            registry = system.runtime.registry
            assert registry.reserve("k")
            async with anyio.create_task_group() as tg:
                tg.start_soon(system.runtime.deliver, "k", lambda: Recorder(seen), "mine")
                await anyio.sleep(0.01)
                registry.unreserve("k")
            ref = registry.lookup("k")
            assert ref is not None and await ref.ask("next", timeout=1) == 2
            assert seen == ["mine", "next"]


@pytest.mark.anyio
async def test_a_first_message_is_handled_even_when_a_stop_comes_before_its_task_runs() -> None:
    seen: list[object] = []
    with anyio.fail_after(5):
        async with ActorSystem() as system:
            registry = system.runtime.registry
            assert registry.reserve("k")
            registry.activate_reserved("k", lambda: Recorder(seen), "first")
            ref = registry.lookup("k")
            assert ref is not None
            await ref.stop()  # requested before the actor's task took its first turn
            assert seen == ["first"]
            assert "k" not in registry


@pytest.mark.anyio
async def test_live_gives_a_keys_actor_from_its_launch_until_its_task_exits() -> None:
    """``live`` is what a keyed actor's user asks for its actor: none while the key is only
    reserved, the actor from its launch (before its task ran) until its task exits."""
    seen: list[object] = []
    actor = Recorder(seen)
    with anyio.fail_after(5):
        async with ActorSystem() as system:
            runtime = system.runtime
            assert runtime.live("k") is None and runtime.live_keyed() == []
            assert runtime.registry.reserve("k")
            assert runtime.live("k") is None and runtime.live_keyed() == []
            runtime.registry.activate_reserved("k", lambda: actor, "first")
            assert runtime.live("k") is actor and runtime.live_keyed() == [("k", actor)]
            ref = runtime.lookup("k")
            assert ref is not None
            await ref.stop()
            assert seen == ["first"]
            assert runtime.live("k") is None and runtime.live_keyed() == []


class SlowToStop(Recorder):
    """A recorder whose stop takes a moment (an actor on its way out)."""

    async def on_stop(self, ctx: ActorContext) -> None:
        await anyio.sleep(0.2)


@pytest.mark.anyio
async def test_reserve_when_free_waits_for_an_actor_on_its_way_out_and_refuses_a_live_one() -> None:
    seen: list[object] = []
    with anyio.fail_after(5):
        async with ActorSystem() as system:
            registry = system.runtime.registry
            assert await registry.reserve_when_free("free") and registry.reserved("free")
            registry.unreserve("free")
            ref = await system.runtime.get_or_activate("k", lambda: SlowToStop(seen))
            assert not await registry.reserve_when_free("k")  # live and accepting
            async with anyio.create_task_group() as tg:
                tg.start_soon(ref.stop)
                while registry.lookup("k") is not None:  # the stop's first turn
                    await anyio.lowlevel.checkpoint()
                assert "k" in registry  # on its way out: its on_stop still runs
                assert await registry.reserve_when_free("k")  # once its task exited
                assert registry.reserved("k") and registry.live("k") is None
            registry.unreserve("k")


@pytest.mark.anyio
async def test_reserve_when_free_sees_how_a_reservation_ends() -> None:
    seen: list[object] = []
    with anyio.fail_after(5):
        async with ActorSystem() as system:
            registry = system.runtime.registry
            for activated in (False, True):
                assert registry.reserve("k")
                outcome: list[bool] = []

                async def reserve(into: list[bool]) -> None:
                    into.append(await registry.reserve_when_free("k"))

                async with anyio.create_task_group() as tg:
                    tg.start_soon(reserve, outcome)
                    await anyio.sleep(0.01)
                    assert outcome == []  # it waits for the reservation
                    if activated:
                        registry.activate_reserved("k", lambda: Recorder(seen), "first")
                    else:
                        registry.unreserve("k")
                assert outcome == [not activated]
                if not activated:
                    registry.unreserve("k")
