"""A cancelled caller still releases the run it holds: a sweep cancelled while it releases a run it
took and did not drive, and an enqueue cancelled while it hands its run to the fleet (or, past the
hand-off's bound, while it releases the run), finish that write, so another process (here a second
store on the same database) can take the run; the sweep's caller still hears its cancel. A release
that hangs is given up after its bound (``_RELEASE_TIMEOUT``, shortened here): the cancelled caller
waits for it that long, not longer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from conftest import Backend

from actors import ActorSystem, Agent
from actors.lowlevel import sweep_module
from actors.models import FunctionModel, Message
from stores import Store

pytestmark = pytest.mark.anyio

LIMIT = 10.0
#: The release's bound in the tests of a hung release (seconds).
BOUND = 0.4
#: How long a hung store call lasts: past any bound here, yet short enough that a caller held for
#: all of it (a release without its bound) fails the test rather than hangs it.
HANG = 3.0


def _agent(version: str | None = None) -> Agent:
    def model(messages: list[Message]) -> str:
        return f"done: {messages[-1].content}"

    return Agent("mailer", FunctionModel(model), version=version)


class _Held:
    """One method of a store (or of a part it holds), held once called (``entered`` set) until
    ``go`` is set, then run; or, with ``hang``, never run: each call waits :data:`HANG` seconds and
    fails (a store that no longer answers)."""

    def __init__(self, store: object, name: str, *, hang: bool = False) -> None:
        self.entered, self.go = anyio.Event(), anyio.Event()
        self.at = 0.0  # when the first call began (anyio.current_time())
        self.finished: list[str] = []  # the runs whose call ran to its end
        self._store, self._name = store, name
        real: Callable[..., Awaitable[None]] = getattr(store, name)

        async def held(execution_id: str, *args: Any, **kwargs: Any) -> None:
            if not self.entered.is_set():
                self.at = anyio.current_time()
            self.entered.set()
            if hang:
                await anyio.sleep(HANG)
                raise TimeoutError(f"{name} hung")
            await self.go.wait()
            await real(execution_id, *args, **kwargs)
            self.finished.append(execution_id)

        setattr(store, name, held)

    def undo(self) -> None:
        """The store's own method again."""
        delattr(self._store, self._name)


