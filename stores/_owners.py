"""Run ownership, the half both backends share: one liveness lock per store, the owner recorded with the run.

A store takes ONE liveness lock for the life of its owner id (a PostgreSQL session advisory lock on
its lock connection, an open-file-description lock on one byte of SQLite's ``.locks`` file), freed
by the database or the kernel the moment the process dies. Owning a run is a row in ``run_owners``
naming the owner id; taking a run succeeds when the run has no such row, is queued (no owner), or
names an owner whose liveness lock is free (dead, or lost its lock: an owner id is never reused).
So a process owns as many runs as it likes for one lock, and a sweep finds orphans by reading the
owners that hold runs, not every run in the store.

:class:`Ownership` is the bookkeeping: the owner id, which runs this store holds under which id,
and what happens when the lock is lost. Losing it abandons every run held under that id at once:
their listeners are told (the run actors stop them), every later write for them is refused with
:class:`OwnershipLost`, and their ``run_owners`` rows stay (another process takes them over; a
release would leave them unowned and unfindable). The next run taken gets a fresh owner id and lock.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Final, Protocol, TypeVar

import anyio

from ._errors import abandoned_run, check_execution_id, take_unfinished, take_unrecorded
from ._log import LOGGER
from ._model import new_id
from ._queues import Admission, Queue, Work, check_enqueue

__all__ = ["BaseOwnedStore", "OwnerRows", "Ownership"]

#: Bound on taking a run (one statement, shielded so its outcome is always known; seconds).
_TAKE_TIMEOUT: Final = 30.0
#: Pauses between re-checks of a run refused as held by a live owner (seconds); ``None`` ends them.
#: A killed owner's lock is freed a few ms after its process is gone (PostgreSQL: up to ~8 ms
#: measured), so a refusal re-checks within a bounded ~75 ms before it says "held by a live owner".
_TAKE_RECHECKS: Final = (0.005, 0.01, 0.02, 0.04, None)
#: What a listener is told: the ids of the runs just abandoned.
Listener = Callable[[list[str]], object]
T = TypeVar("T")


class Ownership:
    """The runs one store owns, the owner id they are held under, and lock loss.

    ``store`` names the store in log lines and errors (its ``repr``).
    """

    __slots__ = (
        "_abandoned",
        "_listeners",
        "_lost",
        "_store",
        "handed",
        "held",
        "owner",
        "taking",
        "unrecorded",
    )

    def __init__(self, store: object) -> None:
        self._store = store
        self.owner = new_id()
        #: run -> the owner id it was taken under
        self.held: dict[str, str] = {}
        self.taking: set[str] = set()
        #: held runs without their ``run_owners`` row: taken to write it with the run's first row,
        #: or deleted with a resting row (the run's next write records it again, checked)
        self.unrecorded: set[str] = set()
        #: held runs a sweep took under their queue's limits, for the run's next activation here to
        #: go on with (its take is then written already)
        self.handed: set[str] = set()
        self._lost: set[str] = set()  # owner ids whose lock was lost
        self._abandoned: set[str] = set()
        self._listeners: list[Listener] = []

    def begin(self, execution_id: str) -> bool:
        """Start taking the run here; ``False`` if this store holds or is taking it already."""
        if execution_id in self.held or execution_id in self.taking:
            return False
        self.taking.add(execution_id)
        return True

    def end(self, execution_id: str, owner: str | None) -> None:
        """Finish a take: held under ``owner`` if it succeeded, else not at all."""
        self.taking.discard(execution_id)
        if owner is not None:
            self.held[execution_id] = owner

    def release(self, execution_id: str) -> str | None:
        """Forget the run; the owner id whose ``run_owners`` row may be deleted, or ``None`` when the
        run was abandoned (its row stays for whoever takes it over) or not held here."""
        owner = self.held.pop(execution_id, None)
        self._abandoned.discard(execution_id)
        self.handed.discard(execution_id)
        if execution_id in self.unrecorded:
            self.unrecorded.discard(execution_id)
            return None
        if owner is None or owner in self._lost:
            return None
        return owner

    def rode(self, execution_id: str, take: str | None, release: str | None, *, done: bool) -> None:
        """After a write that carried ``take``/``release``: ``done`` if it committed. A write whose
        outcome is unknown (cancelled, failed) leaves the run recorded, so :meth:`BaseOwnedStore.unlock`
        releases whatever row it may have left."""
        if take is not None:
            self.unrecorded.discard(execution_id)
        if release is not None and done and execution_id in self.held:
            self.unrecorded.add(execution_id)

    def carrying(
        self, execution_id: str, resting: bool, write: Callable[[str | None, str | None], Awaitable[T]]
    ) -> Awaitable[T]:
        """``write(take, release)``, the run's write with what it carries of the run's ownership
        in its own transaction (the backend's ``ride``): the owner whose ``run_owners`` row it must
        take (check and record) and the owner whose row it must delete; ``None`` for neither. A
        resting row (``run_end``, a pause, a wait) of a run held here deletes its row in the same
        transaction, so :meth:`BaseOwnedStore.unlock` writes nothing. A write that carries nothing
        is ``write(None, None)`` itself, awaited by the caller with no frame of this one's between.

        It carries the take while the run is held here without its row (:attr:`unrecorded`), the
        release when the row rests the run; nothing for a run not held here, or abandoned."""
        owner = self.held.get(execution_id)
        if owner is None or owner in self._lost:
            return write(None, None)
        take = owner if execution_id in self.unrecorded else None
        release = owner if resting else None
        if take is None and release is None:
            return write(None, None)
        return self._carried(execution_id, take, release, write)

    async def _carried(
        self,
        execution_id: str,
        take: str | None,
        release: str | None,
        write: Callable[[str | None, str | None], Awaitable[T]],
    ) -> T:
        """:meth:`carrying` of a write that takes or releases the run: its outcome is recorded."""
        done = False
        try:
            value = await write(take, release)
            done = True
        finally:
            self.rode(execution_id, take, release, done=done)
        return value

    def abandoned(self, execution_id: str) -> bool:
        """Whether this store lost the run with its lock."""
        return execution_id in self._abandoned

    def check(self, execution_id: str) -> None:
        """Refuse anything more for a run this store abandoned (``OwnershipLost``)."""
        if execution_id in self._abandoned:
            raise abandoned_run(execution_id, self._store)

    def on_lost(self, listener: Listener) -> None:
        """Call ``listener(abandoned run ids)`` whenever the lock is lost (on the event loop)."""
        if listener not in self._listeners:
            self._listeners.append(listener)

    def lose(self, owner: str, reason: str) -> list[str]:
        """The lock of ``owner`` is gone: abandon its runs, log it, tell the listeners; a fresh
        owner id serves the runs taken from now on. Returns the abandoned runs."""
        if owner in self._lost:
            return []
        self._lost.add(owner)
        if owner == self.owner:
            self.owner = new_id()
        runs = sorted(eid for eid, held_by in self.held.items() if held_by == owner)
        self._abandoned.update(runs)
        LOGGER.error(
            "%r lost its liveness lock (%s): abandoning %d run(s) it owned without writing: %s",
            self._store,
            reason,
            len(runs),
            ", ".join(runs[:20]) + (" ..." if len(runs) > 20 else ""),
        )
        for listener in list(self._listeners):
            try:
                listener(runs)
            except Exception:  # one listener's failure leaves the others told
                LOGGER.exception("a listener of a lost liveness lock failed: %r", listener)
        return runs

    def abandon_taken(self, execution_id: str) -> None:
        """A run taken under an owner id whose lock went while the take was written: abandoned."""
        self._abandoned.add(execution_id)

    def is_lost(self, owner: str) -> bool:
        """Whether ``owner``'s lock was lost."""
        return owner in self._lost


class OwnerRows(Protocol):
    """A backend's dialect of ownership: its liveness lock and its ``run_owners`` statements.

    Each backend implements it as an object of its own (``stores.sqlite._owners.FileOwners``,
    ``stores.postgres._owners.LockOwners``); the store holds it as ``_owner_rows`` and
    :class:`BaseOwnedStore` calls it. Carrying a run's take and release on its rows (the bracket of
    a write: the take, the write, the release, in one transaction) is the backend's ``ride``, whose
    shape follows the backend's writes; :meth:`Ownership.carrying` decides what it carries.
    """

    async def hold(self) -> str:
        """Make sure this store's liveness lock is held; the owner id it stands for."""
        ...

    async def take_row(self, execution_id: str, owner: str) -> bool:
        """Record ``owner`` with the run unless a live owner other than ``owner`` is recorded."""
        ...

    async def release_row(self, execution_id: str, owner: str) -> None:
        """Drop the run's ``run_owners`` row if ``owner`` holds it and the run rests (its newest row is
        a ``run_end`` or a pause, or it has none); otherwise hand the run to the fleet (no owner)."""
        ...

    async def owned_rows(self, execution_ids: Sequence[str]) -> set[str]:
        """Which of these runs name an owner whose liveness lock is held."""
        ...

    async def expired_rows(self, limit: int) -> list[str]:
        """Paused runs whose pending row's ``expires_at`` has passed, soonest first."""
        ...

    async def work_rows(
        self, limit: int, full: Sequence[str], full_keys: Sequence[tuple[str, str]]
    ) -> list[Work]:
        """Runs whose row names an owner whose liveness lock is free (first), then those that name
        no owner (queued: higher priority first, then oldest), but for the queued runs of the
        queues ``full`` and of the (queue, key) pairs ``full_keys``."""
        ...

    async def take_queued_row(self, execution_id: str, owner: str) -> Admission:
        """Record ``owner`` with the run as :meth:`take_row` does, if the limits of the run's queue
        admit it, in the transaction that holds the queue's row and records the start."""
        ...

    async def hand_off_row(
        self, execution_id: str, owner: str, queue: str, key: str | None, priority: int
    ) -> None:
        """Hand the run ``owner`` holds to the fleet in ``queue`` with ``key`` and ``priority``
        (recorded for good in ``run_queues``), in one transaction."""
        ...

    async def declare_row(self, queue: Queue, owner: str) -> tuple[Queue | None, Queue]:
        """Record ``owner``'s limits of the queue, in one transaction: the stricter of them and a
        live other declarer's (:func:`~stores._queues.stricter`). Returns that other declaration
        (``None``: none) and the limits now in force."""
        ...

    async def queue_rows(self, execution_ids: Sequence[str]) -> dict[str, tuple[str, str | None]]:
        """The queue and key each of these runs was enqueued with (absent: not enqueued)."""
        ...

    async def unowned_rows(self, execution_ids: Sequence[str]) -> set[str]:
        """Which of these runs have a ``run_owners`` row that names no owner (handed to the fleet)."""
        ...

    async def ownership_rows(self, execution_ids: Sequence[str]) -> tuple[set[str], set[str]]:
        """``owned_rows`` and ``unowned_rows`` of these runs in one read of ``run_owners``."""
        ...

    def probe(self) -> None:
        """A cheap synchronous look at the liveness lock (SQLite: is the lock file still ours)."""
        ...


class BaseOwnedStore:
    """The ownership methods of a store, written once over the backend's :class:`OwnerRows`.

    ``_own`` is the store's :class:`Ownership`, ``_owner_rows`` the backend's dialect. Both backends
    carry a run's take with its first row and its release with its resting row
    (:meth:`Ownership.carrying`).
    """

    _own: Ownership
    _owner_rows: OwnerRows

    # -- the methods ------------------------------------------------------------------------------

    async def try_lock(self, execution_id: str) -> bool:
        """Take ownership of the run; ``False`` if it is held in this store or by a live owner."""
        check_execution_id(execution_id)
        own = self._own
        if execution_id in own.handed and execution_id in own.held:
            own.handed.discard(execution_id)  # a sweep took it for this activation
            self._refuse_abandoned(execution_id)
            return True
        if not own.begin(execution_id):
            return False
        taken: str | None = None
        try:
            for pause in _TAKE_RECHECKS:
                owner = await self._owner_rows.hold()
                if await self._bounded_take(self._owner_rows.take_row, execution_id, owner):
                    taken = owner
                    break
                if pause is None:
                    break
                await anyio.sleep(pause)
        finally:
            own.end(execution_id, taken)
        if taken is not None and own.is_lost(taken):
            # The lock went while the row was written: the run is abandoned like every other.
            own.check(execution_id)
        return taken is not None

    async def try_lock_with_first_row(self, execution_id: str) -> bool:
        """Take ownership of a run this activation creates, recorded with its first row (``seq`` 0)
        in that row's transaction, where the take is checked: that write raises :class:`RunExists`
        if a live owner holds the run. ``False`` if this store holds it already. Nothing but that
        write may act for the run before it (:meth:`check_owner` refuses until the take is written)."""
        check_execution_id(execution_id)
        own = self._own
        if not own.begin(execution_id):
            return False
        owner: str | None = None
        try:
            owner = await self._owner_rows.hold()
        finally:
            own.end(execution_id, owner)
        own.unrecorded.add(execution_id)
        return True

    async def _bounded_take(
        self, take: Callable[[str, str], Awaitable[T]], execution_id: str, owner: str
    ) -> T:
        """``take(execution_id, owner)``, shielded and bounded: a take's outcome must be known, or
        its row could outlive it. Past the bound the take is undone and ``StoreUnavailable`` raised."""
        with anyio.CancelScope(shield=True, deadline=anyio.current_time() + _TAKE_TIMEOUT) as scope:
            took = await take(execution_id, owner)
        if scope.cancelled_caught:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_TAKE_TIMEOUT):
                await self._owner_rows.release_row(execution_id, owner)
            raise take_unfinished(execution_id, _TAKE_TIMEOUT)
        return took

    async def unlock(self, execution_id: str) -> None:
        """Release the run's ownership if this store holds it. A run that rests is no one's; a run
        left mid-step (or written and not driven: enqueued, claimed) is handed to the fleet, for any
        sweep to take. An abandoned run's row stays as it is, for whoever takes it over."""
        check_execution_id(execution_id)
        owner = self._own.release(execution_id)
        if owner is not None:
            await self._owner_rows.release_row(execution_id, owner)

    async def orphans(
        self, limit: int = 100, *, full: Sequence[str] = (), full_keys: Sequence[tuple[str, str]] = ()
    ) -> list[str]:
        """Runs that need an owner: owned by an owner that died or lost its lock (first), or handed
        off (queued: higher priority first, then oldest). At most ``limit``; never a run a live
        owner holds, nor a queued run of the queues ``full`` or of the (queue, key) pairs
        ``full_keys`` (a sweep found them full)."""
        await self._owner_rows.hold()
        found = await self._owner_rows.work_rows(limit, list(full), list(full_keys))
        return [work.execution_id for work in found]

    # -- flow control (stores._queues) -------------------------------------------------------------

    async def take_queued(self, execution_id: str) -> Admission:
        """A sweep's take of the run, under the limits of the queue it was enqueued in (a run of no
        queue, or of a queue without limits, is taken as :meth:`try_lock` takes it, without its
        re-checks). Taken, the run is held here, and the run's next activation in this process
        goes on with this take (its :meth:`try_lock` writes nothing); :meth:`untake` releases a
        take no activation used."""
        check_execution_id(execution_id)
        own = self._own
        if not own.begin(execution_id):
            return Admission(False)
        owner = await self._hold_or_end(execution_id)
        admission = Admission(False)
        try:
            admission = await self._bounded_take(self._owner_rows.take_queued_row, execution_id, owner)
        finally:
            own.end(execution_id, owner if admission.taken else None)
        if admission.taken:
            own.handed.add(execution_id)
            if own.is_lost(owner):
                own.abandon_taken(execution_id)
                self._refuse_abandoned(execution_id)
        return admission

    def _refuse_abandoned(self, execution_id: str) -> None:
        """``OwnershipLost`` for a run a sweep took and this store then abandoned; the run is
        forgotten here first, so a later take (this process's, or another's) can have it."""
        if self._own.abandoned(execution_id):
            try:
                self._own.check(execution_id)
            finally:
                self._own.release(execution_id)

    async def _hold_or_end(self, execution_id: str) -> str:
        try:
            return await self._owner_rows.hold()
        except BaseException:
            self._own.end(execution_id, None)
            raise

    async def untake(self, execution_id: str) -> None:
        """Release a :meth:`take_queued` take that no activation went on with (else nothing)."""
        if execution_id in self._own.handed:
            await self.unlock(execution_id)

    async def hand_off(
        self, execution_id: str, queue: str, key: str | None = None, priority: int = 0
    ) -> None:
        """:meth:`unlock` for a run just enqueued: handed to the fleet in ``queue``, with ``key`` and
        ``priority`` recorded (a sweep takes higher priorities first, then the oldest)."""
        check_execution_id(execution_id)
        check_enqueue(queue, key, priority)
        owner = self._own.release(execution_id)
        if owner is not None:
            await self._owner_rows.hand_off_row(execution_id, owner, queue, key, priority)

    async def declare_queues(self, queues: Sequence[Queue]) -> list[Queue]:
        """Give the fleet these queues' limits (a serving process does at its start). Where a live
        process gave other limits, a WARNING names both, and the stricter hold. The limits in force."""
        found = []
        for queue in queues:
            if not isinstance(queue, Queue):
                raise TypeError(f"queues takes Queue objects, not {type(queue).__name__}")
            other, held = await self._owner_rows.declare_row(queue, await self._owner_rows.hold())
            if other is not None and other != queue:
                LOGGER.warning(
                    "workers disagree on the limits of queue %r: this one gives %r, a live one gave %r; "
                    "the stricter hold: %r",
                    queue.name,
                    queue,
                    other,
                    held,
                )
            found.append(held)
        return found

    async def queues_of(self, execution_ids: Sequence[str]) -> dict[str, tuple[str, str | None]]:
        """The queue and key each of these runs was enqueued with (runs not enqueued are absent)."""
        if not execution_ids:
            return {}
        return await self._owner_rows.queue_rows(list(execution_ids))

    async def expired(self, limit: int = 100) -> list[str]:
        """Paused runs past the deadline of their pause (``interrupt(..., expires_in=)``), soonest
        first, at most ``limit``; a sweep claims each as a refusal."""
        return await self._owner_rows.expired_rows(limit)

    async def owned(self, execution_ids: Sequence[str]) -> set[str]:
        """Which of these runs a live owner holds (any process, this one included), read without
        taking or waiting for any lock another process could need."""
        if not execution_ids:
            return set()
        return await self._owner_rows.owned_rows(list(execution_ids))

    async def unowned(self, execution_ids: Sequence[str]) -> set[str]:
        """Which of these runs were handed to the fleet and not yet taken (enqueued, claimed, or
        left mid-step): a plain read, no lock taken."""
        if not execution_ids:
            return set()
        return await self._owner_rows.unowned_rows(list(execution_ids))

    async def ownership(self, execution_ids: Sequence[str]) -> tuple[set[str], set[str]]:
        """Which of these runs a live owner holds (:meth:`owned`) and which were handed to the
        fleet and not yet taken (:meth:`unowned`), read at one instant: a run taken, or handed to
        the fleet, meanwhile is in one of the two, never in neither (as two reads could have it)."""
        if not execution_ids:
            return set(), set()
        return await self._owner_rows.ownership_rows(list(execution_ids))

    def check_owner(self, execution_id: str) -> None:
        """Raise ``OwnershipLost`` if this store abandoned the run (no I/O)."""
        self._owner_rows.probe()
        self._own.check(execution_id)
        if execution_id in self._own.unrecorded:
            raise take_unrecorded(execution_id)

    def on_ownership_lost(self, listener: Listener) -> None:
        """Call ``listener(run ids)`` when this store loses its liveness lock (see :class:`Ownership`)."""
        self._own.on_lost(listener)

    async def listen_for_work(self, wake: Callable[[], object]) -> Callable[[], Awaitable[None]] | None:
        """Call ``wake()`` whenever a run is handed to the fleet: ``None`` here, this store sends no
        such notice (a serving process polls); a backend that can overrides it."""
        return None
