"""Durable runs on an :class:`~actors.ActorSystem`: spawn, send, resume, fork, cancel, and reads.

Each run is a virtual actor keyed by its ``execution_id``: a message for a run with no actor in
this process activates one from the store, with the runner named in the run's rows. :class:`Runs`
is given what it needs (the actor runtime, a store provider, the runners); it never sees the
``ActorSystem`` itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

import anyio

from stores import (
    WAIT,
    WAIT_NAME,
    AlreadyResumed,
    Checkpoint,
    PendingInterrupt,
    RunExists,
    RunNotFound,
    Store,
    check_execution_id,
    new_id,
    parse_path,
)

from ..models import Message, ModelReply
from ._agent import Agent
from ._errors import RunnerNotFound, RunnerVersionMismatch, not_in_store
from ._follow import EventHub, EventStream
from ._messages import (
    Cancel,
    GiveUp,
    Recover,
    Reply,
    Request,
    Resume,
    ResumeRun,
    RunMessage,
    Signal,
    Spawn,
    SpawnFork,
    Wake,
)
from ._owned import owned
from ._queries import run_status
from ._result import RunResult, resting_result
from ._run_actor import Opening, RunActor
from ._runlog import DEFAULT_OUTAGE_GRACE
from ._shutdown import report_stop
from ._tool_watch import ToolWatch
from ._versions import version_of
from .topologies import Runner, Supervisor, Swarm

if TYPE_CHECKING:
    from .._core import ActorRuntime

__all__ = ["RunRef", "Runs"]

#: Bound on the clean-up of runs stopped mid-step by :meth:`Runs.release` (their ownership release).
_RELEASE_CLEANUP = 10.0
#: How often a ref waiting for a run another process drives reads its newest row (first, at most).
_FOLLOW_POLL: Final = (0.02, 0.5)


class RunRef:
    """A handle on one run: send it messages, wait for how it stands, follow its events.

    ``start`` is the first row of the activation the ref stands for (0 for a spawn or a fork, the
    run's next row for a send), where ``events()`` begins by default; ``None`` for a ref on a run
    this process did not start (``system.ref(id)``): its events begin at the run's next row.
    """

    __slots__ = ("_reply", "_runs", "_start", "execution_id")

    def __init__(
        self, runs: Runs, execution_id: str, reply: Reply | None = None, *, start: int | None = None
    ) -> None:
        self._runs = runs
        self.execution_id = execution_id
        self._reply = reply
        self._start = start

    def __repr__(self) -> str:
        return f"<RunRef {self.execution_id}>"

    async def send(self, message: Resume | Recover | Cancel | Signal) -> RunRef:
        """Deliver ``message`` to the run (see :meth:`ActorSystem.send`); returns a ref for its outcome."""
        return await self._runs.send(self.execution_id, message)

    def events(self, *, since: int | None = None, tokens: bool = False) -> EventStream:
        """The run's events (:mod:`actors.events`) as an async iterator (also an async context
        manager that stops it); see ``docs/events.md``.

        Durable events are read from the rows (any process can replay them): ``since=N`` yields
        those of the stored rows from ``seq`` N on, then follows the run live; ``since=None``
        starts where this ref's activation starts (see the class), or at the run's next row. It
        ends at the first pause or run end it yields that is not older than the run's newest row
        when it is first read. ``tokens=True`` adds the :class:`~actors.events.TextDelta` of
        models streaming in this process (a slow reader loses those first, never durable events).
        A bad ``since`` raises ``ValueError``; a run with no rows ``RunNotFound`` when read.
        """
        return self._runs.events(self.execution_id, since=since, tokens=tokens, start=self._start)

    async def result(self, *, timeout: float | None = None) -> RunResult:
        """Wait until the run pauses, completes or fails, and say how it stands.

        Refusals (a lost claim, a finished run, a used id) are raised here. ``timeout`` bounds the
        wait (``TimeoutError``); without one the wait is as long as the run's steps (a model call,
        a tool), which is the caller's choice. A ref of ``system.ref(id)`` first waits for the
        message this process delivered to the run last, and for a run another live process drives,
        until it rests; then it reads the store.
        """
        if self._reply is None:
            return await self._runs.settled(self.execution_id, timeout=timeout)
        with anyio.fail_after(timeout) if timeout is not None else contextlib.nullcontext():
            await self._reply.done.wait()
        if self._reply.error is not None:
            raise self._reply.error
        assert self._reply.result is not None
        return self._reply.result


class Runs:
    """The durable-run half of an :class:`ActorSystem` (it delegates here).

    ``runtime`` hosts the run actors (keyed by ``execution_id``); ``store`` returns the store, opening
    it on first use; ``runners`` are the runners this process can resume by name.

    A runner is identified by its name and its ``version``: two objects with one name and version
    are two builds of one runner (a web handler may build a fresh ``Agent`` per request), and two
    versions of one name are kept side by side (old runs finish on old code, new runs start on new
    code). ``spawn`` runs with the object it is given; a resume takes the runner of the run's name
    and version given in ``runners``, else the one most recently spawned with them in this process.
    A run with no version resumes on any build of its name (an unversioned one first).
    """

    def __init__(
        self, runtime: ActorRuntime, store: Callable[[], Awaitable[Store]], runners: Iterable[Runner]
    ) -> None:
        self._runtime = runtime
        self._store = store
        self._hub = EventHub()
        # Given in ``runners`` (they win a resume), and the newest spawned, by name and version.
        self._given: dict[tuple[str, str | None], Runner] = {
            _key(_checked_runner(runner)): runner for runner in runners
        }
        self._spawned: dict[tuple[str, str | None], Runner] = {}
        self._watched: set[int] = set()  # the stores whose lock loss this system listens for
        #: How long a run's writes ride out a store outage before it is abandoned (seconds).
        self.outage_grace = DEFAULT_OUTAGE_GRACE
        #: Runs whose ownership release did not reach the store (an outage): they may still name
        #: this process as their owner, so no other sweep lists them; this process's sweeps do.
        self.let_go: set[str] = set()
        # The newest reply of a message delivered to each run while it is unsettled (``ref()``).
        self._inflight: dict[str, Reply] = {}
        #: Told of each run that rests here, and its time if it has one (the process's timers,
        #: ``_timers``, which then also hear of signals sent to it from other processes).
        self.on_rest: Callable[[datetime | None], None] | None = None
        #: The system's watch on its tool calls for a cancel written by another process.
        self.tool_watch = ToolWatch(self.background)

    def background(self, fn: Callable[[], Coroutine[Any, Any, None]]) -> bool:
        """Run ``fn()`` as a task of this system until it closes (``False``: it is not open)."""
        return self._runtime.background(fn)

    # -- writes -----------------------------------------------------------------------------------

    async def spawn(
        self, runner: Runner, input: str | Sequence[Message], *, execution_id: str | None = None
    ) -> RunRef:
        """Start a durable run with ``runner``; raises ``RunExists`` when ``execution_id`` already has rows."""
        run_id, messages = self.first_messages(runner, input, execution_id)
        registry = self._runtime.registry
        if self._runtime.lookup(run_id) is not None or registry.reserved(run_id):
            raise RunExists(f"run {run_id!r} is already live in this process")
        store = await self._store()
        spawn = Spawn([m.to_dict() for m in messages])
        # An actor of the id on its way out (a request for a run with no rows) is waited for.
        if not await registry.reserve_when_free(run_id):
            raise RunExists(f"run {run_id!r} is already live in this process")
        # The id is held while this task takes the run and writes its first row itself (see
        # ``Opening``), then the actor starts with the rest: no turn of the loop before the row.
        reply = Reply()
        actor = self._actor(store, runner, run_id, Opening(messages, reply))
        request = Request(spawn, reply)
        try:
            await actor.open(
                lambda: registry.activate_reserved(
                    run_id, lambda: actor, request, bindings={"execution_id": run_id}
                )
            )
        finally:
            registry.unreserve(run_id)  # when it was not activated
        self._track(run_id, reply)  # the run is this spawn's (a refused one never replaces it)
        return await self._started(run_id, reply)

    def first_messages(
        self, runner: Runner, input: str | Sequence[Message], execution_id: str | None
    ) -> tuple[str, list[Message]]:
        """A new run's id and first messages (the runner's instructions, then ``input``), checked
        before anything is written; the runner becomes the one a resume by its name takes."""
        _checked_runner(runner)
        run_id = check_execution_id(execution_id) if execution_id is not None else new_id()
        given = _checked_input(input)
        self._spawned[_key(runner)] = runner
        messages: list[Message] = []
        if runner.instructions:
            messages.append(Message("system", runner.instructions))
        messages.extend(given)
        return run_id, messages

    def adopt(self, runner: Runner) -> None:
        """Make ``runner`` the one this system resumes its name with (as a spawn does)."""
        self._spawned[_key(_checked_runner(runner))] = runner

    def runner_for(self, name: str, execution_id: str, version: str | None = None) -> Runner:
        """The runner that drives ``execution_id`` (recorded under ``version``) here:
        ``RunnerNotFound`` if this system has none of that name, ``RunnerVersionMismatch`` if it
        has none of that version."""
        return self._runner(name, execution_id, version)

    def has_runner(self, name: str, version: str | None) -> bool:
        """Whether a run of ``name`` recorded under ``version`` has its runner here (no error built)."""
        return self._find(name, version) is not None

    def is_live(self, execution_id: str) -> bool:
        """Whether an activation of the run is in flight in this process."""
        actor = self._actor_of(execution_id)
        return actor is not None and actor.busy

    def driving(self) -> list[RunActor]:
        """The run actors of this process whose activation is in flight (a snapshot)."""
        found = self._runtime.live_keyed()
        return [actor for _, actor in found if isinstance(actor, RunActor) and actor.busy]

    def _actor_of(self, execution_id: str) -> RunActor | None:
        """The run's actor in this process, from the runtime's registry (the one record of live
        runs): from its launch until its task exits, passivating included; ``None`` while a spawn
        only holds the id (its caller writes the first row) or when no actor is live."""
        actor = self._runtime.live(execution_id)
        return actor if isinstance(actor, RunActor) else None

    async def give_up(self, runner: Runner, execution_id: str, error: str) -> RunRef:
        """End a run that was recovered too often: a failed marker with ``error`` (the sweep's)."""
        store = await self._store()
        return RunRef(self, execution_id, await self._deliver(store, runner, execution_id, GiveUp(error)))

    async def signal(self, execution_id: str, name: str, payload: Any = None) -> None:
        """Append a signal to the run's inbox; returns once it is committed (see ``ActorSystem.signal``)."""
        store = await self._store()
        await store.signal(execution_id, name, payload)
        # The sender wakes a run waiting for this signal when it has its runner (else a serving
        # worker or the run's own process does): its wake is one activation, refused to any other.
        newest = await store.latest(execution_id)
        if (
            newest is not None
            and newest.step_type == WAIT
            and newest.interrupt_context.get(WAIT_NAME) == name
            and self.has_runner(newest.runner, version_of(newest))
            and not self.is_live(execution_id)
        ):
            await self.wake(execution_id)

    async def wake(self, execution_id: str) -> RunRef:
        """Wake the run if it rests at a ``wait`` that is due (see ``Level.wake``): its tool runs
        again here; a run not waiting, or not due, is left as it is."""
        store = await self._store()
        newest = await store.latest(execution_id)
        if newest is None:
            raise not_in_store(execution_id)
        runner = self._runner(newest.runner, execution_id, version_of(newest))
        reply = await self._deliver(store, runner, execution_id, Wake())
        return RunRef(self, execution_id, reply, start=newest.seq + 1)

    async def send(self, execution_id: str, message: Resume | Recover | Cancel | Signal) -> RunRef:
        """Deliver ``message`` to the run, activating its actor from the store if needed.

        Raises ``RunNotFound`` for a run with no rows and ``RunnerNotFound`` when no runner of the
        stored name was given to this system; other refusals surface from ``RunRef.result()``.
        """
        run_message: RunMessage
        if isinstance(message, Signal):
            await self.signal(execution_id, message.name, message.payload)
            return RunRef(self, execution_id)
        match message:
            case Resume():
                run_message = ResumeRun(message)
            case Recover() | Cancel():
                run_message = message
            case _:
                raise TypeError(
                    f"a run takes a Resume, Recover, Cancel or Signal, not {type(message).__name__}"
                )
        store = await self._store()
        newest = await store.latest(execution_id)
        if newest is None:
            raise not_in_store(execution_id)
        live = self._actor_of(execution_id)
        if isinstance(run_message, Cancel):
            runner = self._runner_or_stand_in(newest)  # a cancel needs no runner
        else:
            runner = self._runner(newest.runner, execution_id, version_of(newest))
        if live is not None and live.busy and not isinstance(run_message, Cancel):
            # One live owner: a resume of a run that is running here is refused before it runs anything.
            refused = Reply()
            refused.settle(None, AlreadyResumed(f"run {execution_id!r} is running in this process"))
            return RunRef(self, execution_id, refused, start=newest.seq + 1)
        reply = await self._deliver(store, runner, execution_id, run_message)
        return RunRef(self, execution_id, reply, start=newest.seq + 1)

    async def resume(
        self, execution_id: str, resume: Resume | None = None, *, timeout: float | None = None
    ) -> RunResult:
        """Send and wait: claim the pause with ``resume``, or recover from a crash without one."""
        ref = await self.send(execution_id, resume if resume is not None else Recover())
        return await ref.result(timeout=timeout)

    async def fork(
        self, execution_id: str, *, checkpoint_id: str | None = None, input: str | None = None
    ) -> RunRef:
        """A new run from a checkpoint of ``execution_id`` (default: its newest step)."""
        store = await self._store()
        base = await store.forkable(execution_id, checkpoint_id)
        runner = self._runner(base.runner, execution_id, version_of(base))
        appended = Message("user", input).to_dict() if input is not None else None
        run_id = new_id()
        reply = await self._deliver(store, runner, run_id, SpawnFork(base, appended))
        return await self._started(run_id, reply)

    async def cancel(self, execution_id: str, reason: str = "cancelled") -> RunResult:
        """End the run with a failed marker (reason ``reason``); a paused run loses its pending row."""
        ref = await self.send(execution_id, Cancel(reason))
        return await ref.result()

    # -- reads ------------------------------------------------------------------------------------

    async def history(self, execution_id: str) -> list[Checkpoint]:
        """Every row of the run in ``seq`` order; ``RunNotFound`` for an unknown run."""
        rows = await (await self._store()).history(execution_id)
        if not rows:
            raise not_in_store(execution_id)
        return rows

    async def pending(
        self, *, limit: int | None = None, after: PendingInterrupt | None = None
    ) -> list[PendingInterrupt]:
        """Paused runs' pending interrupts, newest first (a page of ``limit`` after ``after``)."""
        return await (await self._store()).pending(limit=limit, after=after)

    async def prune(self, older_than: timedelta) -> int:
        """Delete rows older than ``older_than`` by rule 10 of ``docs/durability.md``; returns rows deleted."""
        return await (await self._store()).prune(older_than)

    def ref(self, execution_id: str) -> RunRef:
        """A handle on a run of any process: ``result()`` and ``events()`` read the store."""
        if not isinstance(execution_id, str) or not execution_id:
            raise TypeError(f"ref() takes an execution_id (a non-empty str), not {execution_id!r}")
        return RunRef(self, execution_id)

    def events(self, execution_id: str, *, since: int | None, tokens: bool, start: int | None) -> EventStream:
        """The event stream behind :meth:`RunRef.events`."""
        return EventStream(self._store, self._hub, execution_id, since=since, tokens=tokens, start=start)

    async def settled(self, execution_id: str, *, timeout: float | None = None) -> RunResult:
        """How the run stands at its next resting row (for a ref of ``ref()``): a message this
        process delivered to it is waited for first, then a run that someone is to drive (a live
        process owns it, or it was handed to the fleet: queued, or approved without its runner) is
        read again (every 20 ms, growing to 0.5 s) until it rests. An orphaned run (its owner died
        mid-step, nobody drives it) raises ``RunNotFound`` naming where it stopped; ``timeout``
        bounds the whole wait."""
        delay = _FOLLOW_POLL[0]
        with anyio.fail_after(timeout) if timeout is not None else contextlib.nullcontext():
            while True:
                reply = self._inflight.get(execution_id)
                if reply is not None and not reply.done.is_set():
                    await reply.done.wait()
                store = await self._store()
                newest = await store.latest(execution_id)
                if newest is None:
                    raise not_in_store(execution_id)
                result = await resting_result(store, newest)
                if result is not None:
                    return result
                orphaned = not self.is_live(execution_id) and (
                    (await run_status(store, execution_id)).status == "orphaned"
                )
                later = self._inflight.get(execution_id)
                if orphaned and (later is None or later.done.is_set()):
                    raise RunNotFound(
                        f"run {execution_id!r} has not paused or ended and no process drives it: it "
                        f"stopped at {newest.node_id!r} ({newest.step_type}); resume it, or let a "
                        "worker's sweep take it"
                    )
                await anyio.sleep(delay)
                delay = min(2 * delay, _FOLLOW_POLL[1])

    # -- plumbing ---------------------------------------------------------------------------------

    def _find(self, name: str, version: str | None) -> Runner | None:
        """The runner of ``name`` and ``version`` (given first, then spawned); for ``version``
        None, any build of the name, an unversioned one first, else the newest given or spawned."""
        found = self._given.get((name, version)) or self._spawned.get((name, version))
        if found is not None or version is not None:
            return found
        for known in (self._given, self._spawned):
            for (named, _), runner in reversed(known.items()):
                if named == name:
                    return runner
        return None

    def _runner(self, name: str, execution_id: str, version: str | None = None) -> Runner:
        """The runner a resume of ``execution_id`` (recorded under ``version``) uses, or
        ``RunnerNotFound``/``RunnerVersionMismatch`` naming what this system has."""
        runner = self._find(name, version)
        if runner is not None:
            return runner
        keys = [*self._given, *self._spawned]
        versions = list(dict.fromkeys(v for named, v in keys if named == name))
        if version is not None and versions:
            raise RunnerVersionMismatch(name, version, execution_id=execution_id, available=versions)
        raise RunnerNotFound(name, execution_id=execution_id, registered=sorted({named for named, _ in keys}))

    def _runner_or_stand_in(self, newest: Checkpoint) -> Runner:
        """The run's runner for a cancel (of any version: the marker keeps the run's own); without
        one, a stand-in that only writes the marker as the run's root (the stored name and root
        path segment): a cancel needs no runner."""
        found = self._find(newest.runner, version_of(newest)) or self._find(newest.runner, None)
        if found is not None:
            return found
        try:
            kind, name = parse_path(newest.agent_path)[0] if newest.agent_path else ("agent", newest.runner)
        except ValueError:
            kind, name = "agent", newest.runner
        return _StandIn(newest.runner, f"{kind}:{name}")

    def _track(self, execution_id: str, reply: Reply) -> None:
        """Remember ``reply`` as the run's newest (``ref()`` waits on it) until it is settled: a
        run that rests or ends leaves nothing of it here."""
        if reply.done.is_set():
            return
        self._inflight[execution_id] = reply

        def settled() -> None:
            if self._inflight.get(execution_id) is reply:
                del self._inflight[execution_id]

        reply.on_settle = settled

    async def report_stop(self, bound: float) -> None:
        """Before a stop: a WARNING per run live here inside a sync tool (which the stop cannot
        interrupt), naming how long the stop waits for it and how to resume it."""
        busy = self.driving()
        if busy:
            await report_stop(busy[0].store, [(actor.execution_id, actor.runner) for actor in busy], bound)

    async def release(self, execution_ids: Iterable[str], *, grace: float) -> None:
        """Hand these runs (those live here) to the fleet: each stops before its next step, and one
        still mid-step after ``grace`` seconds stops there; nothing is written for them. Waits (polling
        every 10 ms) at most ``grace`` plus the bound of their clean-up."""
        actors = [actor for eid in execution_ids if (actor := self._actor_of(eid)) is not None]
        for actor in actors:
            actor.release()
        with anyio.move_on_after(grace):
            while any(actor.busy for actor in actors):  # noqa: ASYNC110
                await anyio.sleep(0.01)
        for actor in actors:
            actor.release(now=True)
        with anyio.move_on_after(_RELEASE_CLEANUP):
            while any(actor.busy for actor in actors):  # noqa: ASYNC110
                await anyio.sleep(0.01)

    def _abandon(self, execution_ids: list[str]) -> None:
        """The store lost its liveness lock: stop every run of these that is live here, writing nothing."""
        for execution_id in execution_ids:
            live = self._actor_of(execution_id)
            if live is not None:
                live.abandon()

    def _watch(self, store: Store) -> None:
        """Listen for the store losing its liveness lock (once per store; a store without
        ownership has none to lose)."""
        found = owned(store)
        if found is not None and id(store) not in self._watched:
            self._watched.add(id(store))
            found.on_ownership_lost(self._abandon)

    def _actor(
        self, store: Store, runner: Runner, execution_id: str, opening: Opening | None = None
    ) -> RunActor:
        """A new actor for the run (this system listens for ``store`` losing its liveness lock)."""
        self._watch(store)
        return RunActor(
            store=store,
            runner=runner,
            execution_id=execution_id,
            hub=self._hub,
            opening=opening,
            grace=self.outage_grace,
            let_go=self.let_go,
            on_rest=self.on_rest,
            tool_watch=self.tool_watch,
        )

    async def _deliver(self, store: Store, runner: Runner, execution_id: str, message: RunMessage) -> Reply:
        reply = Reply()
        self._track(execution_id, reply)
        await self._runtime.deliver(
            execution_id,
            lambda: self._actor(store, runner, execution_id),
            Request(message, reply),
            bindings={"execution_id": execution_id},
        )
        return reply

    async def _started(self, execution_id: str, reply: Reply) -> RunRef:
        """Wait until the new run owns its id and wrote its first row (bounded by that one write)."""
        if not reply.started.is_set():
            await reply.started.wait()
        if reply.error is not None and reply.done.is_set():
            raise reply.error
        return RunRef(self, execution_id, reply, start=0)


class _NoModel:
    """The model of a cancel's stand-in runner: it is never asked."""

    async def complete(self, *args: Any, **kwargs: Any) -> ModelReply:
        raise RuntimeError("a stand-in runner only writes a cancel's marker")


class _StandIn(Agent):
    """Stands in for a runner this process was not given, for a cancel: no tools, no model call,
    the run's root path segment as its label, so the marker reads as the run's root wrote it."""

    __slots__ = ("_root",)

    def __init__(self, name: str, root: str) -> None:
        super().__init__(name, _NoModel())
        self._root = root

    @property
    def label(self) -> str:
        return self._root


def _checked_runner(runner: object) -> Runner:
    if not isinstance(runner, Agent | Swarm | Supervisor):
        raise TypeError(f"a runner is an Agent, a Swarm or a Supervisor, not {type(runner).__name__}")
    return runner


def _key(runner: Runner) -> tuple[str, str | None]:
    """How this system files a runner: by its name and its version."""
    return runner.name, runner.version


def _checked_input(input: object) -> list[Message]:
    """A spawn's input as messages: a str is the user's message; a list or tuple must hold only
    :class:`Message` objects. Anything else raises ``TypeError`` naming the type."""
    if isinstance(input, str):
        return [Message("user", input)]
    if isinstance(input, list | tuple):
        for i, item in enumerate(input):
            if not isinstance(item, Message):
                raise TypeError(
                    f"spawn input is a str or a list of Message; item {i} of this "
                    f"{type(input).__name__} is a {type(item).__name__}"
                )
        return list(input)
    raise TypeError(f"spawn input is a str or a list of Message, not {type(input).__name__}")
