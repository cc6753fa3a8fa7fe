"""``LazyEvent``: set, read and awaited as an ``anyio.Event``, which it builds only for a waiter."""

from __future__ import annotations

import anyio
import pytest

from actors.lowlevel import LazyEvent


@pytest.mark.anyio
async def test_every_waiter_wakes_when_it_is_set() -> None:
    event = LazyEvent()
    woke: list[int] = []

    async def waiter(n: int) -> None:
        await event.wait()
        woke.append(n)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            for n in range(3):
                tg.start_soon(waiter, n)
            await anyio.wait_all_tasks_blocked()
            assert woke == []
            assert not event.is_set()
            event.set()
            assert event.is_set()
    assert sorted(woke) == [0, 1, 2]


@pytest.mark.anyio
async def test_a_wait_after_set_returns_without_building_an_event_and_is_a_checkpoint() -> None:
    event = LazyEvent()
    event.set()
    event.set()  # a second set changes nothing
    with anyio.fail_after(5):
        await event.wait()
    assert event.is_set()
    assert event._event is None  # nobody waited while it was unset
    with anyio.CancelScope() as scope:
        scope.cancel()
        await event.wait()  # set already, but still a checkpoint: the cancel lands here
        pytest.fail("a wait on a set event must be a checkpoint")
    assert scope.cancelled_caught


@pytest.mark.anyio
async def test_a_cancelled_waiter_leaves_the_event_to_the_others() -> None:
    event = LazyEvent()
    woke: list[str] = []

    async def waiter(name: str, scope: anyio.CancelScope) -> None:
        with scope:
            await event.wait()
            woke.append(name)

    cancelled, kept = anyio.CancelScope(), anyio.CancelScope()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter, "cancelled", cancelled)
            tg.start_soon(waiter, "kept", kept)
            await anyio.wait_all_tasks_blocked()
            cancelled.cancel()
            await anyio.wait_all_tasks_blocked()
            assert cancelled.cancelled_caught
            assert not event.is_set()
            event.set()
    assert woke == ["kept"]
    assert not kept.cancelled_caught
    with anyio.fail_after(5):
        await event.wait()  # a later waiter returns at once


@pytest.mark.anyio
async def test_a_wait_on_an_unset_event_waits() -> None:
    event = LazyEvent()
    with anyio.move_on_after(0.05) as bound:
        await event.wait()
    assert bound.cancelled_caught
    assert not event.is_set()
