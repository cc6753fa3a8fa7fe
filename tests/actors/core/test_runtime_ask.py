"""ask: replies, and timeout / crash / stop / self-ask each as its own typed error; no hangs."""

from __future__ import annotations

from typing import Any

import anyio
import msgspec
import pytest

from actors import (
    Actor,
    ActorContext,
    ActorCrashed,
    ActorStopped,
    ActorSystem,
    AskDeadlock,
    AskTimeout,
    MailboxFull,
    Restart,
)
from stores import TetherError


class Add(msgspec.Struct, tag="add", frozen=True):
    n: int


class Boom(msgspec.Struct, tag="boom", frozen=True):
    pass


class Slow(msgspec.Struct, tag="slow", frozen=True):
    seconds: float


class AskSelf(msgspec.Struct, tag="ask_self", frozen=True):
    pass


Command = Add | Boom | Slow | AskSelf


class Calc(Actor):
    def __init__(self) -> None:
        self.total = 0
        self.stopped = 0

    async def receive(self, ctx: ActorContext, message: Command) -> Any:
        match message:
            case Add(n=n):
                self.total += n
                return self.total
            case Boom():
                raise ValueError("boom")
            case Slow(seconds=s):
                await anyio.sleep(s)
                return "slept"
            case AskSelf():
                return await ctx.self.ask(Add(1), timeout=1.0)

    async def on_stop(self, ctx: ActorContext) -> None:
        self.stopped += 1


def test_errors_are_tether_errors() -> None:
    for error in (MailboxFull, AskTimeout, ActorCrashed, ActorStopped, AskDeadlock):
        assert issubclass(error, TetherError)


@pytest.mark.anyio
async def test_ask_returns_the_reply() -> None:
    with anyio.fail_after(5):
        async with ActorSystem() as system:
            ref = await system.start(Calc())
            assert await ref.ask(Add(2), timeout=1) == 2
            assert await ref.ask(Add(3), timeout=1) == 5


@pytest.mark.anyio
async def test_ask_timeout() -> None:
    with anyio.fail_after(5):
        async with ActorSystem() as system:
            ref = await system.start(Calc())
            with pytest.raises(AskTimeout):
                await ref.ask(Slow(0.3), timeout=0.05)


@pytest.mark.anyio
async def test_ask_crash_chains_the_cause_and_pending_asks_fail() -> None:
    with anyio.fail_after(5):
        async with ActorSystem() as system:
            ref = await system.start(Calc(), restart=Restart.TEMPORARY)
            # Each answer is kept by the order its message was sent in: the asks that fail together
            # may wake in any order (trio shuffles the tasks it wakes at once).
            results: dict[int, BaseException | object] = {}

            async def ask(sent: int, message: Command) -> None:
                try:
                    results[sent] = await ref.ask(message, timeout=3)
                except TetherError as exc:
                    results[sent] = exc

            async with anyio.create_task_group() as tg:
                tg.start_soon(ask, 0, Slow(0.05))
                await anyio.sleep(0.01)
                tg.start_soon(ask, 1, Boom())
                await anyio.sleep(0.01)
                for sent in range(2, 5):
                    tg.start_soon(ask, sent, Add(1))
            assert sorted(results) == [0, 1, 2, 3, 4]
            assert results[0] == "slept"
            crashed = results[1]
            assert isinstance(crashed, ActorCrashed)
            assert isinstance(crashed.__cause__, ValueError)
            assert all(isinstance(results[sent], ActorStopped) for sent in range(2, 5)), results
            assert not ref.alive
            with pytest.raises(ActorStopped):
                await ref.ask(Add(1), timeout=1)


@pytest.mark.anyio
async def test_crash_restarts_and_keeps_the_ref() -> None:
    with anyio.fail_after(5):
        async with ActorSystem() as system:
            ref = await system.start(Calc)  # a factory: restarts get a fresh Calc
            await ref.ask(Add(5), timeout=1)
            with pytest.raises(ActorCrashed):
                await ref.ask(Boom(), timeout=1)
            assert await ref.ask(Add(1), timeout=1) == 1  # fresh state, same ref


@pytest.mark.anyio
async def test_ask_after_stop_and_during_stop() -> None:
    with anyio.fail_after(5):
        async with ActorSystem() as system:
            calc = Calc()
            ref = await system.start(calc)
            tg2_result: list[BaseException] = []
            async with anyio.create_task_group() as tg2:

                async def in_flight() -> None:
                    try:
                        await ref.ask(Slow(10), timeout=3)
                    except TetherError as exc:
                        tg2_result.append(exc)

                tg2.start_soon(in_flight)
                await anyio.sleep(0.02)
                await ref.stop(timeout=0.05)
            assert isinstance(tg2_result[0], ActorStopped)
            assert calc.stopped == 1
            with pytest.raises(ActorStopped):
                await ref.ask(Add(1), timeout=1)
            with pytest.raises(ActorStopped):
                await ref.send(Add(1))


@pytest.mark.anyio
async def test_asking_yourself_raises_at_once() -> None:
    with anyio.fail_after(5):
        async with ActorSystem() as system:
            ref = await system.start(Calc(), restart=Restart.TEMPORARY)
            with pytest.raises(ActorCrashed) as info:
                await ref.ask(AskSelf(), timeout=3)
            assert isinstance(info.value.__cause__, AskDeadlock)


@pytest.mark.anyio
async def test_an_earlier_deadline_wakes_the_timer_and_full_mailbox_asks_time_out() -> None:
    with anyio.fail_after(5):
        async with ActorSystem() as system:
            ref = await system.start(Calc(), mailbox_size=1)
            async with anyio.create_task_group() as tg:

                async def long_ask() -> None:
                    with pytest.raises(ActorStopped):
                        await ref.ask(Slow(10), timeout=4)

                tg.start_soon(long_ask)  # taken by the handler: the timer sleeps toward +4 s
                await anyio.sleep(0.01)
                started = anyio.current_time()
                with pytest.raises(AskTimeout):
                    await ref.ask(Add(1), timeout=0.05)  # queued: the earlier deadline wakes the timer
                assert anyio.current_time() - started < 1
                with pytest.raises(MailboxFull):
                    ref.send_nowait(Add(1))  # the abandoned ask still holds the one slot
                with pytest.raises(AskTimeout):
                    await ref.ask(Add(1), timeout=0.05)  # mailbox full: the slow path bounds it
                await ref.stop(timeout=0.05)
