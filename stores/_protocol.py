"""The async store contract: :class:`Store`, and the optional surfaces :class:`ReplicatedStore`
(the outbox), :class:`OwnedStore` (run ownership, what a fleet needs) and :class:`OwnerSessions`
(an owner's lock session an operator can end).

They are separate protocols so that a third-party store without an outbox or ownership still
works; it simply does not replicate (``isinstance(store, ReplicatedStore)`` is how the replicator
tells) or serve a fleet. Both backends implement every surface, and mypy checks them against each
(``stores.sqlite._store``, ``stores.postgres._store``): a method renamed in a backend fails the
type check instead of turning off what the runtime finds through the protocol.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable

from ._codec import StoredRow
from ._heads import RunHead
from ._model import Cached, CacheEntry, Checkpoint, PendingInterrupt, ReEntry
from ._queues import Admission, Queue
from ._schedules import StoredSchedule
from ._signals import StoredSignal
from ._watch import RowWatch

__all__ = ["OwnedStore", "OwnerSessions", "ReplicatedStore", "Store"]


@runtime_checkable
class Store(Protocol):
    """Where a run's rows live. Every method is async and never blocks the event loop.

    Rows of one run are ordered by ``seq``; ``(execution_id, seq)`` and ``checkpoint_id`` are unique.
    """

    async def setup(self) -> None:
        """Create or migrate the schema (idempotent, safe when processes race; refuses newer schemas)."""

    async def close(self) -> None:
        """Release connections, threads and ownership locks."""

    async def append(self, row: Checkpoint) -> None:
        """Append ``row`` at its ``seq``.

        ``seq`` 0 on a run that has rows raises ``RunExists``; a taken ``seq`` or ``checkpoint_id``
        raises ``WriteConflict``, leaving the stored row untouched. A ``run_end`` row also deletes
        the run's pending interrupt in the same transaction (this is how cancel works).
        """

    async def append_pause(self, row: Checkpoint, pending: PendingInterrupt) -> None:
        """Append the interrupted ``hitl_pause`` row and the pending row in one transaction."""

    async def claim(self, row: Checkpoint) -> PendingInterrupt:
        """Claim a pause: delete the pending row and append the ``resume`` row, in one transaction.

        Exactly one of many racing claimers wins; the others get ``AlreadyResumed`` (or
        ``WriteConflict`` when their ``seq`` was taken). An unknown run raises ``RunNotFound``.
        """

    async def latest(self, execution_id: str) -> Checkpoint | None:
        """The newest row of the run by ``seq``, or ``None`` when it has none."""

    async def reentry(self, execution_id: str) -> ReEntry:
        """Where a resume re-enters: refuses a completed ``run_end`` with ``AlreadyResumed``, steps
        over failed ones, reads through ``resume``/``recover`` rows. ``RunNotFound`` for no rows."""

    async def forkable(self, execution_id: str, checkpoint_id: str | None = None) -> Checkpoint:
        """The row a fork starts from: the named one (a ``run_end`` marker raises ``CheckpointError``),
        or the newest step. ``RunNotFound`` when the run or the checkpoint does not exist."""

    async def get(self, execution_id: str, checkpoint_id: str) -> Checkpoint | None:
        """One row by id (both keys must match)."""

    async def history(
        self, execution_id: str, *, since: int = 0, limit: int | None = None
    ) -> list[Checkpoint]:
        """The rows of the run in ``seq`` order: every one, or those from ``since`` on, at most
        ``limit`` of them (a page; bad values raise ``TypeError``/``ValueError`` before any I/O)."""

    def watch(self, execution_id: str) -> RowWatch:
        """A handle whose bounded waits end when a row of the run may have been written by any
        process (a notice, or the poll interval); see :mod:`stores._watch`."""

    async def pending(
        self,
        execution_id: str | None = None,
        *,
        limit: int | None = None,
        after: PendingInterrupt | None = None,
    ) -> list[PendingInterrupt]:
        """Pending interrupts, newest first (by ``created_at``, then ``execution_id``); all runs, or one.

        ``limit`` caps the page; ``after`` (the last entry of the previous page) starts the page
        after it, by position, so paging holds when that run is resumed meanwhile. A page is one
        index range scan: it costs the same however many runs are paused.
        """

    async def heads(
        self,
        *,
        execution_id: str | None = None,
        runner: str | None = None,
        state: str | None = None,
        before: tuple[datetime, str] | None = None,
        limit: int = 100,
    ) -> list[RunHead]:
        """Each run's newest row, summarised, newest first (by its ``created_at``, then id).

        Filters: one run, a runner's name, a row state (``completed``, ``failed``, ``paused``,
        ``unfinished``); ``before`` is the ``(updated_at, execution_id)`` of the previous page's last
        head. An unknown state or a limit below 1 raises ``ValueError`` before any I/O.
        """

    async def owned(self, execution_ids: Sequence[str]) -> set[str]:
        """Which of these runs a live owner holds (any process, this one included), read without
        taking or waiting for any lock another process could need."""

    async def delete_run(self, execution_id: str) -> int:
        """Delete a run's rows, messages, pending row and cache in one transaction; returns rows deleted."""

    async def prune(self, older_than: timedelta) -> int:
        """Delete what is older than the cutoff (rule 10 of docs/durability.md); returns checkpoint rows deleted."""

    async def cache_get(self, execution_id: str, key: str) -> Cached | None:
        """The idempotency cache entry for ``(execution_id, key)``, if any."""

    async def cache_put(self, execution_id: str, key: str, value: Any) -> Any:
        """Insert the entry if absent and return the stored value (the first writer's wins)."""

    async def cache_intend(self, execution_id: str, key: str) -> Cached | bool:
        """Before an at-most-once side effect: the entry for ``(execution_id, key)`` if there is one,
        else record the intent for ``key`` (insert if absent) and say whether this call recorded it
        (``False``: an intent without a result was already there: the side effect is in doubt)."""

    async def signal(self, execution_id: str, name: str, payload: Any = None) -> int:
        """Append a signal to the run's inbox in one transaction and return its inbox id, from any
        process, without the run's ownership. The name and the payload (the JSON rule:
        ``SerializationError``) are checked first; a run without rows raises ``RunNotFound``, a
        completed one ``AlreadyResumed``; nothing is written then. A run resting at a wait for
        that name is marked due for a wake in the same transaction."""

    async def signals(
        self, execution_id: str, *, name: str | None = None, consumed_by: int | None = None
    ) -> list[StoredSignal]:
        """The run's unconsumed signals, oldest first (of ``name`` only, if given); with
        ``consumed_by``, those the row at that ``seq`` consumed. A row consumes signals by naming
        their ids in its ``node_input`` (``stores._signals.CONSUMES``): its append marks them in
        its own transaction, or writes nothing (``WriteConflict``) if another row took one. A
        model turn's row (``llm_call``) that consumes none is refused while ``"message"``
        signals wait (``SignalsWaiting``), in its own transaction: no round trip of its own."""

    async def append_wait(self, row: Checkpoint, name: str | None, wake_at: datetime | None) -> None:
        """Append a tool's ``wait`` row (it rests the run, like a pause: the run's ownership goes
        with it) and record the run as resting until ``wake_at`` (``None``: no time) or, for a
        wait on the signal ``name``, until that signal comes; one transaction. A signal of
        ``name`` already in the inbox makes the run due at once (no lost wake)."""

    async def due_waits(self, limit: int) -> list[tuple[str, int]]:
        """Up to ``limit`` resting runs due for a wake, the earliest first: ``(execution_id, seq
        of its wait row)``. One range of an index, however many runs rest."""

    async def next_wake(self, after: datetime | None = None) -> datetime | None:
        """The earliest time a resting run is due for a wake (``None``: none has a time), or the
        earliest later than ``after``: the first entry of an index, or of its range."""

    async def settle_wait(self, execution_id: str, seq: int) -> None:
        """Forget the run's wait recorded at ``seq`` (it was woken, or it is not the run's newest
        row any more); a later wait of the run is kept."""

    def watch_waits(self) -> RowWatch:
        """A handle whose bounded waits end when a signal may have made a resting run due, sent
        by any process (a notice, or the poll interval); its reader then reads
        :meth:`next_wake` and :meth:`due_waits`. One per process, whatever the number of resting
        runs; see :mod:`stores._watch`."""

    async def put_schedule(self, schedule: StoredSchedule) -> None:
        """Insert or update the schedule of that name; an update with the same timing (cron,
        every) keeps the stored next tick."""

    async def delete_schedule(self, name: str) -> bool:
        """Delete the schedule of that name; whether there was one."""

    async def list_schedules(self) -> list[StoredSchedule]:
        """Every schedule, by name."""

    async def due_schedules(self, now: datetime, limit: int) -> list[StoredSchedule]:
        """Up to ``limit`` schedules whose next tick is at or before ``now`` (an index range)."""

    async def advance_schedule(self, name: str, seen: datetime, next_at: datetime, last_run: str) -> bool:
        """Move the schedule's next tick from ``seen`` to ``next_at`` and record ``last_run``, if
        its next tick is still ``seen`` (a compare-and-set: one of racing workers moves it)."""

    async def try_lock(self, execution_id: str) -> bool:
        """Take the run's ownership lock; ``False`` if held by anyone else (another process, or another
        holder in this one). The lock is released by :meth:`unlock` or when the holder process dies."""

    async def unlock(self, execution_id: str) -> None:
        """Release the run's ownership lock if this store holds it."""


