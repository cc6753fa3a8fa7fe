"""An actor's own tasks (``runs_tasks``, ``ctx.start_task``): the actor takes messages while its
task works, the task reports back through the mailbox, a passivating actor waits for its tasks, a
stop cuts them at its bound, a task's failure crashes the actor, and a task cut before it ran leaves
nothing counted that would keep the restarted actor from retiring. Both anyio backends."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from actors import Actor, ActorContext, ActorSystem, Restart

pytestmark = pytest.mark.anyio

LIMIT = 5.0


class Worker(Actor):
    """Starts a task per ``"work"`` message; the task waits for ``go`` and reports ``"done"``.
    Every other message is recorded as it comes."""

    runs_tasks = True

    def __init__(self) -> None:
        self.go = anyio.Event()
        self.seen: list[str] = []
        self.cancelled = False
        self.reported = anyio.Event()

    async def receive(self, ctx: ActorContext, message: Any) -> None:
        self.seen.append(message)
        if message == "work":
            ctx.start_task(self._work, ctx)
        elif message == "done":
            self.reported.set()
        elif message == "retire":
            ctx.passivate()

    async def _work(self, ctx: ActorContext) -> None:
        try:
            await self.go.wait()
        except anyio.get_cancelled_exc_class():
            self.cancelled = True
            raise
        await ctx.self.send("done")


async def test_the_actor_takes_messages_while_its_task_works_and_hears_from_it() -> None:
    with anyio.fail_after(LIMIT):
        async with ActorSystem() as system:
            worker = Worker()
            ref = await system.start(worker)
            await ref.send("work")
            for i in range(3):
                await ref.send(f"ping {i}")
            while len(worker.seen) < 4:  # noqa: ASYNC110 (the actor records as it takes them)
                await anyio.sleep(0.001)
            assert worker.seen == ["work", "ping 0", "ping 1", "ping 2"]  # none waited for the task
            worker.go.set()
            await worker.reported.wait()
            assert worker.seen[-1] == "done"


async def test_a_passivating_actor_retires_only_once_its_tasks_ended() -> None:
    with anyio.fail_after(LIMIT):
        async with ActorSystem() as system:
            worker = Worker()
            ref = await system.runtime.deliver("w", lambda: worker, "work")
            await ref.send("retire")
            await anyio.sleep(0.05)
            assert ref.alive  # its task still works
            worker.go.set()
            await worker.reported.wait()  # the task's report is taken, then the actor retires
            with anyio.fail_after(1):
                while ref.alive:  # noqa: ASYNC110 (no event for an actor's retirement)
                    await anyio.sleep(0.005)
            assert not worker.cancelled


async def test_a_stop_cuts_a_task_at_its_bound() -> None:
    with anyio.fail_after(LIMIT):
        async with ActorSystem() as system:
            worker = Worker()
            ref = await system.start(worker)
            await ref.send("work")
            await anyio.sleep(0.01)
            began = anyio.current_time()
            await ref.stop(timeout=0.1)
            assert worker.cancelled
            assert anyio.current_time() - began < 1.0
            assert not ref.alive


async def test_an_actor_without_runs_tasks_cannot_start_one() -> None:
    failure: list[BaseException] = []

    class Plain(Actor):
        async def receive(self, ctx: ActorContext, message: Any) -> None:
            try:
                ctx.start_task(anyio.sleep, 0)
            except RuntimeError as error:
                failure.append(error)

    with anyio.fail_after(LIMIT):
        async with ActorSystem() as system:
            ref = await system.start(Plain())
            await ref.ask("go", timeout=1)
    assert len(failure) == 1
    assert "runs_tasks = True" in str(failure[0])


async def test_a_task_that_raises_crashes_its_actor() -> None:
    starts: list[int] = []

    class Failing(Actor):
        runs_tasks = True

        async def on_start(self, ctx: ActorContext) -> None:
            starts.append(1)

        async def receive(self, ctx: ActorContext, message: Any) -> None:
            ctx.start_task(self._fail)

        async def _fail(self) -> None:
            raise ValueError("the task broke")

    with anyio.fail_after(LIMIT):
        async with ActorSystem() as system:
            ref = await system.start(Failing())  # permanent: restarted after the crash
            await ref.send("go")
            while len(starts) < 2:  # noqa: ASYNC110 (no event for a restart)
                await anyio.sleep(0.005)
    assert starts == [1, 1]


class CrashesAfterStarting(Actor):
    """Starts a task and crashes in the same handler: the task is cancelled before it first runs."""

    runs_tasks = True

    async def receive(self, ctx: ActorContext, message: Any) -> None:
        if message == "start and crash":
            ctx.start_task(anyio.sleep_forever)
            raise RuntimeError("crashed right after starting a task")
        if message == "retire":
            ctx.passivate()


async def test_a_task_cancelled_before_it_ran_does_not_keep_the_restarted_actor_from_retiring() -> None:
    with anyio.fail_after(LIMIT):
        async with ActorSystem() as system:
            actor = CrashesAfterStarting()
            ref = await system.start(actor)  # permanent: restarted in place, same ref
            await ref.send("start and crash")
            await ref.send("retire")  # taken by the restarted actor
            with anyio.fail_after(1):
                while ref.alive:  # noqa: ASYNC110 (no event for an actor's retirement)
                    await anyio.sleep(0.005)


class CleansUpShielded(Actor):
    """A task whose clean-up is shielded; the actor crashes while the task is inside it."""

    runs_tasks = True

    def __init__(self) -> None:
        self.inside = anyio.Event()
        self.cleaned = False

    async def receive(self, ctx: ActorContext, message: Any) -> None:
        if message == "work":
            ctx.start_task(self._work)
        elif message == "crash":
            raise RuntimeError("crashed while its task cleans up")

    async def _work(self) -> None:
        with anyio.CancelScope(shield=True):
            self.inside.set()
            await anyio.sleep(0.1)
            self.cleaned = True


async def test_cancelling_the_tasks_of_an_ended_actor_spares_their_shielded_clean_up() -> None:
    with anyio.fail_after(LIMIT):
        async with ActorSystem() as system:
            actor = CleansUpShielded()
            ref = await system.start(actor, restart=Restart.TEMPORARY)
            await ref.send("work")
            await actor.inside.wait()
            await ref.send("crash")
            with anyio.fail_after(1):
                while ref.alive:  # noqa: ASYNC110 (no event for an actor's exit)
                    await anyio.sleep(0.005)
            assert actor.cleaned
