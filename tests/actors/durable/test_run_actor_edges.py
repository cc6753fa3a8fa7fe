"""The edges of a run's activation: a cancel before its first step, a stray message, its release.

- A ``Cancel`` sent while a run is still taking its ownership lock (no step in flight yet to cancel)
  waits in the run's mailbox and stops the run before its first step, with the cancel's reason.
- Anything but a run request delivered to a run's actor mid-run fails the run's request with a
  ``TypeError`` that names the run and what was sent.
- The release of a run's ownership is shielded: a run whose actor is stopped mid-step is handed to
  the fleet at once, free for another process while this one lives on. And it is bounded: a release
  that hangs after a cancel does not hold the cancelled run's answer back past its bound.
- A stop of the actor after the run has ended (here: while it answers a ``Cancel`` queued behind
  the one that ended it) logs no "run stopped mid-step" warning: there is nothing to resume.

Every test is time-bounded.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
from _tool_agents import tool_agent
from conftest import Backend

from actors import Actor, ActorStopped, ActorSystem, Agent, Cancel, Recover
from actors.lowlevel import run_actor_module
from stores import RUN_END, Checkpoint, Store

pytestmark = pytest.mark.anyio

#: Bound on one test's body (seconds); a hang fails instead of stalling the suite.
LIMIT = 10.0
#: Bound on a wait that the behaviour under test makes prompt.
BOUND = 2.0
#: How long a hung store call lasts: past any bound here, yet short enough that a caller held for
#: all of it fails the test rather than hangs it.
HANG = 3.0


def blocked_until_cancelled() -> tuple[Agent, anyio.Event]:
    """An agent whose tool signals ``entered``, then waits until its run is cancelled or stopped."""
    entered, never = anyio.Event(), anyio.Event()

    async def body() -> str:
        entered.set()
        await never.wait()
        return "never"

    return tool_agent(body), entered


def held(store: Store, name: str, entered: anyio.Event, go: anyio.Event) -> None:
    """Hold the store's method ``name`` (on this instance only): each call sets ``entered`` and
    waits for ``go`` before it runs."""
    real: Callable[..., Awaitable[Any]] = getattr(store, name)

    async def call(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        await go.wait()
        return await real(*args, **kwargs)

    setattr(store, name, call)


def hung(store: Store, name: str, entered: anyio.Event) -> None:
    """Make the store's method ``name`` (on this instance only) hang: each call sets ``entered``,
    waits :data:`HANG` seconds and fails (a store that no longer answers)."""

    async def call(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        await anyio.sleep(HANG)
        raise TimeoutError(f"{name} hung")

    setattr(store, name, call)


def no_activation() -> Actor:
    raise AssertionError("the run's actor is live: the delivery must not activate another one")


async def test_a_cancel_sent_while_the_run_takes_its_lock_stops_it_before_its_first_step(
    store_backend: Backend,
) -> None:
    first_pass = anyio.Event()
    calls: list[str] = []

    async def body() -> str:
        calls.append("work")
        if not first_pass.is_set():
            first_pass.set()
            await anyio.Event().wait()  # the first activation is stopped here, mid-step
        return "worked"

    agent = tool_agent(body)
    with anyio.fail_after(LIMIT):
        async with store_backend.open() as store:
            async with ActorSystem(store, runners=[agent]) as system:
                ref = await system.spawn(agent, "go")
                eid = ref.execution_id
                await first_pass.wait()
                actor = system.runtime.registry.lookup(eid)
                assert actor is not None
                await actor.stop(timeout=0.01)  # the run is left mid-step, recoverable
                # Its recovery is held while it takes the run's ownership lock.
                taking, go = anyio.Event(), anyio.Event()
                held(store, "try_lock", taking, go)
                recovery = await system.send(eid, Recover())
                await taking.wait()
                cancel = await system.send(eid, Cancel("operator"))
                go.set()
                with anyio.fail_after(BOUND):
                    recovered = await recovery.result()
                    cancelled = await cancel.result()
            rows = await store.history(eid)
    assert recovered.status == "failed" and recovered.error == "cancelled: operator"
    assert (cancelled.status, cancelled.error) == ("failed", "cancelled: operator")
    assert calls == ["work"]  # the recovery ran no step: its tool did not run again
    assert [row.step_type for row in rows][-2:] == ["recover", RUN_END]


async def test_a_stray_message_to_a_run_mid_run_fails_it_with_a_type_error_naming_it(
    store_backend: Backend,
) -> None:
    entered, go = anyio.Event(), anyio.Event()

    async def body() -> str:
        entered.set()
        await go.wait()
        return "worked"

    agent = tool_agent(body)
    with anyio.fail_after(LIMIT):
        async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
            ref = await system.spawn(agent, "go", execution_id="stray-1")
            await entered.wait()
            actor = system.runtime.registry.lookup("stray-1")
            assert actor is not None
            taken = actor.inspect().received
            await system.runtime.deliver("stray-1", no_activation, "hello")
            with anyio.fail_after(BOUND):  # the actor takes it while the tool runs
                while actor.inspect().received == taken:  # noqa: ASYNC110 (no event for a take)
                    await anyio.sleep(0.001)
            go.set()  # the tool's step ends; the run stops before its next step
            with pytest.raises(TypeError) as raised:
                await ref.result(timeout=BOUND)
    assert str(raised.value) == "run 'stray-1' takes run requests, not str"


async def test_a_run_whose_actor_is_stopped_mid_step_is_free_for_another_process_at_once(
    store_backend: Backend,
) -> None:
    agent, entered = blocked_until_cancelled()
    with anyio.fail_after(LIMIT):
        async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
            ref = await system.spawn(agent, "go", execution_id="rel-1")
            await entered.wait()
            actor = system.runtime.registry.lookup("rel-1")
            assert actor is not None
            await actor.stop(timeout=0.01)  # cancels the step in flight; the release still runs
            with pytest.raises(ActorStopped, match="stays recoverable"):
                await ref.result(timeout=BOUND)
            # This process still runs and holds its liveness lock, yet the run is handed to the
            # fleet: another process can take it at once.
            other = store_backend.open()
            await other.setup()
            try:
                assert await other.try_lock("rel-1")
                await other.unlock("rel-1")
            finally:
                await other.close()


async def test_a_hung_release_of_a_cancelled_run_is_cut_at_its_bound(
    store_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_actor_module, "_UNLOCK_TIMEOUT", 0.2)
    agent, entered = blocked_until_cancelled()
    releasing = anyio.Event()
    with anyio.fail_after(LIMIT):
        async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
            ref = await system.spawn(agent, "go", execution_id="rel-2")
            await entered.wait()
            hung(store, "unlock", releasing)
            with anyio.fail_after(BOUND):  # the release's bound, not the hung release
                cancelled = await system.cancel("rel-2", "operator")
                result = await ref.result()
            assert releasing.is_set()
    assert (cancelled.status, cancelled.error) == ("failed", "cancelled: operator")
    assert (result.status, result.error) == ("failed", "cancelled: operator")


async def test_a_stop_after_the_run_ended_logs_no_mid_step_warning(
    store_backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tether")
    agent, entered = blocked_until_cancelled()
    reading, never = anyio.Event(), anyio.Event()
    with anyio.fail_after(LIMIT):
        async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
            ref = await system.spawn(agent, "go", execution_id="end-1")
            await entered.wait()
            real = store.latest

            async def latest(execution_id: str) -> Checkpoint | None:
                row = await real(execution_id)
                if row is not None and row.step_type == RUN_END:
                    reading.set()  # the queued Cancel reads the ended run: held here
                    await never.wait()
                return row

            store.latest = latest  # type: ignore[method-assign]
            # The step in flight is cancelled at once and writes the marker; this Cancel queues
            # behind it, and the actor is stopped while it answers it.
            cancel = await system.send("end-1", Cancel("operator"))
            await reading.wait()
            actor = system.runtime.registry.lookup("end-1")
            assert actor is not None
            await actor.stop(timeout=0.01)
            result = await ref.result(timeout=BOUND)
            with pytest.raises(ActorStopped):
                await cancel.result(timeout=BOUND)
    assert (result.status, result.error) == ("failed", "cancelled: operator")
    warnings = [r.getMessage() for r in caplog.records if r.name == "tether" and r.levelno == logging.WARNING]
    assert not [w for w in warnings if "run stopped mid-step" in w], warnings
