"""The embedded store: SQLite in WAL mode, with group commit.

How a write works. A caller plans its row on the event loop (:meth:`BaseStore._planned`, so a
:class:`SerializationError` or :class:`RowTooLarge` is raised before anything is queued), then puts
one operation on the write queue of :class:`~stores.sqlite._writer.Connections`, the one owner of
the store's connections, and awaits its own future; the writer thread commits everything queued in
one transaction. Reads use a second connection (WAL readers never block the writer) and are one
thread hop per method, each in one read transaction. The re-entry walk of :mod:`stores._reentry`
runs inside that hop: its row callbacks never suspend, so it is driven to completion synchronously
(:func:`stores._reentry.run_sync`). The store is a front over parts it holds: the inbox, the
replication side, the schedules and the cache, whose methods it forwards, and ownership's dialect
(:class:`~stores.sqlite._owners.FileOwners`: one lock per owner id, a ``run_owners`` row per run,
:mod:`stores.sqlite._locks`).
"""

from __future__ import annotations

import functools
import os
import sqlite3
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, TypeVar

import anyio

from .._base import BaseStore, Plan, StoreState, check_history_range, check_page
from .._codec import DEFAULT_MAX_ROW_BYTES, encode_pending
from .._errors import (
    check_execution_id,
    no_checkpoints,
    no_pause,
    path_not_url,
    pending_exists,
)
from .._flight import single_claim
from .._forward import Forward
from .._heads import RunHead, check_heads_arguments, head_of, heads_query
from .._model import RUN_END, Checkpoint, PendingInterrupt, ReEntry, utcnow
from .._paths import conversation_of
from .._reentry import resolve_forkable, resolve_reentry, run_sync
from ._cache import Cache
from ._connection import SYNCHRONOUS, integrity_problems
from ._inbox import Inbox
from ._insert import RowOp, insert_row
from ._locks import LivenessFile, ride
from ._owners import FileOwners
from ._replica import Replica
from ._rows import (
    PENDING_COLUMNS,
    Ctx,
    dt,
    load_log,
    lower_outbox_mark,
    pending_of,
    pending_query,
    prune,
    row_where,
    rows_where,
    ts,
    walkers,
)
from ._schedules import Schedules
from ._writer import Connections

__all__ = ["SQLiteStore"]

T = TypeVar("T")

_CLOSE_TIMEOUT: Final = 10.0