async def _cancelled_once(call: Callable[[], Awaitable[object]], held: _Held) -> None:
    """Run ``call`` in a task and cancel that task once ``held`` was entered, then let the held call
    go on. The cancel reaches the task: by ``call`` raising it, or (when the cancelled work ended
    without one more checkpoint) at the task's next checkpoint; the task never goes on past it."""
    went_on = False

    async def caller() -> None:
        nonlocal went_on
        await call()
        await anyio.lowlevel.checkpoint()
        went_on = True

    with anyio.fail_after(LIMIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(caller)
            await held.entered.wait()
            tg.cancel_scope.cancel()  # the caller goes away while the release runs
            held.go.set()
    assert not went_on


async def _queued_for_another_version(store: Store) -> None:
    """Run ``q1`` enqueued by a runner of version 1: a sweep of version 2 takes it, cannot drive it,
    and releases it."""
    v1 = _agent("1")
    async with ActorSystem(store, runners=[v1]) as system:
        await system.enqueue(v1, "o1", execution_id="q1")


async def _free(backend: Backend, execution_id: str) -> bool:
    """Whether another process (a second store on the database) can take the run now."""
    async with backend.open() as other:
        if not await other.try_lock(execution_id):
            return False
        await other.unlock(execution_id)
        return True


async def test_a_sweep_cancelled_while_it_releases_a_take_finishes_the_release(
    store_backend: Backend,
) -> None:
    async with store_backend.open() as store:
        await _queued_for_another_version(store)
        async with ActorSystem(store, runners=[_agent("2")]) as system:
            held = _Held(store, "unlock")
            await _cancelled_once(lambda: system.sweep(), held)
            held.undo()
            assert held.finished == ["q1"]  # the release ran to its end, shielded from the cancel
            assert await _free(store_backend, "q1")
            assert (await system.status("q1")).status == "queued"


async def test_an_enqueue_cancelled_while_it_hands_the_run_off_finishes_the_hand_off(
    store_backend: Backend,
) -> None:
    agent = _agent()
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        await store.setup()
        held = _Held(store, "hand_off")
        await _cancelled_once(
            lambda: system.enqueue(agent, "o1", execution_id="e1", queue="mail", key="k1", priority=3), held
        )
        held.undo()
        assert held.finished == ["e1"]
        found = await system.status("e1")
        # In its queue, with its key: the hand-off itself was written, not only a release.
        assert (found.status, found.queue, found.key) == ("queued", "mail", "k1")
        assert await _free(store_backend, "e1")


async def test_an_enqueue_cancelled_while_it_releases_a_run_it_could_not_hand_off_finishes_the_release(
    store_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sweep_module, "_RELEASE_TIMEOUT", BOUND)
    agent = _agent()
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        await store.setup()
        hung = _Held(store, "hand_off", hang=True)  # given up after its bound
        held = _Held(store, "unlock")
        await _cancelled_once(lambda: system.enqueue(agent, "o1", execution_id="e2"), held)
        hung.undo()
        held.undo()
        assert hung.entered.is_set() and hung.finished == []
        assert held.finished == ["e2"]
        assert await _free(store_backend, "e2")  # released: any sweep of the fleet can take it


async def _timed_cancel(call: Callable[[], Awaitable[object]], hung: _Held) -> float:
    """Cancel ``call`` once ``hung`` was entered; the seconds from that entry to the caller's end."""
    with anyio.fail_after(LIMIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await hung.entered.wait()
            tg.cancel_scope.cancel()
    return anyio.current_time() - hung.at


async def test_a_cancelled_sweep_waits_for_a_hung_release_its_bound_only(
    store_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sweep_module, "_RELEASE_TIMEOUT", BOUND)
    async with store_backend.open() as store:
        await _queued_for_another_version(store)
        async with ActorSystem(store, runners=[_agent("2")]) as system:
            hung = _Held(store, "unlock", hang=True)
            took = await _timed_cancel(lambda: system.sweep(), hung)
            hung.undo()
            # Given its bound despite the cancel (shielded), and given up after it.
            assert BOUND * 0.9 <= took < BOUND + 1.0, took


async def test_a_cancelled_enqueue_waits_for_a_hung_store_two_bounds_only(
    store_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hand-off hangs, then the release meant to replace it hangs too: each is given its bound."""
    monkeypatch.setattr(sweep_module, "_RELEASE_TIMEOUT", BOUND)
    agent = _agent()
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        await store.setup()
        hung = _Held(store, "hand_off", hang=True)
        also = _Held(store, "unlock", hang=True)
        took = await _timed_cancel(lambda: system.enqueue(agent, "o1", execution_id="e3"), hung)
        hung.undo()
        also.undo()
        assert also.entered.is_set()
        assert 2 * BOUND * 0.9 <= took < 2 * BOUND + 1.0, took


async def test_a_sweep_whose_release_write_was_cut_off_releases_the_run_at_its_next_sweep(
    store_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store's write of a take's release hangs past its bound: the run may still name this
    process, so no other process can take it, and this process lacks its runner version. The
    process's next sweep takes it again and releases it, for a worker of that version."""
    monkeypatch.setattr(sweep_module, "_RELEASE_TIMEOUT", BOUND)
    async with store_backend.open() as store:
        await _queued_for_another_version(store)
        async with ActorSystem(store, runners=[_agent("2")]) as system:
            # the run is let go in memory first; its row is written by the store's ownership dialect
            hung = _Held(store._owner_rows, "release_row", hang=True)  # type: ignore[attr-defined]
            await _timed_cancel(lambda: system.sweep(), hung)
            hung.undo()
            assert not await _free(store_backend, "q1")
            assert await system.sweep() == 0  # taken again, not driven, released
            assert await _free(store_backend, "q1")


async def test_an_enqueue_whose_hand_off_write_was_cut_off_is_driven_by_its_next_sweep(
    store_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store's write of an enqueue's hand-off hangs past its bound: whether the run is in its
    queue is unknown and it may still name this process, so the process's next sweep takes it."""
    monkeypatch.setattr(sweep_module, "_RELEASE_TIMEOUT", BOUND)
    agent = _agent()
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        await store.setup()
        # the run is let go in memory first; its row is written by the store's ownership dialect
        hung = _Held(store._owner_rows, "hand_off_row", hang=True)  # type: ignore[attr-defined]
        await _timed_cancel(lambda: system.enqueue(agent, "o1", execution_id="e4"), hung)
        hung.undo()
        assert not await _free(store_backend, "e4")
        assert await system.sweep() == 1
        assert (await system.ref("e4").result(timeout=LIMIT)).status == "completed"
