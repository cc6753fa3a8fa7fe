"""``ActorSystem``: the public entry point, a thin async context manager over :class:`ActorRuntime`.

The only module that sees both halves of the package: it owns the runtime (``actors._core``) and
hands the durable layer (``actors._durable``) what it needs by injection (the runtime, a store
provider, the runners). The store is opened only on first durable use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

import anyio

from ._core import ActorRuntime, ChildSpec, Restart, Supervision, make_spec
from ._durable import DEFAULT_MAX_RECOVERIES, FleetWorker, RunRef, Runs, list_runs, run_status
from ._durable._runlog import DEFAULT_OUTAGE_GRACE
from ._durable._schedules import public, stored
from ._durable._shutdown import SignalWake
from ._replica import ReplicatorLike, kicking

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime, timedelta
    from typing import Self

    from stores import Checkpoint, PendingInterrupt, Queue, Store

    from ._core import Actor, ActorRef, RestartIntensityExceeded
    from ._durable import Cancel, Recover, Resume, Runner, RunResult, RunSummary, Schedule, Signal
    from .models import Message

__all__ = ["ActorSystem"]


class ActorSystem:
    """Owns the supervision root, the registry and (lazily) the store; use it as ``async with``.

    Leaving the block stops every actor (children first, ``on_stop`` shielded and time-bounded) and
    leaves no task behind; so does cancelling the block. When a failure escalates to the root (a
    restart intensity was exceeded there), it is logged, appended to :attr:`escalations`, every actor
    is stopped, the block is cancelled and it raises :class:`RestartIntensityExceeded`.

    ``store_outage_grace`` (seconds, default 60) is how long a run rides out a store it cannot write
    to (a restart, a dropped connection, a writer stalled behind a lock): its write is retried with
    the same row, then the run is abandoned without writing anything more, for a sweep to recover.
    """

    def __init__(
        self,
        store: Store | None = None,
        *,
        runners: Iterable[Runner] = (),
        replicator: object | None = None,
        supervision: Supervision | None = None,
        max_recoveries: int = DEFAULT_MAX_RECOVERIES,
        store_outage_grace: float = DEFAULT_OUTAGE_GRACE,
    ) -> None:
        if (
            not isinstance(store_outage_grace, int | float)
            or isinstance(store_outage_grace, bool)
            or not store_outage_grace >= 0
        ):
            raise ValueError(
                f"store_outage_grace must be a number of seconds >= 0, not {store_outage_grace!r}"
            )
        self.store = store
        self.runners = tuple(runners)
        if replicator is not None and not isinstance(replicator, ReplicatorLike):
            raise TypeError(
                f"a replicator has attach, kick and restore (replication.Replicator), not {replicator!r}"
            )
        self.replicator = replicator
        self._replicated: Store | None = None
        self._runtime = ActorRuntime(self, supervision=supervision)
        self._runs = Runs(self._runtime, self._durable_store, self.runners)
        self._fleet = FleetWorker(self._runs, self._durable_store)
        self._fleet.max_recoveries = max_recoveries
        self._runs.outage_grace = float(store_outage_grace)
        self._owns_store = False
        self._signal_wake = SignalWake()
        self._store_lock: anyio.Lock | None = None

    @property
    def runtime(self) -> ActorRuntime:
        """The runtime core: registry (``get_or_activate``, ``deliver``, ``passivate``) and root."""
        return self._runtime

    @property
    def escalations(self) -> list[RestartIntensityExceeded]:
        """Failures that reached the root of the supervision tree, oldest first."""
        return self._runtime.escalations

    async def __aenter__(self) -> Self:
        await self._runtime.__aenter__()
        self._signal_wake.open()  # Ctrl-C reaches the loop at once, even while a sync tool runs
        if self.replicator is not None:
            try:
                await self._start_replicator(self.replicator)
            except BaseException as exc:
                await self.__aexit__(type(exc), exc, exc.__traceback__)
                raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        try:
            # Said before the stop waits: which runs it waits for, for how long, how to resume them.
            await self._runs.report_stop(self._runtime.shutdown_timeout)
            return await self._runtime.__aexit__(exc_type, exc, tb)
        finally:
            self._signal_wake.close()
            if self._owns_store and self.store is not None:
                await self._close_store()

    async def start(
        self,
        actor: Actor | Callable[[], Actor] | ChildSpec,
        *,
        name: str | None = None,
        restart: Restart = Restart.PERMANENT,
        mailbox_size: int = 1024,
        stop_timeout: float = 2.0,
        bindings: Mapping[str, object] | None = None,
    ) -> ActorRef:
        """Start a plain actor supervised by the system root; return its ref after ``on_start`` ran.

        ``actor`` is an instance (a restart re-runs its hooks on the same object), a zero-argument
        factory (a restart builds a fresh one) or a :class:`ChildSpec`. Raises ``ActorCrashed`` if
        ``on_start`` fails.
        """
        spec = make_spec(
            actor,
            name=name,
            restart=restart,
            mailbox_size=mailbox_size,
            stop_timeout=stop_timeout,
            bindings=bindings,
        )
        return await self._runtime.start(spec)

    # -- durable runs (see actors._durable._runs) ------------------------------------------------------------

    async def spawn(
        self, runner: Runner, input: str | Sequence[Message], *, execution_id: str | None = None
    ) -> RunRef:
        """Start a durable run of ``runner``; returns once the run owns its id and wrote its first row.

        ``execution_id`` defaults to a fresh id; one that already has rows raises ``RunExists``.
        """
        return await self._runs.spawn(runner, input, execution_id=execution_id)

    async def signal(self, execution_id: str, name: str, payload: Any = None) -> None:
        """Append a signal to the run's inbox (durable, ordered) and return once it is committed; no
        runner and no ownership needed, from any process. A ``"message"`` signal with a str payload
        is a user message at the run's next model turn; ``wait_signal(name)`` in a tool takes the
        others. ``RunNotFound`` for a run without rows, ``AlreadyResumed`` for a completed one,
        ``SerializationError`` for a payload outside the JSON rule (checked first); none writes."""
        await self._restore_missing(execution_id)
        await self._runs.signal(execution_id, name, payload)

    async def schedule(
        self,
        name: str,
        runner: Runner,
        input: str,
        *,
        cron: str | None = None,
        every: timedelta | None = None,
        start_at: datetime | None = None,
    ) -> None:
        """Upsert the schedule ``name``: ``runner`` runs ``input`` at each tick of ``cron`` (five
        fields, UTC) or every ``every``, first at ``start_at`` (or the first cron tick from it)
        if given. Serving workers with the runner start exactly one run per tick, id
        ``"<name>@<tick>"``; ticks missed while none served run once (the latest). Redeclaring a
        schedule with the same timing keeps its next tick."""
        schedule = stored(name, runner.name, input, cron=cron, every=every, start_at=start_at)
        self._runs.adopt(runner)
        await (await self._durable_store()).put_schedule(schedule)

    async def unschedule(self, name: str) -> bool:
        """Delete the schedule ``name`` (no tick starts after); whether there was one."""
        return await (await self._durable_store()).delete_schedule(name)

    async def schedules(self) -> list[Schedule]:
        """Every schedule in the store, by name, with its next tick and its latest run."""
        return [public(found) for found in await (await self._durable_store()).list_schedules()]

    async def send(self, execution_id: str, message: Resume | Recover | Cancel | Signal) -> RunRef:
        """Deliver a ``Resume``, ``Recover()``, ``Cancel(reason)`` or ``Signal(name, payload)`` to the
        run, activating it from the store if no actor for it lives here (a ``Signal`` is the same
        delivery as :meth:`signal`, its refusals raised here). ``RunNotFound`` / ``RunnerNotFound``
        are raised here; refusals (a lost claim, a finished run) from ``RunRef.result()``."""
        await self._restore_missing(execution_id)
        return await self._runs.send(execution_id, message)

    async def resume(
        self, execution_id: str, resume: Resume | None = None, *, timeout: float | None = None
    ) -> RunResult:
        """Send and wait. With a ``Resume``: claim the pause. Without: crash recovery from the newest
        row (a paused run raises ``ResumeRequired``)."""
        await self._restore_missing(execution_id)
        return await self._runs.resume(execution_id, resume, timeout=timeout)

    async def fork(
        self, execution_id: str, *, checkpoint_id: str | None = None, input: str | None = None
    ) -> RunRef:
        """A new run (new id) from a checkpoint of ``execution_id`` (default: its newest step);
        ``input`` is appended as the next user message. The original run is not touched."""
        await self._restore_missing(execution_id)
        return await self._runs.fork(execution_id, checkpoint_id=checkpoint_id, input=input)

    async def cancel(self, execution_id: str, reason: str = "cancelled") -> RunResult:
        """End the run with a failed ``run_end`` (``run_reason`` = ``reason``); a paused run's pending
        row goes in the same transaction. A cancelled run can be resumed like any failed run."""
        return await self._runs.cancel(execution_id, reason)

    async def history(self, execution_id: str) -> list[Checkpoint]:
        """Every row of the run, in ``seq`` order."""
        return await self._runs.history(execution_id)

    async def pending(
        self, *, limit: int | None = None, after: PendingInterrupt | None = None
    ) -> list[PendingInterrupt]:
        """The pending interrupts of paused runs, newest first: all of them, or a page of ``limit``
        after ``after`` (the last entry of the previous page)."""
        return await self._runs.pending(limit=limit, after=after)

    # -- the fleet (see actors._durable._sweep) -----------------------------------------------------

    async def enqueue(
        self,
        runner: Runner,
        input: str | Sequence[Message],
        *,
        execution_id: str | None = None,
        queue: str = "default",
        key: str | None = None,
        priority: int = 0,
    ) -> str:
        """Write the run's first row and leave it in ``queue`` for any process of the fleet to take
        (a sweep, under the queue's limits; ``per_key`` counts by ``key``; higher ``priority`` first,
        then oldest); returns its id. ``execution_id`` defaults to a fresh id; a used one raises
        ``RunExists``."""
        return await self._fleet.enqueue(
            runner, input, execution_id=execution_id, queue=queue, key=key, priority=priority
        )

    async def sweep(self, *, limit: int = 100) -> int:
        """Take each run that needs an owner (queued, or orphaned: its owner died) that this system
        has the runner for, and drive it until it pauses, completes or fails; returns how many."""
        return await self._fleet.sweep(limit=limit)

    async def serve(
        self,
        *,
        concurrency: int = 16,
        poll: float = 1.0,
        shutdown_grace: float = 10.0,
        queues: Sequence[Queue] = (),
    ) -> None:
        """Run sweeps until cancelled, at most ``concurrency`` runs at once, woken by new work
        (PostgreSQL LISTEN/NOTIFY) and every ``poll`` seconds. ``queues`` gives the fleet those
        queues' limits (fleet-wide; where workers disagree, a WARNING, and the stricter hold).
        Cancelled, it gives the runs it took ``shutdown_grace`` seconds to reach their next row, then
        hands them to the fleet. A store error never ends it: it logs a WARNING and looks again with
        backoff until the store is back."""
        await self._fleet.serve(
            concurrency=concurrency, poll=poll, shutdown_grace=shutdown_grace, queues=queues
        )

    async def claim(self, execution_id: str, resume: Resume) -> PendingInterrupt:
        """Claim the run's pause with ``resume`` without driving it (no runner needed): the fleet
        finishes the run. Exactly one claimer wins; the others get ``AlreadyResumed``."""
        return await self._fleet.claim(execution_id, resume)

    async def prune(self, older_than: timedelta) -> int:
        """Delete old rows by rule 10 of ``docs/durability.md`` (never a pause or what a resume needs)."""
        return await self._runs.prune(older_than)

    def ref(self, execution_id: str) -> RunRef:
        """A handle on a run this process did not start (or any run): its ``result()`` and
        ``events()`` read the store, so they work for a run owned by another process. ``result()``
        first waits for the run's next resting row when a message this process delivered (a
        ``send``) is in flight or another live process drives the run."""
        return self._runs.ref(execution_id)

    async def status(self, execution_id: str) -> RunSummary:
        """How the run stands (completed, failed, paused, running, orphaned, approved, queued), from
        the store and the ownership locks, for a run of any process; ``RunNotFound`` for an unknown
        run. Reading it takes no lock."""
        return await run_status(await self._durable_store(), execution_id)

    async def runs(
        self,
        *,
        status: str | None = None,
        runner: str | None = None,
        limit: int = 100,
        queue: str | None = None,
    ) -> list[RunSummary]:
        """Up to ``limit`` runs of the store, newest first, optionally of one status, runner and queue."""
        return await list_runs(
            await self._durable_store(), status=status, runner=runner, limit=limit, queue=queue
        )

    async def _durable_store(self) -> Store:
        """The store provider the durable layer is given: the store (through the replicator's
        kicks when one is attached), opened on first durable use."""
        return self._replicated if self._replicated is not None else await self._open_store()

    async def _start_replicator(self, replicator: ReplicatorLike) -> None:
        """Bind the replicator to the store and start it under the root's supervision; from now on
        every durable write kicks it."""
        store = await self._open_store()
        replicator.attach(store)
        await self.start(
            cast("Actor", replicator),
            name="replicator",
            restart=replicator.restart,
            stop_timeout=replicator.stop_timeout,
        )
        self._replicated = kicking(store, replicator.kick)

    async def _restore_missing(self, execution_id: str) -> None:
        """Restore-anywhere: a run this store has no row of is first fetched from the plane."""
        if self.replicator is not None and await (await self._open_store()).latest(execution_id) is None:
            await self.replicator.restore(execution_id)

    async def _open_store(self) -> Store:
        """The store, opening the default ``SQLiteStore("tether.db")`` on first use."""
        if self.store is not None:
            return self.store
        if self._store_lock is None:
            self._store_lock = anyio.Lock()
        async with self._store_lock:
            if self.store is None:
                # Lazy: plain actors never import or open the database.
                stores = importlib.import_module("stores")
                store: Store = stores.SQLiteStore("tether.db")
                await store.setup()
                self.store = store
                self._owns_store = True
        return self.store

    async def _close_store(self) -> None:
        """Close a store this system opened itself (shielded, bounded)."""
        store = self.store
        if store is None:
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(5.0):
            await store.close()