class SQLiteStore(BaseStore):
    """A :class:`~stores.Store` and :class:`~stores.ReplicatedStore` on one SQLite file.

    ``synchronous="FULL"`` (the default) makes every commit durable. ``busy_timeout`` (seconds) is how
    long a write waits for another process's transaction; lock errors never reach callers.
    ``max_row_bytes`` limits a row's new content (:class:`RowTooLarge` above it). Several processes
    may share one file. :attr:`transactions` counts write transactions (group commit shares them).
    """

    _owner_rows: FileOwners
    _cache: Cache

    # -- what the store's parts answer (see their classes) -----------------------------------------

    cache_get = Forward("_cache", Cache.get)
    cache_put = Forward("_cache", Cache.put)

    signal = Forward("_inbox", Inbox.signal)
    signals = Forward("_inbox", Inbox.signals)
    append_wait = Forward("_inbox", Inbox.append_wait)
    due_waits = Forward("_inbox", Inbox.due_waits)
    next_wake = Forward("_inbox", Inbox.next_wake)
    settle_wait = Forward("_inbox", Inbox.settle_wait)

    fetch_unsynced = Forward("_replica", Replica.fetch_unsynced)
    mark_synced = Forward("_replica", Replica.mark_synced)
    mark_quarantined = Forward("_replica", Replica.mark_quarantined)
    sync_state = Forward("_replica", Replica.sync_state)
    import_rows = Forward("_replica", Replica.import_rows)
    cache_entries = Forward("_replica", Replica.cache_entries)
    fetch_unsynced_stored = Forward("_replica", Replica.fetch_unsynced_stored)
    fetch_unsynced_cache = Forward("_replica", Replica.fetch_unsynced_cache)
    mark_cache_synced = Forward("_replica", Replica.mark_cache_synced)
    attach_replica = Forward("_replica", Replica.attach_replica)
    import_run = Forward("_replica", Replica.import_run)
    fetch_unsynced_signals = Forward("_replica", Replica.fetch_unsynced_signals)
    mark_signals_synced = Forward("_replica", Replica.mark_signals_synced)
    mark_signals_quarantined = Forward("_replica", Replica.mark_signals_quarantined)
    signal_sync_state = Forward("_replica", Replica.signal_sync_state)
    signal_entries = Forward("_replica", Replica.signal_entries)
    copy_signals = Forward("_replica", Replica.copy_signals)

    put_schedule = Forward("_schedules", Schedules.put_schedule)
    delete_schedule = Forward("_schedules", Schedules.delete_schedule)
    list_schedules = Forward("_schedules", Schedules.list_schedules)
    due_schedules = Forward("_schedules", Schedules.due_schedules)
    advance_schedule = Forward("_schedules", Schedules.advance_schedule)

    def __init__(
        self,
        path: str | os.PathLike[str] = "tether.db",
        *,
        synchronous: str = "FULL",
        busy_timeout: float = 30.0,
        max_row_bytes: int = DEFAULT_MAX_ROW_BYTES,
    ) -> None:
        if synchronous.upper() not in SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {sorted(SYNCHRONOUS)}, not {synchronous!r}")
        if isinstance(path, str) and "://" in path:
            raise path_not_url(path)
        super().__init__(max_row_bytes=max_row_bytes, recall=self._recall_log)
        self.path = os.fspath(path)
        self.lock_path = self.path + ".locks"
        self._setup_lock = anyio.Lock()
        self._db = Connections(
            self.path,
            synchronous=synchronous.upper(),
            busy_timeout=busy_timeout,
            store=self,
            ensure=self._ensure,
        )
        self._liveness = LivenessFile(self.lock_path, self._own)
        self._owner_rows = FileOwners(
            self._liveness,
            refuse_closed=self._refuse_closed,
            ensure=self._ensure,
            read=self._db.read,
            write=self._db.write,
        )
        self._db_key = os.path.realpath(self.path)
        self._inbox = Inbox(self._db, self._write_row)
        self._replica = Replica(self._db, self._logs)
        self._schedules = Schedules(self._db)
        self._cache = Cache(self._db)

    @property
    def transactions(self) -> int:
        """How many write transactions this store committed (group commit shares them)."""
        return self._db.transactions

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    # ------------------------------------------------------------------ lifecycle

    async def setup(self) -> None:
        """Open both connections and migrate the schema (idempotent, safe across processes)."""
        if self._state is StoreState.READY:
            return
        async with self._setup_lock:
            if self._state_now() is StoreState.READY:  # another task set it up while we waited
                return
            self._refuse_closed()
            await self._db.open()
            self._state = StoreState.READY

    def _state_now(self) -> StoreState:
        return self._state

    async def _ensure(self) -> None:
        if self._state is not StoreState.READY:
            await self.setup()

    async def close(self) -> None:
        """Finish queued writes, stop the threads and release every ownership lock (idempotent)."""
        if self._state is StoreState.CLOSED:
            return
        self._state = StoreState.CLOSED
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT):
            await self._db.close()
        self._liveness.close()

    async def integrity_check(self, *, max_errors: int = 100) -> list[str]:
        """What SQLite's ``PRAGMA integrity_check`` finds wrong with the file, at most ``max_errors``
        lines (an empty list: nothing). Reads the file through a read-only connection of its own, in
        a worker thread; needs no :meth:`setup` and creates nothing (a missing file is
        ``StoreUnavailable``). It reads every page, so it takes time in proportion to the file."""
        return await anyio.to_thread.run_sync(integrity_problems, self.path, max_errors)

    # ------------------------------------------------------------------ reads (one hop each)

    def _read(self, fn: Callable[[sqlite3.Connection], T]) -> Awaitable[T]:
        """Run ``fn`` in one read transaction on the reader thread (:meth:`Connections.read`)."""
        return self._db.read(fn)

    # ------------------------------------------------------------------ writes

    async def append(self, row: Checkpoint) -> None:
        """Append ``row`` at its ``seq`` (see :meth:`Store.append`)."""
        if self._state is not StoreState.READY:
            await self._ensure()
        await self._write_row(row, row.step_type == RUN_END, insert_row)

    async def append_copy(self, row: Checkpoint) -> None:
        """Append a row written in another store (see :meth:`ReplicatedStore.append_copy`): no
        inbox guard, no ownership."""
        await self._ensure()
        await self._planned(row, lambda plan: self._write(lambda c: insert_row(c, plan, copied=True)))

    async def append_pause(self, row: Checkpoint, pending: PendingInterrupt) -> None:
        """Append the interrupted row and the pending row in one transaction."""
        context = encode_pending(pending)
        values = (
            pending.execution_id,
            pending.reason,
            context,
            pending.node_id,
            pending.agent_path,
            ts(pending.created_at),
            None if pending.expires_at is None else ts(pending.expires_at),
        )

        def op(conn: sqlite3.Connection, plan: Plan) -> None:
            insert_row(conn, plan)
            try:
                conn.execute(
                    f"INSERT INTO pending_interrupts ({PENDING_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    values,
                )
            except sqlite3.IntegrityError as exc:
                raise pending_exists(pending.execution_id) from exc

        await self._ensure()
        await self._write_row(row, True, op)

    async def claim(self, row: Checkpoint) -> PendingInterrupt:
        """Claim the run's pause: delete its pending row and append ``row``, in one transaction.

        A claim of a run that another claimer of this process (any store on the same file) is
        already claiming waits for that one: if it won, this one lost without touching the database.
        """
        eid = row.execution_id
        return await single_claim(
            ("sqlite", self._db_key, eid), lambda: self._claim(row), lambda: no_pause(eid)
        )

    async def _claim(self, row: Checkpoint) -> PendingInterrupt:
        eid = row.execution_id

        def probe(conn: sqlite3.Connection) -> tuple[bool, bool]:
            has_pending = conn.execute(
                "SELECT 1 FROM pending_interrupts WHERE execution_id = ?", (eid,)
            ).fetchone()
            has_rows = conn.execute(
                "SELECT 1 FROM checkpoints WHERE execution_id = ? LIMIT 1", (eid,)
            ).fetchone()
            return has_pending is not None, has_rows is not None

        has_pending, has_rows = await self._read(probe)
        if not has_pending:
            raise no_pause(eid) if has_rows else no_checkpoints(eid)

        def op(conn: sqlite3.Connection, plan: Plan) -> PendingInterrupt:
            found = conn.execute(
                f"DELETE FROM pending_interrupts WHERE execution_id = ? RETURNING {PENDING_COLUMNS}",
                (eid,),
            ).fetchone()
            if found is None:
                rows = conn.execute("SELECT 1 FROM checkpoints WHERE execution_id = ? LIMIT 1", (eid,))
                raise no_pause(eid) if rows.fetchone() is not None else no_checkpoints(eid)
            insert_row(conn, plan)
            return pending_of(found)

        return await self._write_row(row, False, op)

    def _write_row(self, row: Checkpoint, resting: bool, op: RowOp[T]) -> Awaitable[T]:
        """Plan ``row`` and run ``op(conn, plan)`` in one write transaction with the run's ownership
        riding in it (``resting``: the row rests the run, so its release rides too)."""
        return self._own.carrying(row.execution_id, resting, functools.partial(self._write_owned, row, op))

    def _write_owned(
        self,
        row: Checkpoint,
        op: RowOp[T],
        take: str | None,
        release: str | None,
    ) -> Awaitable[T]:
        """:meth:`_write_row` once what rides with the row is known (``take``, ``release``)."""
        return self._planned(row, functools.partial(self._attempt, op, row.execution_id, take, release))

    def _attempt(
        self,
        op: RowOp[T],
        eid: str,
        take: str | None,
        release: str | None,
        plan: Plan,
    ) -> Awaitable[T]:
        """Queue one attempt of a planned row's write: ``op(conn, plan)`` with the run's take and
        release riding in its transaction (the writer thread calls it with no frame between)."""
        fn: Callable[[sqlite3.Connection], T] = functools.partial(op, plan=plan)
        if take is not None or release is not None:
            fn = ride(fn, eid, take, release, self._liveness)
        return self._db.write(fn)

    def _write(self, fn: Callable[[sqlite3.Connection], T]) -> Awaitable[T]:
        """Queue ``fn`` for the next write transaction (:meth:`Connections.write`)."""
        return self._db.write(fn)

    def _recall_log(self, row: Checkpoint) -> Awaitable[None]:
        """The load of the row's conversation log into memory (its plan found the log of a
        continuing run not known here)."""
        return self._load_log(row.execution_id, conversation_of(row.agent_path))

    async def _load_log(self, eid: str, conversation: str) -> None:
        """Read the newest log of the run's ``conversation`` back into memory."""

        def load(conn: sqlite3.Connection) -> tuple[str, list[Any]] | None:
            cursor = conn.execute(
                "SELECT log_id, agent_path FROM checkpoints WHERE execution_id = ? AND log_id IS NOT NULL "
                "ORDER BY seq DESC",
                (eid,),
            )
            for log_id, agent_path in cursor.fetchall():
                if conversation_of(agent_path) == conversation:
                    return log_id, load_log(conn, eid, log_id)
            return None

        found = await self._read(load)
        if found is not None and not self._logs.known(eid, conversation):
            self._logs.remember(eid, conversation, found[0], found[1])

    async def delete_run(self, execution_id: str) -> int:
        """Delete the run's rows, pending row and cache in one transaction."""
        check_execution_id(execution_id)

        def run(conn: sqlite3.Connection) -> int:
            deleted = conn.execute("DELETE FROM checkpoints WHERE execution_id = ?", (execution_id,)).rowcount
            lower_outbox_mark(conn)
            for table in ("pending_interrupts", "idempotency_cache", "run_queues", "signals", "run_waits"):
                conn.execute(f"DELETE FROM {table} WHERE execution_id = ?", (execution_id,))
            return int(deleted)

        try:
            return await self._write(run)
        finally:
            self._logs.forget(execution_id)

    async def prune(self, older_than: timedelta) -> int:
        """Delete what the prune rule (:mod:`stores._prune`) allows, older than ``older_than``."""
        cutoff = ts(utcnow() - older_than)
        deleted, touched = await self._write(lambda conn: prune(conn, cutoff))
        for eid in touched:
            self._logs.forget(eid)
        return deleted

    # ------------------------------------------------------------------ row reads

    async def latest(self, execution_id: str) -> Checkpoint | None:
        """The newest row of the run, or ``None``."""
        check_execution_id(execution_id)

        def run(conn: sqlite3.Connection) -> tuple[Checkpoint | None, Ctx]:
            ctx = Ctx()
            return row_where(conn, ctx, "execution_id = ? ORDER BY seq DESC LIMIT 1", (execution_id,)), ctx

        row, ctx = await self._read(run)
        self._seed(execution_id, (row,), ctx)
        return row

    async def reentry(self, execution_id: str) -> ReEntry:
        """Where a resume re-enters the run (see :meth:`Store.reentry`)."""
        check_execution_id(execution_id)

        def run(conn: sqlite3.Connection) -> tuple[ReEntry, Ctx]:
            ctx = Ctx()
            newest, row_at, row_before = walkers(conn, ctx, execution_id)
            return run_sync(resolve_reentry(execution_id, newest, row_at, row_before)), ctx

        found, ctx = await self._read(run)
        self._seed(execution_id, (found.step, found.newest), ctx)
        return found

    async def forkable(self, execution_id: str, checkpoint_id: str | None = None) -> Checkpoint:
        """The row a fork starts from (see :meth:`Store.forkable`)."""
        check_execution_id(execution_id)

        def run(conn: sqlite3.Connection) -> Checkpoint:
            ctx = Ctx()
            newest, row_at, row_before = walkers(conn, ctx, execution_id)
            named = None
            if checkpoint_id is not None:
                named = row_where(
                    conn, ctx, "execution_id = ? AND checkpoint_id = ?", (execution_id, checkpoint_id)
                )
            return run_sync(resolve_forkable(execution_id, newest, named, checkpoint_id, row_at, row_before))

        return await self._read(run)

    async def get(self, execution_id: str, checkpoint_id: str) -> Checkpoint | None:
        """One row by id (both keys must match)."""
        check_execution_id(execution_id)
        return await self._read(
            lambda conn: row_where(
                conn, Ctx(), "execution_id = ? AND checkpoint_id = ?", (execution_id, checkpoint_id)
            )
        )

    async def history(
        self, execution_id: str, *, since: int = 0, limit: int | None = None
    ) -> list[Checkpoint]:
        """The rows of the run in ``seq`` order, from ``since`` on (at most ``limit``)."""
        check_execution_id(execution_id)
        check_history_range(since, limit)
        where = "execution_id = ? AND seq >= ? ORDER BY seq LIMIT ?"
        args = (execution_id, since, -1 if limit is None else limit)
        return await self._read(lambda conn: rows_where(conn, Ctx(), where, args))

    async def pending(
        self,
        execution_id: str | None = None,
        *,
        limit: int | None = None,
        after: PendingInterrupt | None = None,
    ) -> list[PendingInterrupt]:
        """Pending interrupts, newest first; all runs, or one; a page of ``limit`` after ``after``."""
        check_page(execution_id, limit, after)
        sql, args = pending_query(execution_id, limit, after)

        def run(conn: sqlite3.Connection) -> list[PendingInterrupt]:
            return [pending_of(found) for found in conn.execute(sql, args)]

        return await self._read(run)

    async def heads(
        self,
        *,
        execution_id: str | None = None,
        runner: str | None = None,
        state: str | None = None,
        before: tuple[datetime, str] | None = None,
        limit: int = 100,
    ) -> list[RunHead]:
        """Each run's newest row, summarised, newest first (see :meth:`Store.heads`)."""
        check_heads_arguments(state, limit)
        sql, args = heads_query(
            "checkpoints",
            lambda _: "?",
            execution_id=execution_id,
            runner=runner,
            state=state,
            before=None if before is None else (ts(before[0]), before[1]),
            limit=limit,
        )

        def run(conn: sqlite3.Connection) -> list[RunHead]:
            return [head_of(found, dt(found[8])) for found in conn.execute(sql, args)]

        return await self._read(run)

    def _seed(self, execution_id: str, rows: Iterable[Checkpoint | None], ctx: Ctx) -> None:
        """Remember the full logs of the rows just read, so a resumed run does not copy them again."""
        for row in rows:
            log_id = None if row is None else ctx.row_logs.get(row.checkpoint_id)
            if row is None or log_id is None:
                continue
            messages = ctx.logs.get(log_id)
            if messages is not None:
                self._logs.remember(execution_id, conversation_of(row.agent_path), log_id, list(messages))


if TYPE_CHECKING:  # mypy checks the backend against each surface it implements: a renamed method fails
    from .._protocol import OwnedStore, ReplicatedStore

    _OWNED: type[OwnedStore] = SQLiteStore
    _REPLICATED: type[ReplicatedStore] = SQLiteStore