@runtime_checkable
class ReplicatedStore(Protocol):
    """The optional outbox surface used by the replicator."""

    async def fetch_unsynced(self, limit: int) -> list[Checkpoint]:
        """Rows not yet shipped, oldest write first."""

    async def mark_synced(self, checkpoint_ids: Sequence[str]) -> None:
        """Mark rows shipped (idempotent; an empty request is a no-op)."""

    async def mark_quarantined(self, reasons: dict[str, str]) -> None:
        """Mark poison rows: never re-sent, the reason kept (idempotent; last reason wins)."""

    async def sync_state(self, checkpoint_id: str) -> tuple[bool, str | None] | None:
        """``(synced, sync_error)`` of a row, or ``None`` if there is no such row."""

    async def import_rows(self, rows: Sequence[Checkpoint]) -> int:
        """Insert rows restored from the plane as already synced; existing ids are skipped. Returns
        how many were inserted."""

    async def fetch_unsynced_stored(self, limit: int) -> list[tuple[StoredRow, bytes | None]]:
        """Like :meth:`fetch_unsynced`, the rows as stored, not materialised: their columns (JSON
        ones as the bytes stored, the snapshot without its messages) and the messages each adds to
        its conversation's log (a JSON array, or ``None``). What a replicator ships, unparsed."""

    async def fetch_unsynced_cache(self, limit: int) -> list[CacheEntry]:
        """``@idempotent`` cache entries not yet shipped, oldest first."""

    async def mark_cache_synced(self, keys: Sequence[tuple[str, str]]) -> None:
        """Mark cache entries, by ``(execution_id, key)``, shipped (idempotent; empty is a no-op)."""

    async def attach_replica(self) -> None:
        """Remember for good that a replicator serves this store: from then on ``prune`` never
        deletes a row or cache entry the plane has not accepted."""

    async def cache_entries(self, execution_id: str) -> list[CacheEntry]:
        """Every ``@idempotent`` cache entry of the run (oldest first)."""

    async def import_run(
        self,
        execution_id: str,
        rows: Sequence[Checkpoint],
        cache: Sequence[CacheEntry],
        pending: PendingInterrupt | None,
        signals: Sequence[StoredSignal] = (),
    ) -> int:
        """Import a run restored from the plane in ONE transaction: its rows and cache entries (as
        synced), its pending row, and ``signals``, the unconsumed entries of its inbox (as synced,
        in order, each keeping its ``signal_id``; ``consumed_seq`` is not imported). When its newest
        row is a tool's ``wait``, the run is recorded as resting there (due at once if a signal it
        waits for came with it, else at its deadline), so a worker wakes it as it would have been
        woken where it was. ``RunExists`` if the store has a row of the run (a restore never
        overwrites); returns the rows imported."""

    async def fetch_unsynced_signals(self, limit: int) -> list[StoredSignal]:
        """Inbox entries whose state (sent; consumed by a row) the plane has not accepted, oldest
        first. A row that consumes an entry puts it back here in its own transaction."""

    async def mark_signals_synced(self, entries: Sequence[StoredSignal]) -> None:
        """Mark inbox entries shipped, each only if its state is still the one shipped (an entry
        consumed meanwhile stays to send); idempotent; an empty request is a no-op."""

    async def mark_signals_quarantined(self, refused: Sequence[tuple[StoredSignal, str]]) -> None:
        """Mark poison inbox entries with their reason, each only if its state is still the one
        refused: not sent again unless that state changes (a consumption is sent)."""

    async def signal_sync_state(self, signal_id: str) -> tuple[bool, str | None] | None:
        """``(synced, sync_error)`` of an inbox entry, or ``None`` if there is no such entry."""

    async def signal_entries(self, execution_id: str) -> list[StoredSignal]:
        """Every inbox entry of the run, consumed or not, oldest first (the plane's read)."""

    async def copy_signals(self, entries: Sequence[StoredSignal]) -> dict[str, str]:
        """Store copies of inbox entries held elsewhere (the plane's side), merged by ``signal_id``
        in one transaction (:func:`stores._signals.merge_copy`): a new one stored as it is (for any
        run, with rows here or not), a known one's consumption recorded. Returns the refused ones,
        ``{signal_id: reason}``: malformed, or contradicting the entry held; the rest are stored."""

    async def append_copy(self, row: Checkpoint) -> None:
        """Append a row written in another store (the plane's side: it never runs a step): as
        :meth:`Store.append`, with its refusals and its messages stored once, but nothing of what
        the row did to its own store's inbox is done again here (the signals it consumed arrive
        as entries of their own: :meth:`copy_signals`), and no ownership is taken."""


