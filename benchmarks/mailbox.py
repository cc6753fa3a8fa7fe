"""Mailbox benchmark: send rate, ask round trip and start rate against raw anyio in the same run.

    python -m benchmarks.mailbox [--rounds 5] [--n 20000] [--tiny]

Raw baselines: a consumer task draining an anyio memory-object stream (send); a request stream plus a
per-request ``anyio.Event`` reply slot (ask); both put with ``send_nowait`` first, as tether does; ``TaskGroup.start_soon`` of a task that signals it ran
(start). Each round runs every raw and tether measurement back to back (interleaved); the table shows
medians over the rounds and tether/raw ratios. Counts are checked, so a fast wrong answer fails.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from actors import Actor, ActorContext, ActorSystem
from benchmarks._common import median, print_table

MAILBOX = 1024


class _Counter(Actor):
    """Counts messages; ``ask`` returns the message (an echo)."""

    def __init__(self) -> None:
        self.count = 0

    async def receive(self, ctx: ActorContext, message: Any) -> Any:
        self.count += 1
        return message


class _Idle(Actor):
    pass


class _Reply:
    __slots__ = ("event", "value")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.value: Any = None


async def _raw_put(send: MemoryObjectSendStream[Any], item: Any) -> None:
    """The cheapest correct raw put: no yield while there is room (what ``ActorRef.send`` does)."""
    try:
        send.send_nowait(item)
    except anyio.WouldBlock:
        await send.send(item)


async def _raw_consumer(recv: MemoryObjectReceiveStream[Any], counts: list[int]) -> None:
    async with recv:
        async for item in recv:
            if type(item) is tuple:
                message, reply = item
                reply.value = message
                reply.event.set()
            counts[0] += 1


async def raw_send(n: int) -> float:
    counts = [0]
    send, recv = anyio.create_memory_object_stream[Any](MAILBOX)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_raw_consumer, recv, counts)
        start = time.perf_counter()
        async with send:
            for i in range(n):
                await _raw_put(send, i)
    elapsed = time.perf_counter() - start
    assert counts[0] == n, counts
    return n / elapsed


async def raw_ask(n: int) -> float:
    counts = [0]
    send, recv = anyio.create_memory_object_stream[Any](MAILBOX)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_raw_consumer, recv, counts)
        async with send:
            start = time.perf_counter()
            for i in range(n):
                reply = _Reply()
                await _raw_put(send, (i, reply))
                await reply.event.wait()
                assert reply.value == i
            elapsed = time.perf_counter() - start
    assert counts[0] == n
    return n / elapsed


async def _raw_task(started: anyio.Event, stop: anyio.Event) -> None:
    started.set()
    await stop.wait()


async def raw_start(n: int) -> float:
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        start = time.perf_counter()
        for _ in range(n):
            started = anyio.Event()
            tg.start_soon(_raw_task, started, stop)
            await started.wait()
        elapsed = time.perf_counter() - start
        stop.set()
    return n / elapsed


async def tether_send(n: int) -> float:
    async with ActorSystem() as system:
        actor = _Counter()
        ref = await system.start(actor, mailbox_size=MAILBOX)
        start = time.perf_counter()
        for i in range(n):
            await ref.send(i)
        await ref.stop(drain=True)
        elapsed = time.perf_counter() - start
    assert actor.count == n, (actor.count, n)
    return n / elapsed


async def tether_ask(n: int) -> float:
    async with ActorSystem() as system:
        actor = _Counter()
        ref = await system.start(actor, mailbox_size=MAILBOX)
        start = time.perf_counter()
        for i in range(n):
            assert await ref.ask(i, timeout=10.0) == i
        elapsed = time.perf_counter() - start
    assert actor.count == n
    return n / elapsed


async def tether_start(n: int) -> float:
    async with ActorSystem() as system:
        start = time.perf_counter()
        for _ in range(n):
            await system.start(_Idle)
        elapsed = time.perf_counter() - start
        assert system.runtime.live_actors == n
    assert system.runtime.live_actors == 0
    return n / elapsed


async def run(rounds: int, n: int) -> dict[str, tuple[float, float]]:
    """Return ``{metric: (median raw ops/s, median tether ops/s)}`` over interleaved rounds."""
    pairs = {
        "send": (raw_send, tether_send, n),
        "ask round trip": (raw_ask, tether_ask, max(n // 4, 1)),
        "start": (raw_start, tether_start, max(n // 10, 1)),
    }
    results: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in pairs}
    for round_index in range(rounds):
        for name, (raw, ours, size) in pairs.items():
            first, second = (raw, ours) if round_index % 2 == 0 else (ours, raw)
            a = await first(size)
            b = await second(size)
            raw_rate, ours_rate = (a, b) if first is raw else (b, a)
            results[name][0].append(raw_rate)
            results[name][1].append(ours_rate)
    return {name: (median(raw), median(ours)) for name, (raw, ours) in results.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (median over them)")
    parser.add_argument("--n", type=int, default=20_000, help="messages per send round")
    parser.add_argument("--tiny", action="store_true", help="a fast smoke size for CI")
    args = parser.parse_args(argv)
    n = 400 if args.tiny else args.n
    medians = asyncio.run(run(args.rounds, n))
    notes = {
        "send": f"{n} msgs, mailbox {MAILBOX}",
        "ask round trip": f"{max(n // 4, 1)} sequential asks",
        "start": f"{max(n // 10, 1)} actors, after on_start",
    }
    print_table(
        f"tether mailbox benchmark (asyncio, medians of {args.rounds} interleaved rounds)",
        [(name, raw, ours, notes[name]) for name, (raw, ours) in medians.items()],
    )
    print("counts verified: ok")


if __name__ == "__main__":
    main()
