"""Mailboxes: backpressure on send, MailboxFull on send_nowait, stop through a full mailbox,
and msgspec tagged-union messages that stay decodable when a field with a default is added."""

from __future__ import annotations

from typing import Any

import anyio
import msgspec
import pytest

from actors import Actor, ActorContext, ActorStopped, ActorSystem, MailboxFull


class Gate(Actor):
    """Blocks every message until ``open`` is set; counts what it handled."""

    def __init__(self) -> None:
        self.open = anyio.Event()
        self.handled = 0
        self.stopped = False

    async def receive(self, ctx: ActorContext, message: Any) -> Any:
        await self.open.wait()
        self.handled += 1
        return self.handled

    async def on_stop(self, ctx: ActorContext) -> None:
        self.stopped = True


@pytest.mark.anyio
async def test_a_faster_producer_blocks_on_send() -> None:
    with anyio.fail_after(5):
        async with ActorSystem() as system:
            gate = Gate()
            ref = await system.start(gate, mailbox_size=4)
            sent = 0

            async def produce() -> None:
                nonlocal sent
                for i in range(20):
                    await ref.send(i)
                    sent += 1

            async with anyio.create_task_group() as tg:
                tg.start_soon(produce)
                await anyio.sleep(0.1)
                # one message in the handler, four in the mailbox: the producer waits for room
                assert sent == 5
                gate.open.set()
            assert sent == 20
            await ref.stop(drain=True)
            assert gate.handled == 20


@pytest.mark.anyio
async def test_send_nowait_raises_mailbox_full() -> None:
    with anyio.fail_after(5):
        async with ActorSystem() as system:
            gate = Gate()
            ref = await system.start(gate, mailbox_size=2)
            ref.send_nowait(1)
            await anyio.sleep(0.01)  # the actor takes it and blocks in the handler
            ref.send_nowait(2)
            ref.send_nowait(3)
            with pytest.raises(MailboxFull):
                ref.send_nowait(4)
            gate.open.set()


@pytest.mark.anyio
async def test_stop_gets_through_a_full_mailbox() -> None:
    with anyio.fail_after(5):
        async with ActorSystem() as system:
            gate = Gate()
            ref = await system.start(gate, mailbox_size=3)
            blocked_senders = 0
            released = 0

            async def blocked_send(i: int) -> None:
                # A sender waiting for room counts as queued: a non-draining stop drops its message
                # (logged as actor.dropped_messages), so the sender is released, never left hanging.
                nonlocal blocked_senders, released
                blocked_senders += 1
                await ref.send(i)
                released += 1

            async def queued_ask() -> None:
                with pytest.raises(ActorStopped):
                    await ref.ask("queued", timeout=3)

            ref.send_nowait(0)
            await anyio.sleep(0.01)
            async with anyio.create_task_group() as tg:
                tg.start_soon(queued_ask)
                ref.send_nowait(1)
                ref.send_nowait(2)
                for i in range(3):
                    tg.start_soon(blocked_send, i)
                await anyio.sleep(0.02)
                assert blocked_senders == 3
                with pytest.raises(MailboxFull):
                    ref.send_nowait(99)
                # the handler is stuck and the mailbox is full: stop still arrives and cancels it
                await ref.stop(timeout=0.1)
            assert not ref.alive
            assert released == 3
            assert gate.stopped
            assert gate.handled == 0
            with pytest.raises(ActorStopped):
                await ref.send(100)


@pytest.mark.anyio
async def test_inspect_answers_at_once_when_the_mailbox_is_full() -> None:
    with anyio.fail_after(5):
        async with ActorSystem() as system:
            gate = Gate()
            ref = await system.start(gate, mailbox_size=2)
            ref.send_nowait("first")  # taken by the handler, which blocks on the gate
            await anyio.sleep(0.01)
            ref.send_nowait("second")
            ref.send_nowait("third")
            with pytest.raises(MailboxFull):
                ref.send_nowait("fourth")
            info = ref.inspect()
            assert (info.id, info.alive, info.accepting) == (ref.id, True, True)
            assert (info.queued, info.capacity, info.received) == (2, 2, 1)  # one in the handler
            gate.open.set()
            assert await ref.ask("last", timeout=2) == 4
            assert (ref.inspect().queued, ref.inspect().received) == (0, 4)
            await ref.stop()
            assert ref.inspect().alive is False


@pytest.mark.anyio
async def test_stop_with_drain_handles_queued_messages() -> None:
    with anyio.fail_after(5):
        async with ActorSystem() as system:
            gate = Gate()
            ref = await system.start(gate, mailbox_size=10)
            for i in range(10):
                ref.send_nowait(i)
            gate.open.set()
            await ref.stop(drain=True)
            assert gate.handled == 10


class PingV1(msgspec.Struct, tag="ping", frozen=True):
    text: str


class PingV2(msgspec.Struct, tag="ping", frozen=True):
    text: str
    priority: int = 0


class Reset(msgspec.Struct, tag="reset", frozen=True):
    pass


class Handler(Actor):
    async def receive(self, ctx: ActorContext, message: PingV2 | Reset) -> Any:
        match message:
            case PingV2(text=text, priority=priority):
                return f"{text}:{priority}"
            case Reset():
                return "reset"


def test_adding_a_field_with_a_default_keeps_old_messages_decodable() -> None:
    old = msgspec.json.encode(PingV1("hi"))
    assert old == b'{"type":"ping","text":"hi"}'
    decoded = msgspec.json.decode(old, type=PingV2 | Reset)
    assert decoded == PingV2("hi", 0)
    assert msgspec.json.decode(msgspec.json.encode(Reset()), type=PingV2 | Reset) == Reset()


@pytest.mark.anyio
async def test_tagged_union_messages_are_matched() -> None:
    decoder = msgspec.json.Decoder(PingV2 | Reset)
    with anyio.fail_after(5):
        async with ActorSystem() as system:
            ref = await system.start(Handler())
            assert await ref.ask(decoder.decode(msgspec.json.encode(PingV1("a"))), timeout=1) == "a:0"
            assert await ref.ask(decoder.decode(b'{"type":"reset"}'), timeout=1) == "reset"
