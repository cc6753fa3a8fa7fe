"""The fleet: a durable queue, the recovery sweep, and the hand-off of an approval.

Ownership is the store's (``stores._owners``): a live activation owns its run through its process's
liveness lock, and a run whose owner died, or that was handed to the fleet, is an orphan the store
lists without reading the resting runs. Here:

* :meth:`FleetWorker.enqueue` writes a run's first row as this process, as a spawn does (the level's
  opening), then hands the run to its queue without starting an actor for it; a
  run released mid-step is handed to the fleet (the store records it with no owner), and any sweep
  takes it. (A crash between the two leaves the run owned by a dead
  owner: an orphan too.)
* :meth:`FleetWorker.sweep` takes each orphan it has the runner for and drives it from its newest row, as
  ``system.resume(id)`` would, through the run's actor (so a live activation in this process is never
  entered twice). A run whose newest row is a resting row (its owner died after writing it) only has
  its stale ownership dropped. A run whose runner, by name and version, this process lacks is left
  alone, nothing written (``docs/versions.md``), for a worker that has it. A run recovered ``max_recoveries`` times without a new step ends with
  a failed marker instead. Racing sweepers are safe: taking a run is one conditional write in the
  store, and the unique ``(execution_id, seq)`` refuses a second writer in any case.
* :meth:`FleetWorker.serve` sweeps until cancelled, at most ``concurrency`` runs at once, woken by
  PostgreSQL's ``LISTEN``/``NOTIFY`` when work is handed off and by polling every ``poll`` seconds.
* A store error never stops a sweep or ``serve``: ``serve`` logs a WARNING and looks again with
  backoff (at most :data:`_LONGEST_BACKOFF` seconds apart) until the store answers, while the
  store reconnects. A run this process let go in an outage (abandoned after ``store_outage_grace``,
  or whose take or release failed) may still name this process as its owner, so no other sweep
  lists it: this process's sweeps take it again themselves.
* :meth:`FleetWorker.claim` claims a pause without a runner: the ``resume`` row with the decision, then the
  run released, so handed to the fleet, whose sweep finishes it.

Flow control is the store's (``stores._queues``): a run is enqueued into a queue with a key and a
priority, and a sweep admits the runs it takes one by one under their queue's fleet-wide limits
(``._admission``) before it drives them; ``serve(queues=...)`` gives those limits.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Awaitable, Callable, Sequence

import anyio

from stores import (
    DEFAULT_QUEUE,
    HITL_PAUSE,
    INTERRUPTED,
    RECOVER,
    RESUME,
    WAIT,
    AlreadyResumed,
    OwnedStore,
    PendingInterrupt,
    Queue,
    RunExists,
    RunNotFound,
    Store,
    StoreError,
    check_enqueue,
    row_state,
)

from .._core import tether_logger
from ..models import Message
from ._admission import admit
from ._agent import Agent
from ._engine import level_of
from ._errors import RunnerNotFound, held_elsewhere, nothing_to_claim
from ._messages import Recover, Resume
from ._owned import owned
from ._runlog import RunLog, StepLog
from ._runs import Runs
from ._schedules import start_due
from ._timers import Timers
from ._trace import caller_traceparent
from ._versions import version_of
from .topologies import Runner

__all__ = ["DEFAULT_MAX_RECOVERIES", "FleetWorker"]

#: How many recoveries without a new step a run gets before the sweep gives up on it.
DEFAULT_MAX_RECOVERIES = 5

_log = tether_logger()
#: The decision an expired pause gets.
_EXPIRED = Resume(approved=False, metadata={"expired": True})
#: Bound on releasing a run after writing it (shielded; seconds).
_RELEASE_TIMEOUT = 5.0
#: The first and the longest pause of ``serve`` between two looks at a store that fails (seconds).
_FIRST_BACKOFF = 0.1
_LONGEST_BACKOFF = 2.0
#: How many runs waiting for a runner this process lacks it remembers (then it starts over).
_WAIT_BOUND = 10_000


def _fleet_store(store: Store) -> OwnedStore:
    """The store as an :class:`~stores.OwnedStore`; a store that is not cannot serve a fleet."""
    found = owned(store)
    if found is None:
        raise TypeError(f"{store!r} does not record run ownership, so it cannot serve a fleet")
    return found


class FleetWorker:
    """This process's part in the fleet: the queue, sweep, serve and claim of an
    :class:`~actors.ActorSystem` (it delegates here)."""

    def __init__(self, runs: Runs, store: Callable[[], Awaitable[Store]]) -> None:
        self._runs = runs
        self._store = store
        self.max_recoveries = DEFAULT_MAX_RECOVERIES
        #: Runs this process let go in a store outage: its own sweeps take them again.
        self._retake = runs.let_go
        #: Orphans whose runner (name, version) this process lacks: left alone, and not counted
        #: against a sweep's room, until a runner of theirs is here.
        self._wait: dict[str, tuple[str, str | None]] = {}
        #: Wakes this process's resting runs at their time (armed by each rest with a time).
        self.timers = Timers(store, runs.background, self._wake_due)
        runs.on_rest = self.timers.arm

    async def _wake_due(self, store: Store, limit: int) -> int:
        """Start the wake of each due run this process can drive (not waiting for it); how many."""
        due = await self._due(store, limit)
        for execution_id, _ in due:
            try:
                await self._runs.wake(execution_id)
            except (AlreadyResumed, RunnerNotFound, RunNotFound):
                continue
        return len(due)

    # -- the queue --------------------------------------------------------------------------------

    async def enqueue(
        self,
        runner: Runner,
        input: str | Sequence[Message],
        *,
        execution_id: str | None = None,
        queue: str = DEFAULT_QUEUE,
        key: str | None = None,
        priority: int = 0,
    ) -> str:
        """Write the run's first row and leave the run in ``queue`` for any process of the fleet to
        take, under the queue's limits (``key`` is what ``per_key`` counts by; higher ``priority``
        first, then oldest). The row is the one a spawn writes (the level's opening); no actor
        starts for the run here.

        The runner is an :class:`~actors.Agent` (a Swarm or a Supervisor starts with ``spawn``)."""
        if not isinstance(runner, Agent):
            raise TypeError(f"enqueue takes an Agent runner, not {type(runner).__name__}; spawn it instead")
        check_enqueue(queue, key, priority)
        run_id, messages = self._runs.first_messages(runner, input, execution_id)
        store = _fleet_store(await self._store())
        if not await store.try_lock(run_id):
            raise RunExists(f"run {run_id!r} is owned by a live process")
        handed = handing = False
        try:
            rows = RunLog(
                store,
                run_id,
                runner=runner.name,
                log=StepLog(execution_id=run_id, runner=runner.name),
                grace=self._runs.outage_grace,
                version=runner.version,
                fingerprint=runner.fingerprint,
            )
            rows.traceparent = caller_traceparent()  # the run's trace starts under the caller's span
            # Written as a spawn writes it (the level's opening); then no actor starts here, the run
            # goes to its queue. Not shielded: a caller cancelled meanwhile leaves the run released.
            await level_of(runner, rows, runner.label, runner).opening(messages, queued=True)
            with anyio.CancelScope(shield=True), anyio.move_on_after(_RELEASE_TIMEOUT):
                handing = True
                await store.hand_off(run_id, queue, key, priority)  # into its queue
                handed = True
        finally:  # released mid-step, the run is handed to the fleet
            if not handed:
                released = False
                with anyio.CancelScope(shield=True), anyio.move_on_after(_RELEASE_TIMEOUT):
                    try:
                        await store.unlock(run_id)
                        released = True
                    finally:
                        if handing or not released:  # it may still name this process: its sweeps take it
                            self._retake.add(run_id)
        return run_id

    async def claim(self, execution_id: str, resume: Resume) -> PendingInterrupt:
        """Claim the run's pause with ``resume`` and hand the run to the fleet (no runner needed).

        Exactly one claimer wins; the others get ``AlreadyResumed``. ``RunNotFound`` for no rows.
        """
        if not isinstance(resume, Resume):
            raise TypeError(f"a claim takes a Resume, not {type(resume).__name__}")
        decision = resume.to_dict()
        store = _fleet_store(await self._store())
        entry = await store.reentry(execution_id)
        step = entry.step
        if step.step_type != HITL_PAUSE or step.status != INTERRUPTED or entry.newest.step_type == RESUME:
            raise nothing_to_claim(execution_id, step)
        if not await store.try_lock(execution_id):
            raise held_elsewhere(execution_id, AlreadyResumed)
        try:
            rows = RunLog(
                store,
                execution_id,
                runner=entry.newest.runner,
                log=StepLog(execution_id=execution_id),
                version=version_of(entry.newest) or version_of(step),
            )
            rows.start_at(entry.newest.seq + 1)
            rows.carry_on(entry.newest)  # the run's usage total and trace go on past the claim
            pending: PendingInterrupt = await store.claim(rows.bookkeeping(RESUME, step, decision))
        finally:  # the run, now mid-step, is handed to the fleet
            with anyio.CancelScope(shield=True), anyio.move_on_after(_RELEASE_TIMEOUT):
                await store.unlock(execution_id)
        return pending

    # -- the sweep --------------------------------------------------------------------------------

    async def sweep(self, *, limit: int) -> int:
        """Take every run that needs an owner (at most ``limit``) and drive each until it pauses,
        completes or fails; returns how many were taken."""
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"limit must be an int of at least 1, not {limit!r}")
        store = _fleet_store(await self._store())
        taken = 0

        async def take(execution_id: str) -> None:
            nonlocal taken
            if await self._take(store, execution_id):
                taken += 1

        async def wake(execution_id: str, seq: int) -> None:
            nonlocal taken
            if await self._wake(store, execution_id, seq):
                taken += 1

        # What to take is read before any take starts: a store error while reading is raised as
        # itself (not in a task group's exception group) when no run is held here yet.
        await self._scheduled(store, limit)
        expired = await self._expire(store, limit)
        admitted: list[str] = []
        if len(expired) < limit:
            room = limit - len(expired)
            listing = functools.partial(self._orphans, store, room, set(expired))
            admitted, _ = await admit(store, listing, room, self._runs.is_live, self._retake.add)
        room = limit - len(expired) - len(admitted)
        try:
            due = await self._due(store, room) if room > 0 else []
        except StoreError:
            if not (expired or admitted):
                raise
            due = []  # the runs held here are driven; a later sweep wakes the due ones
        async with anyio.create_task_group() as tg:
            # A pause claimed here is then an orphan too: each run is taken once.
            for execution_id in dict.fromkeys([*expired, *admitted]):
                tg.start_soon(take, execution_id)
            for execution_id, seq in due:
                tg.start_soon(wake, execution_id, seq)
        return taken

    async def _scheduled(self, store: Store, limit: int) -> list[str]:
        """Start the run of each due schedule tick this process has the runner for (enqueued:
        taken by a sweep like any queued run); see ``_schedules``."""

        async def start(runner: str, input: str, execution_id: str) -> None:
            found = self._runs.runner_for(runner, execution_id)
            await self.enqueue(found, input, execution_id=execution_id)

        return await start_due(store, limit, start, lambda name: self._runs.has_runner(name, None))

    async def _due(self, store: Store, limit: int) -> list[tuple[str, int]]:
        """Up to ``limit`` resting runs due for a wake that this process can drive (an index range;
        a wait that is no longer its run's newest row is forgotten on the way)."""
        found = []
        for execution_id, seq in await store.due_waits(limit):
            if self._runs.is_live(execution_id):
                continue
            newest = await store.latest(execution_id)
            if newest is None or newest.seq != seq or newest.step_type != WAIT:
                await store.settle_wait(execution_id, seq)
                continue
            version = version_of(newest)
            if not self._runs.has_runner(newest.runner, version):
                self._waiting(execution_id, newest.runner, version)
                continue
            found.append((execution_id, seq))
        return found

    async def _wake(self, store: Store, execution_id: str, seq: int) -> bool:
        """Wake one due run and drive it until it rests again; ``False`` when another waker took it."""
        try:
            await (await self._runs.wake(execution_id)).result()
        except (AlreadyResumed, RunnerNotFound, RunNotFound):
            return False
        except StoreError as error:  # the wait stays due: a later sweep wakes it
            _log.warning("wake let go in a store outage", execution_id=execution_id, error=repr(error))
            return False
        except Exception as error:  # the run's own failure is in its rows; this sweep goes on
            _log.warning("sweep could not wake a run", execution_id=execution_id, error=repr(error))
            return False
        await store.settle_wait(execution_id, seq)  # a later wait of the run has its own seq
        return True

    async def _orphans(
        self,
        store: OwnedStore,
        limit: int,
        busy: set[str],
        full: list[str] | None = None,
        full_keys: list[tuple[str, str]] | None = None,
    ) -> list[str]:
        """Up to ``limit`` orphans to take, not ``busy`` ones (those waiting for a runner this
        process lacks are skipped without a read) nor the queued runs of ``full`` queues and
        ``full_keys``, then the runs this process let go in an outage (even one waiting for a runner:
        it may still name this process, so only this process can take it and release it again)."""
        skip = self._still_waiting() | busy
        listed = await store.orphans(limit + len(skip), full=full or (), full_keys=full_keys or ())
        found = [eid for eid in listed if eid not in skip]
        return list(dict.fromkeys([*found[:limit], *(e for e in sorted(self._retake) if e not in busy)]))[
            :limit
        ]

    def _waiting(self, execution_id: str, runner: str, version: str | None) -> None:
        """The run's runner (``runner`` of ``version``) is not here: leave the run alone (nothing is
        written), and say so once for a version this process does not have."""
        if execution_id in self._wait:
            return
        if len(self._wait) >= _WAIT_BOUND:
            self._wait.clear()  # runs finished elsewhere are forgotten; the others are met again
        self._wait[execution_id] = (runner, version)
        if version is not None:
            _log.warning(
                "run waits for its runner version",
                execution_id=execution_id,
                runner=runner,
                version=version,
                hint="a worker with that version takes it (docs/versions.md)",
            )

    def _still_waiting(self) -> set[str]:
        """The runs of :meth:`_waiting` whose runner this process still lacks."""
        for execution_id, (runner, version) in list(self._wait.items()):
            if self._runs.has_runner(runner, version):
                del self._wait[execution_id]
        return set(self._wait)

    async def _expire(self, store: OwnedStore, limit: int) -> list[str]:
        """Claim each expired pause as a refusal (exactly once, like any claim); the runs claimed
        here, which are then the fleet's to drive."""
        claimed = []
        for execution_id in await store.expired(limit):
            try:
                await self.claim(execution_id, _EXPIRED)
            except (AlreadyResumed, RunNotFound):
                continue  # another sweep or a human decided first
            _log.info("pause expired", execution_id=execution_id)
            claimed.append(execution_id)
        return claimed

    async def serve(
        self, *, concurrency: int, poll: float, shutdown_grace: float, queues: Sequence[Queue] = ()
    ) -> None:
        """Sweep until cancelled, at most ``concurrency`` runs at once; new work wakes it at once on
        PostgreSQL (``LISTEN``/``NOTIFY``), and it looks every ``poll`` seconds in any case (sooner
        when a queue's rate admits a start). ``queues`` gives the fleet those queues' limits.
        Cancelling it stops taking work and gives the runs it took ``shutdown_grace`` seconds to
        reach their next row; then each is handed to the fleet (stopped, nothing written, its
        ownership released) for any worker's sweep to go on with."""
        if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
            raise ValueError(f"concurrency must be an int of at least 1, not {concurrency!r}")
        if not poll > 0:
            raise ValueError(f"poll must be a positive number of seconds, not {poll!r}")
        if not shutdown_grace >= 0:
            raise ValueError(f"shutdown_grace must be a number of seconds >= 0, not {shutdown_grace!r}")
        queues = _checked_queues(queues)
        store = _fleet_store(await self._store())
        if queues:
            await store.declare_queues(queues)
        retry_in: float | None = None
        in_flight: set[str] = set()
        driving: set[str] = set()  # the runs taken by this serve and still driven
        wake: anyio.Event  # a fresh one before each look
        backoff = _FIRST_BACKOFF
        failing = False

        def woken() -> object:
            wake.set()
            return None

        listening = True  # until the store says it sends no notice of work
        stop: Callable[[], Awaitable[None]] | None = None
        try:
            async with anyio.create_task_group() as tg:

                async def drive(execution_id: str, seq: int | None = None) -> None:
                    try:
                        if seq is None:
                            await self._take(store, execution_id)
                        else:
                            await self._wake(store, execution_id, seq)
                    finally:
                        in_flight.discard(execution_id)
                        wake.set()
                    driving.discard(execution_id)  # not reached when serve is cancelled

                while True:
                    wake = anyio.Event()
                    room = concurrency - len(in_flight)
                    try:
                        if listening and stop is None:
                            stop = await store.listen_for_work(woken)
                            listening = stop is not None
                        await self._scheduled(store, concurrency)
                        if room > 0:
                            await self._expire(store, room)
                            admitted, retry_in = await admit(
                                store,
                                functools.partial(self._orphans, store, room, in_flight),
                                room,
                                self._runs.is_live,
                                self._retake.add,
                            )
                            for execution_id in admitted:
                                in_flight.add(execution_id)
                                driving.add(execution_id)
                                tg.start_soon(drive, execution_id)
                        room = concurrency - len(in_flight)
                        if room > 0:
                            for execution_id, seq in await self._due(store, room):
                                if execution_id not in in_flight:
                                    in_flight.add(execution_id)
                                    driving.add(execution_id)
                                    tg.start_soon(drive, execution_id, seq)
                    except StoreError as error:  # the store reconnects meanwhile; serving goes on
                        if not failing:
                            _log.warning("store unusable: serve looks again", error=repr(error))
                        failing = True
                        await anyio.sleep(backoff)
                        backoff = min(backoff * 2, _LONGEST_BACKOFF)
                        continue
                    if failing:
                        _log.warning("store usable again: serve goes on")
                        failing, backoff = False, _FIRST_BACKOFF
                    with anyio.move_on_after(poll if retry_in is None else min(poll, retry_in)):
                        await wake.wait()
        finally:
            with anyio.CancelScope(shield=True):
                if driving:
                    await self._runs.release(sorted(driving), grace=shutdown_grace)
                    _log.info("runs handed to the fleet", runs=sorted(driving))
                if stop is not None:
                    await stop()

    async def _take(self, store: OwnedStore, execution_id: str) -> bool:
        """Take one orphan and drive it; ``False`` when it was not taken (another process has it, this
        system lacks its runner, or its newest row is a resting row). An admitted take that no
        activation went on with is released after."""
        try:
            return await self._drive(store, execution_id)
        finally:
            released = False
            with anyio.CancelScope(shield=True), anyio.move_on_after(_RELEASE_TIMEOUT):
                with contextlib.suppress(StoreError):
                    await store.untake(execution_id)
                    released = True
            if released:
                self._retake.discard(execution_id)
            else:  # failed or cut off: it may still name this process, whose sweeps take it again
                self._retake.add(execution_id)

    async def _drive(self, store: OwnedStore, execution_id: str) -> bool:
        if self._runs.is_live(execution_id):
            return False
        try:
            newest = await store.latest(execution_id)
            if newest is None or row_state(newest.step_type, newest.status) != "unfinished":
                # Its owner died after its last row, or before its first: drop the stale ownership.
                if await store.try_lock(execution_id):
                    await store.unlock(execution_id)
                self._retake.discard(execution_id)
                return False
            version = version_of(newest)
            if not self._runs.has_runner(newest.runner, version):
                self._waiting(execution_id, newest.runner, version)
                return False
            runner = self._runs.runner_for(newest.runner, execution_id, version)
            recoveries = await _recoveries(store, execution_id)
            if recoveries >= self.max_recoveries:
                error = f"gave up after {recoveries} recoveries at {newest.node_id}"
                await (await self._runs.give_up(runner, execution_id, error)).result()
                _log.error("run given up", execution_id=execution_id, error=error)
                if await store.try_lock(execution_id):
                    await store.unlock(execution_id)
                return True
            ref = await self._runs.send(execution_id, Recover())
            await ref.result()
        except (AlreadyResumed, RunnerNotFound, RunNotFound):
            self._retake.discard(execution_id)
            return False
        except StoreError as error:  # a store outage: the run is recovered once the store is back
            self._retake.add(execution_id)
            _log.warning("run let go in a store outage", execution_id=execution_id, error=repr(error))
            return False
        except Exception as error:  # the run's own failure is in its rows; this sweep goes on
            _log.warning("sweep could not take a run", execution_id=execution_id, error=repr(error))
            self._retake.discard(execution_id)
            return False
        self._retake.discard(execution_id)
        return True


def _checked_queues(queues: object) -> list[Queue]:
    """``serve``'s queues, each a :class:`~actors.Queue` and named once."""
    if isinstance(queues, Queue | str) or not isinstance(queues, Sequence):
        raise TypeError(f"queues must be a sequence of Queue, not {type(queues).__name__}")
    names: set[str] = set()
    for queue in queues:
        if not isinstance(queue, Queue):
            raise TypeError(f"queues must hold Queue objects, not {type(queue).__name__}")
        if queue.name in names:
            raise ValueError(f"queue {queue.name!r} is given twice")
        names.add(queue.name)
    return list(queues)


async def _recoveries(store: Store, execution_id: str) -> int:
    """How many ``recover`` rows end the run's log: recoveries since its last new step."""
    count = 0
    with contextlib.suppress(RunNotFound):
        for row in reversed(await store.history(execution_id)):
            if row.step_type != RECOVER:
                break
            count += 1
    return count
