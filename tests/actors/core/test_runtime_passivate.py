"""``ActorContext.passivate()``: an actor retires itself once its mailbox is empty, losing nothing."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from actors import Actor, ActorContext, ActorSystem


class OneShot(Actor):
    """Records each message with its incarnation, passivates itself, and reports its stop."""

    def __init__(self, incarnation: int, seen: list[tuple[int, Any]], stopped: anyio.Event) -> None:
        self.incarnation = incarnation
        self.seen = seen
        self.stopped = stopped
        self.handled = anyio.Event()

    async def receive(self, ctx: ActorContext, message: Any) -> Any:
        self.seen.append((self.incarnation, message))
        self.handled.set()
        ctx.passivate()

    async def on_stop(self, ctx: ActorContext) -> None:
        self.stopped.set()


@pytest.mark.anyio
async def test_passivate_retires_after_the_queue_and_the_next_message_activates_anew() -> None:
    seen: list[tuple[int, Any]] = []
    built: list[OneShot] = []

    def factory() -> OneShot:
        actor = OneShot(len(built) + 1, seen, anyio.Event())
        built.append(actor)
        return actor

    with anyio.fail_after(5):
        async with ActorSystem() as system:
            runtime = system.runtime
            ref = await runtime.get_or_activate("k", factory)
            for i in range(3):  # queued before the first is handled: all reach the first incarnation
                ref.send_nowait(i)
            await built[0].stopped.wait()
            assert seen == [(1, 0), (1, 1), (1, 2)]
            assert runtime.lookup("k") is None
            await runtime.deliver("k", factory, "again")
            assert len(built) == 2
            await built[1].handled.wait()
            assert seen[-1] == (2, "again")