@runtime_checkable
class OwnedStore(Store, Protocol):
    """A :class:`Store` that records run ownership (``stores._owners``): what a fleet needs to
    enqueue, sweep, serve and claim, and what stops a run this process lost. Both backends are one;
    a store that is not (a third-party one) drives runs but cannot serve a fleet."""

    async def try_lock_with_first_row(self, execution_id: str) -> bool:
        """Take a run this activation creates, the take recorded with its first row (``seq`` 0) in
        that row's transaction; ``False`` if this store holds it already."""

    async def orphans(
        self, limit: int = 100, *, full: Sequence[str] = (), full_keys: Sequence[tuple[str, str]] = ()
    ) -> list[str]:
        """Runs that need an owner (their owner died or lost its lock, or they were handed off), at
        most ``limit``; not the queued runs of the queues ``full`` or the (queue, key) pairs
        ``full_keys``."""

    async def expired(self, limit: int = 100) -> list[str]:
        """Paused runs past the deadline of their pause, soonest first, at most ``limit``."""

    async def take_queued(self, execution_id: str) -> Admission:
        """A sweep's take of the run under the limits of its queue; the run's next activation here
        goes on with it."""

    async def untake(self, execution_id: str) -> None:
        """Release a :meth:`take_queued` take that no activation went on with (else nothing)."""

    async def hand_off(
        self, execution_id: str, queue: str, key: str | None = None, priority: int = 0
    ) -> None:
        """Release a run just enqueued: handed to the fleet in ``queue`` with ``key`` and ``priority``."""

    async def declare_queues(self, queues: Sequence[Queue]) -> list[Queue]:
        """Give the fleet these queues' limits; the limits in force (the stricter of a live other's)."""

    async def queues_of(self, execution_ids: Sequence[str]) -> dict[str, tuple[str, str | None]]:
        """The queue and key each of these runs was enqueued with (runs not enqueued are absent)."""

    async def unowned(self, execution_ids: Sequence[str]) -> set[str]:
        """Which of these runs were handed to the fleet and not yet taken (a plain read)."""

    async def ownership(self, execution_ids: Sequence[str]) -> tuple[set[str], set[str]]:
        """:meth:`~Store.owned` and :meth:`unowned` of these runs, read at one instant (one read)."""

    def check_owner(self, execution_id: str) -> None:
        """Raise ``OwnershipLost`` if this store lost the run (or has not recorded its take); no I/O."""

    def on_ownership_lost(self, listener: Callable[[list[str]], object]) -> None:
        """Call ``listener(run ids)`` when this store loses its liveness lock."""

    async def listen_for_work(self, wake: Callable[[], object]) -> Callable[[], Awaitable[None]] | None:
        """Call ``wake()`` whenever a run is handed to the fleet, and return what stops listening;
        ``None`` for a store that sends no such notice (a serving process then polls)."""


@runtime_checkable
class OwnerSessions(Protocol):
    """A store whose run owners hold their liveness lock in a database session an operator can end
    (PostgreSQL; ``tether recover --force``)."""

    async def terminate_owner(self, execution_id: str) -> int | None:
        """End the lock session of the run's live owner; the server pid ended, or ``None`` when no
        live owner holds the run."""
