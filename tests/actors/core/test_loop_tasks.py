"""``LoopTasks``, where an actor's tasks run on asyncio: a cancel goes through each task's own cancel
scope, so shielded clean-up holds and a task cut before it ran still starts (its ``finally`` runs);
an exception a task lets out goes to ``failed``; ``wait`` returns once every task has ended."""

from __future__ import annotations

import asyncio

import anyio
import anyio.lowlevel

from actors.lowlevel import LoopTasks


def test_a_cancel_spares_shielded_clean_up() -> None:
    cleaned: list[str] = []

    async def work(inside: anyio.Event) -> None:
        with anyio.CancelScope(shield=True):
            inside.set()
            await anyio.sleep(0.05)
            cleaned.append("shielded part ran to its end")

    async def main() -> None:
        tasks = LoopTasks(asyncio.get_running_loop())
        inside = anyio.Event()
        tasks.start(work(inside))
        await inside.wait()
        assert tasks.cancel()
        async with asyncio.timeout(5):
            await tasks.wait()
        assert not tasks.live

    asyncio.run(main())
    assert cleaned == ["shielded part ran to its end"]


def test_a_task_cut_before_it_ran_still_starts_and_meets_the_cut() -> None:
    seen: list[str] = []

    async def work() -> None:
        seen.append("started")
        try:
            await anyio.sleep_forever()
        finally:
            seen.append("finally")

    async def main() -> None:
        tasks = LoopTasks(asyncio.get_running_loop())
        tasks.start(work())
        assert tasks.cancel()  # before the task's first step
        async with asyncio.timeout(5):
            await tasks.wait()
        assert not tasks.live
        assert not tasks.cancel()  # nothing is left to cancel

    asyncio.run(main())
    assert seen == ["started", "finally"]


def test_an_exception_a_task_lets_out_goes_to_failed() -> None:
    failures: list[Exception] = []

    async def work() -> None:
        await anyio.lowlevel.checkpoint()
        raise KeyError("lost")

    async def main() -> None:
        tasks = LoopTasks(asyncio.get_running_loop(), failed=failures.append)
        tasks.start(work())
        async with asyncio.timeout(5):
            await tasks.wait()
        assert not tasks.live

    asyncio.run(main())
    assert [repr(error) for error in failures] == ["KeyError('lost')"]


def test_wait_returns_once_every_task_has_ended_of_itself() -> None:
    ended: list[int] = []

    async def work(n: int) -> None:
        await anyio.sleep(0.01 * n)
        ended.append(n)

    async def main() -> None:
        tasks = LoopTasks(asyncio.get_running_loop())
        for n in (3, 1, 2):
            tasks.start(work(n))
        async with asyncio.timeout(5):
            await tasks.wait()
        assert not tasks.live

    asyncio.run(main())
    assert sorted(ended) == [1, 2, 3]
