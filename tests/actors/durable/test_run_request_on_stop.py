"""A run request that its actor never handles still answers: it fails with ``ActorStopped``.

When a run actor's mailbox closes (``ref.stop()``, the system shutting down) the requests still
queued in it are failed, so ``spawn`` (waiting on ``reply.started``) and ``RunRef.result()`` (waiting
on ``reply.done``) wake with the error instead of waiting for ever. A message delivered to an actor
that no longer accepts gets ``ActorStopped`` from the delivery itself. Every test is time-bounded.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from actors import Actor, ActorContext, ActorStopped, ActorSystem, Agent, Cancel, Recover, RunRef, tool
from actors.lowlevel import Reply, Request
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import RUN_END, SQLiteStore, Store

pytestmark = pytest.mark.anyio

#: Bound on one test's body (seconds); a hang fails instead of stalling the suite.
LIMIT = 20.0
#: Bound on a wait that the fix makes prompt (it hangs without the fix).
BOUND = 2.0


@asynccontextmanager
async def opened(path: Path) -> AsyncIterator[Store]:
    """A fresh SQLite store at ``path``, set up, closed afterwards."""
    store = SQLiteStore(str(path))
    await store.setup()
    try:
        yield store
    finally:
        await store.close()


def blocking_agent(*, cleanup: float = 0.0) -> tuple[Agent, anyio.Event, anyio.Event]:
    """An agent whose tool signals ``entered``, waits until it is cancelled, signals ``cut`` and
    then takes ``cleanup`` seconds (shielded) before it ends."""
    entered, cut = anyio.Event(), anyio.Event()

    @tool
    async def wait() -> str:
        """Wait until cancelled."""
        entered.set()
        try:
            await anyio.sleep_forever()  # the test cancels the run or stops its actor
        finally:
            cut.set()
            with anyio.CancelScope(shield=True):
                await anyio.sleep(cleanup)
        return "released"  # pragma: no cover

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return "answer"
        return ModelReply(tool_calls=[ToolCall("wait", {})])

    return Agent("blocker", FunctionModel(model), tools=[wait]), entered, cut


def no_activation() -> Actor:
    raise AssertionError("the run's actor is live: the delivery must not activate another one")


async def test_a_request_queued_behind_a_busy_run_fails_when_its_actor_stops(sqlite_path: Path) -> None:
    agent, entered, _ = blocking_agent()
    with anyio.fail_after(LIMIT):
        async with opened(sqlite_path) as store, ActorSystem(store, runners=[agent]) as system:
            run = await system.spawn(agent, "go")
            await entered.wait()
            actor = system.runtime.registry.lookup(run.execution_id)
            assert actor is not None
            queued = Reply()
            await system.runtime.deliver(run.execution_id, no_activation, Request(Recover(), queued))
            # The actor takes it while the step runs and holds it until the activation ends.
            with anyio.fail_after(BOUND):
                while actor.inspect().queued:  # noqa: ASYNC110 (no event for the mailbox's reads)
                    await anyio.sleep(0.001)
            assert not queued.done.is_set()

            await actor.stop(timeout=0.1)
            with anyio.fail_after(BOUND):
                await queued.done.wait()
            assert queued.started.is_set()
            assert isinstance(queued.error, ActorStopped) and queued.result is None
            # The request in flight was stopped too; the run stays recoverable.
            with pytest.raises(ActorStopped, match="stays recoverable"):
                await run.result(timeout=BOUND)


@pytest.mark.parametrize("cleanup", [0.0, 0.2], ids=["prompt-clean-up", "clean-up-past-the-shutdown"])
async def test_a_cancel_sent_while_a_step_runs_is_carried_out_before_the_system_shuts_down(
    sqlite_path: Path, cleanup: float
) -> None:
    """The actor takes the Cancel while the step runs and cuts the step. Whether the step's end
    reaches the actor before leaving the block stops it, or only after the stop closed its mailbox
    (a clean-up that outlasts the shutdown), the run gets its failed marker and the Cancel its
    answer: no recovery resumes the cancelled run."""
    agent, entered, cut = blocking_agent(cleanup=cleanup)
    with anyio.fail_after(LIMIT):
        async with opened(sqlite_path) as store:
            async with ActorSystem(store, runners=[agent]) as system:
                run = await system.spawn(agent, "go")
                await entered.wait()
                cancel = await system.send(run.execution_id, Cancel("operator"))
                await cut.wait()
            with anyio.fail_after(BOUND):
                answered = await cancel.result()
            cancelled = await run.result(timeout=BOUND)
            assert cancelled.status == "failed" and cancelled.error is not None
            assert "operator" in cancelled.error
            assert (answered.status, answered.error) == (cancelled.status, cancelled.error)
            async with ActorSystem(store, runners=[agent]) as later:
                stored = await later.ref(run.execution_id).result(timeout=BOUND)
            assert (stored.status, stored.error) == (cancelled.status, cancelled.error)


async def test_spawns_racing_the_system_shutdown_return_or_raise_promptly(sqlite_path: Path) -> None:
    """Spawns started while the system block is left: each raises ``ActorStopped`` or returns a ref
    whose result is settled; none waits for a reply that will never come.

    The block is left after 0..7 scheduler turns so that some spawns hit each window: refused before
    activation, queued in a mailbox that closes, or handled before the stop.
    """
    agent = Agent("quick", FunctionModel(lambda messages: "done"))
    outcomes: list[str] = []

    async def attempt(system: ActorSystem) -> None:
        try:
            with anyio.fail_after(BOUND):
                try:
                    ref = await system.spawn(agent, "hi")
                except ActorStopped:
                    outcomes.append("refused")
                    return
                try:
                    outcomes.append((await ref.result()).status)
                except ActorStopped:
                    outcomes.append("stopped")
        except TimeoutError:
            outcomes.append("hung")

    with anyio.fail_after(LIMIT):
        async with opened(sqlite_path) as store:
            for turns in range(8):
                async with anyio.create_task_group() as tg:
                    async with ActorSystem(store, runners=[agent]) as system:
                        for _ in range(5):
                            tg.start_soon(attempt, system)
                        for _ in range(turns):
                            await anyio.lowlevel.checkpoint()
    counts = Counter(outcomes)
    assert sum(counts.values()) == 40
    assert "hung" not in counts, counts
    assert set(counts) <= {"refused", "stopped", "completed"}, counts


async def test_a_delivery_to_an_actor_that_stopped_accepting_raises_actor_stopped() -> None:
    """During shutdown the actor closes its mailbox, then runs ``on_stop``: a delivery in between
    waits for the exit (bounded by ``on_stop``) and raises ``ActorStopped``, as the system is closing."""
    stopping = anyio.Event()

    class SlowStop(Actor):
        async def receive(self, ctx: ActorContext, message: object) -> None:
            pass

        async def on_stop(self, ctx: ActorContext) -> None:
            stopping.set()
            await anyio.sleep(0.2)  # bounded by the actor's stop_timeout

    outcomes: list[str] = []

    async def late_delivery(system: ActorSystem) -> None:
        await stopping.wait()
        with anyio.fail_after(BOUND):
            try:
                await system.runtime.deliver("k", SlowStop, "hello")
            except ActorStopped:
                outcomes.append("stopped")
            else:
                outcomes.append("delivered")

    with anyio.fail_after(LIMIT):
        async with anyio.create_task_group() as tg:
            async with ActorSystem() as system:
                actor = await system.runtime.get_or_activate("k", SlowStop)
                tg.start_soon(late_delivery, system)
            assert not actor.alive
    assert outcomes == ["stopped"]


@pytest.mark.parametrize("turns", range(4))
async def test_a_cancel_sent_as_the_system_shuts_down_is_carried_out_in_every_order(
    sqlite_path: Path, turns: int
) -> None:
    """The block is left 0..3 scheduler turns after the Cancel is sent to a run whose actor waits
    for messages while its tool runs: the actor takes the Cancel before the stop closes its
    mailbox, and the cut step's end reaches it, or is still queued as the mailbox closes, or comes
    after. In every order the Cancel is answered with the run's end, which the store holds: never
    a cut step with the run left recoverable."""
    with anyio.fail_after(LIMIT):
        async with opened(sqlite_path) as store:
            for i in range(8):
                agent, entered, _ = blocking_agent()
                async with ActorSystem(store, runners=[agent]) as system:
                    run = await system.spawn(agent, "go", execution_id=f"run-{turns}-{i}")
                    await entered.wait()
                    cancel = await system.send(run.execution_id, Cancel("operator"))
                    for _ in range(turns):
                        await anyio.lowlevel.checkpoint()
                await assert_ended_by_the_cancel(store, run, cancel)


async def test_a_cancel_whose_cut_step_outlasts_the_stop_still_ends_the_run(sqlite_path: Path) -> None:
    """The Cancel cut the step, but the step's clean-up outlasts the actor's stop, which stops
    waiting for it at its bound: the stop writes the failed marker and answers the Cancel with it."""
    agent, entered, cut = blocking_agent(cleanup=2.3)  # past the run actor's stop_timeout of 2 s
    with anyio.fail_after(LIMIT):
        async with opened(sqlite_path) as store, ActorSystem(store, runners=[agent]) as system:
            run = await system.spawn(agent, "go")
            await entered.wait()
            cancel = await system.send(run.execution_id, Cancel("operator"))
            await cut.wait()
            actor = system.runtime.registry.lookup(run.execution_id)
            assert actor is not None
            await actor.stop(timeout=0.1)
            await assert_ended_by_the_cancel(store, run, cancel)


async def assert_ended_by_the_cancel(store: Store, run: RunRef, cancel: RunRef) -> None:
    """The Cancel was answered with the run's failed end, which the run's result and the store hold."""
    answered = await cancel.result(timeout=BOUND)
    assert (answered.status, answered.error) == ("failed", "cancelled: operator")
    ended = await run.result(timeout=BOUND)
    assert (ended.status, ended.error) == (answered.status, answered.error)
    newest = await store.latest(run.execution_id)
    assert newest is not None and newest.step_type == RUN_END
