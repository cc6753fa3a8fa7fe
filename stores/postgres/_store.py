"""The PostgreSQL store on asyncpg: one round trip per write, for a fleet of processes.

Every write is one statement (:mod:`stores.postgres._sql`). The store is a front over parts it
holds: the pool's one owner, which shares concurrent appends in one statement
(:class:`~stores.postgres._writer.WriterPool`); the appends, the inbox, the outbox, the schedules
and the cache (``_appends``, ``_inbox``, ``_outbox``, ``_schedules``, ``_cache``), whose methods it
forwards; and ownership's dialect, one session advisory lock per owner id on a dedicated connection
plus a ``run_owners`` row per owned run (:class:`~stores.postgres._owners.LockOwners`, the shared
half in :mod:`stores._owners`). What both backends share (the re-plan loop, the refusals, the
re-entry walk, the prune rule) is in ``stores``' private modules.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Iterable
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

import anyio
import asyncpg

from .._base import BaseStore, LogMoved, Plan, StoreState, check_history_range, check_page
from .._codec import (
    DEFAULT_MAX_ROW_BYTES,
    encode_pending,
    rechunk,
    replay_log,
    split_chunk,
)
from .._errors import (
    check_execution_id,
    invalid_schema,
    no_checkpoints,
    no_pause,
    owned_elsewhere,
    reserved_schema,
    run_exists,
)
from .._flight import single_claim
from .._forward import Forward
from .._heads import RunHead, check_heads_arguments, head_of, heads_query
from .._json import decode
from .._model import LLM_CALL, RUN_END, Checkpoint, PendingInterrupt, ReEntry, utcnow
from .._paths import conversation_of
from .._prune import PruneRow, doomed
from .._reentry import resolve_forkable, resolve_reentry
from .._signals import SignalsWaiting
from .._watch import WAITS, RowWatch
from ._appends import Appends
from ._bridge import Bridge
from ._cache import Cache
from ._connection import (
    LOST_OR_REFUSED,
    Lost,
    describe,
    read_dsn,
    unavailable,
)
from ._inbox import Inbox, consumed_elsewhere
from ._notices import RowNotices
from ._outbox import Outbox
from ._owners import LockOwners
from ._rows import args, conflict, decode_many, decode_one, guarded, log_of, pending_of
from ._schedules import Schedules
from ._sql import notice_channel, statements
from ._writer import WriterPool

__all__ = ["PostgresStore"]

_SCHEMA_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_CLOSE_TIMEOUT: Final = 5.0


class PostgresStore(BaseStore):
    """A :class:`~stores.Store` and :class:`~stores.ReplicatedStore` on PostgreSQL (asyncpg).

    ``dsn`` is a ``postgresql://`` URI; all tables live in ``schema`` (created on first use).
    ``max_row_bytes`` bounds one row's new content (:class:`RowTooLarge` above it).
    """

    _owner_rows: LockOwners
    _cache: Cache

    # -- what the store's parts answer (see their classes) -----------------------------------------

    cache_get = Forward("_cache", Cache.get)
    cache_put = Forward("_cache", Cache.put)
    listen_for_work = Forward("_owner_rows", LockOwners.listen_for_work)
    owner_pid = Forward("_owner_rows", LockOwners.owner_pid)
    terminate_owner = Forward("_owner_rows", LockOwners.terminate_owner)

    append = Forward("_appends", Appends.append)
    append_copy = Forward("_appends", Appends.append_copy)

    signal = Forward("_inbox", Inbox.signal)
    signals = Forward("_inbox", Inbox.signals)
    append_wait = Forward("_inbox", Inbox.append_wait)
    due_waits = Forward("_inbox", Inbox.due_waits)
    next_wake = Forward("_inbox", Inbox.next_wake)
    settle_wait = Forward("_inbox", Inbox.settle_wait)

    fetch_unsynced = Forward("_outbox", Outbox.fetch_unsynced)
    mark_synced = Forward("_outbox", Outbox.mark_synced)
    mark_quarantined = Forward("_outbox", Outbox.mark_quarantined)
    sync_state = Forward("_outbox", Outbox.sync_state)
    import_rows = Forward("_outbox", Outbox.import_rows)
    cache_entries = Forward("_outbox", Outbox.cache_entries)
    fetch_unsynced_stored = Forward("_outbox", Outbox.fetch_unsynced_stored)
    fetch_unsynced_cache = Forward("_outbox", Outbox.fetch_unsynced_cache)
    mark_cache_synced = Forward("_outbox", Outbox.mark_cache_synced)
    attach_replica = Forward("_outbox", Outbox.attach_replica)
    import_run = Forward("_outbox", Outbox.import_run)
    fetch_unsynced_signals = Forward("_outbox", Outbox.fetch_unsynced_signals)
    mark_signals_synced = Forward("_outbox", Outbox.mark_signals_synced)
    mark_signals_quarantined = Forward("_outbox", Outbox.mark_signals_quarantined)
    signal_sync_state = Forward("_outbox", Outbox.signal_sync_state)
    signal_entries = Forward("_outbox", Outbox.signal_entries)
    copy_signals = Forward("_outbox", Outbox.copy_signals)

    put_schedule = Forward("_schedules", Schedules.put_schedule)
    delete_schedule = Forward("_schedules", Schedules.delete_schedule)
    list_schedules = Forward("_schedules", Schedules.list_schedules)
    due_schedules = Forward("_schedules", Schedules.due_schedules)
    advance_schedule = Forward("_schedules", Schedules.advance_schedule)

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "tether",
        min_size: int = 1,
        max_size: int = 20,
        max_row_bytes: int = DEFAULT_MAX_ROW_BYTES,
        connect_timeout: float = 10.0,
        lock_keepalive_idle: int = 5,
        max_flushers: int = 2,
    ) -> None:
        if not isinstance(schema, str) or _SCHEMA_NAME.fullmatch(schema) is None:
            raise invalid_schema(schema)
        if schema.lower().startswith("pg_") or schema.lower() == "information_schema":
            raise reserved_schema(schema)
        super().__init__(max_row_bytes=max_row_bytes)
        self.dsn = read_dsn(dsn)
        self._lost_guard = Lost(self.dsn)
        self.schema = schema
        self._sql = statements(schema)
        #: asyncpg's loop when the caller's is not asyncio (see :mod:`stores.postgres._bridge`).
        self._bridge = Bridge()
        self._db = WriterPool(
            self.dsn,
            schema=schema,
            sql=self._sql,
            bridge=self._bridge,
            min_size=min_size,
            max_size=max_size,
            connect_timeout=connect_timeout,
            max_flushers=max_flushers,
            lost=self._lost,
            refuse_closed=self._refuse_closed,
            opened=self._opened,
            write_planned=self._write_planned,
            forget=self._logs.forget,
        )
        self._owner_rows = LockOwners(
            self._own,
            schema=schema,
            dsn=self.dsn,
            bridge=self._bridge,
            ready=self._db.ready,
            lost=self._lost,
            refuse_closed=self._refuse_closed,
            connect_timeout=connect_timeout,
            keepalive_idle=lock_keepalive_idle,
        )
        #: The LISTEN/NOTIFY channel that tells workers a run was handed to the fleet.
        self.work_channel = self._owner_rows.work_channel
        own, rows, write = self._own, self._owner_rows, self._write_planned
        self._appends = Appends(
            self._db, schema=schema, logs=self._logs, own=own, owner_rows=rows, write_planned=write
        )
        self._inbox = Inbox(
            self._db, sql=self._sql, schema=schema, own=own, owner_rows=rows, write_planned=write
        )
        self._outbox = Outbox(self._db, self._sql, self._logs)
        self._schedules = Schedules(self._db, schema)
        self._cache = Cache(self._db, self._sql)
        self._notices = RowNotices(
            dsn, notice_channel(schema), connect_timeout=connect_timeout, bridge=self._bridge
        )

    def __repr__(self) -> str:
        return f"PostgresStore({describe(self.dsn)}, schema={self.schema!r})"

    # -- setup and teardown -------------------------------------------------------------------

    async def setup(self) -> None:
        """Create the pool and migrate the schema (idempotent; safe when processes race)."""
        await self._db.ready()

    def _ready(self) -> Awaitable[asyncpg.Pool]:
        """The pool, opened on first use (:meth:`WriterPool.ready`)."""
        return self._db.ready()

    def _opened(self) -> None:
        """The pool is open and migrated: the store is ready."""
        self._state = StoreState.READY

    async def close(self) -> None:
        """Close the pool and the lock connection (releasing every ownership lock); idempotent."""
        self._state = StoreState.CLOSED
        close_pool = self._db.detach()
        await self._notices.close()
        with anyio.CancelScope(shield=True):
            await self._owner_rows.liveness.close()
            await close_pool()
            await self._bridge.close()

    # -- writes -------------------------------------------------------------------------------

    async def append_pause(self, row: Checkpoint, pending: PendingInterrupt) -> None:
        """Append the interrupted row and the pending row in one statement."""
        extra = (
            pending.reason,
            encode_pending(pending),
            pending.node_id,
            pending.agent_path,
            pending.created_at,
            pending.expires_at,
        )

        async def write(take: str | None, release: str | None) -> None:
            plan = None if take is None else self._appends.first_plan(row)  # refused before any take
            await self._owner_rows.ride(
                row.execution_id,
                take,
                lambda via: self._write_planned("pause", row, plan, (*extra, release), via=via),
            )

        await self._own.carrying(row.execution_id, True, write)

    async def _write_planned(
        self,
        kind: str,
        row: Checkpoint,
        plan: Plan | None,
        extra: tuple[Any, ...],
        via: asyncpg.pool.PoolConnectionProxy | None = None,
    ) -> None:
        """Write a row with one statement, on ``via`` or a pooled connection, re-planning while
        the log guard refuses it (``plan``: its first plan, if made already)."""

        async def attempt(plan: Plan) -> None:
            runner = via if via is not None else await self._ready()
            if await self._run(runner, kind, row, plan, extra):
                return
            # Nothing inserted: the run exists (seq 0), steering messages wait for a model turn,
            # the signals a row consumes are gone, or our memory of its log is stale.
            if row.seq == 0 and not guarded(plan):
                raise run_exists(row.execution_id)
            eid = row.execution_id
            if kind == "append_consume" and extra[0]:
                unconsumed = {found.id for found in await self._inbox.signals(eid)}
                if not unconsumed.issuperset(extra[0]):
                    raise consumed_elsewhere(row)
            elif (
                row.step_type == LLM_CALL and kind != "append_copy" and await self._inbox.steering_waits(eid)
            ):
                raise SignalsWaiting(eid)
            raise LogMoved

        await self._planned(row, attempt, plan)

    async def _run(
        self,
        runner: asyncpg.Pool | asyncpg.pool.PoolConnectionProxy,
        kind: str,
        row: Checkpoint,
        plan: Plan,
        extra: tuple[Any, ...],
    ) -> bool:
        """Run a row's statement ``kind``; whether it wrote the row. A lost connection is
        ``StoreUnavailable`` as :meth:`_lost` makes it (caught here: this is every append's path)."""
        if kind == "append" and row.seq != 0 and row.step_type != RUN_END:
            kind = "append_step"
        values = (*args(plan), *extra)
        try:
            statement = await self._db.statement(runner, kind)  # a kept writer's, prepared once
            if kind == "append_own":  # the take is checked first: a refused take is the refusal
                rec = await (
                    runner.fetchrow(self._sql[kind], *values)
                    if statement is None
                    else statement.fetchrow(*values)
                )
                assert rec is not None
                if not rec["took"]:
                    raise owned_elsewhere(row.execution_id)
                return bool(rec["written"])
            return bool(
                await (
                    runner.fetchval(self._sql[kind], *values)
                    if statement is None
                    else statement.fetchval(*values)
                )
            )
        except asyncpg.UniqueViolationError as exc:
            raise conflict(row, exc) from None
        except LOST_OR_REFUSED as exc:
            raise unavailable(self.dsn, exc) from None

    async def claim(self, row: Checkpoint) -> PendingInterrupt:
        """Delete the pending row and append the ``resume`` row in one statement.

        A claim of a run that another claimer of this process (any store on the same DSN and schema)
        is already claiming waits for that one: if it won, this one lost without a round trip.
        """
        eid = row.execution_id

        async def write(take: str | None, _: str | None) -> PendingInterrupt:
            if take is None:
                return await single_claim(
                    ("postgres", self.dsn, self.schema, eid),
                    lambda: self._claim_row(row),
                    lambda: no_pause(eid),
                )
            # The run rested here (a pause): its claim takes it again, in one transaction.
            return await self._owner_rows.ride(
                eid, take, lambda via: self._claim_row(row, via), take_last=True
            )

        return await self._own.carrying(eid, False, write)

    async def _claim_row(
        self, row: Checkpoint, via: asyncpg.pool.PoolConnectionProxy | None = None
    ) -> PendingInterrupt:
        eid = row.execution_id

        async def attempt(plan: Plan) -> PendingInterrupt:
            runner = via if via is not None else await self._ready()
            try:
                with self._lost():
                    rec = await runner.fetchrow(self._sql["claim"], *args(plan))
            except asyncpg.UniqueViolationError as exc:
                raise conflict(row, exc) from None
            assert rec is not None
            if rec["execution_id"] is not None:
                return pending_of(rec)
            if rec["was_pending"] and guarded(plan):
                raise LogMoved  # the pause is there; our memory of the log was stale
            raise no_pause(eid) if rec["known"] else no_checkpoints(eid)

        return await self._planned(row, attempt)

    # -- reads --------------------------------------------------------------------------------

    async def latest(self, execution_id: str) -> Checkpoint | None:
        """The newest row (one round trip); seeds the message memory with its conversation's log."""
        check_execution_id(execution_id)
        pool = await self._ready()
        with self._lost():
            rec = await pool.fetchrow(self._sql["newest"], execution_id)
        if rec is None:
            return None
        row = decode_one(rec)
        self._seed([(row, rec)])
        return row

    async def reentry(self, execution_id: str) -> ReEntry:
        """Where a resume re-enters (usually one round trip: the newest row is the step)."""
        check_execution_id(execution_id)
        pool = await self._ready()
        seen: list[tuple[Checkpoint, asyncpg.Record]] = []

        async def fetch(name: str, *more: Any) -> Checkpoint | None:
            with self._lost():
                rec = await pool.fetchrow(self._sql[name], execution_id, *more)
            if rec is None:
                return None
            row = decode_one(rec)
            seen.append((row, rec))
            return row

        async def row_at(seq: int) -> Checkpoint | None:
            return await fetch("row_at", seq)

        async def row_before(seq: int) -> Checkpoint | None:
            return await fetch("row_before", seq)

        newest = await fetch("newest")
        entry = await resolve_reentry(execution_id, newest, row_at, row_before)
        self._seed(seen)
        return entry

    async def forkable(self, execution_id: str, checkpoint_id: str | None = None) -> Checkpoint:
        """The row a fork starts from (see :func:`stores._reentry.resolve_forkable`)."""
        check_execution_id(execution_id)
        pool = await self._ready()

        async def fetch(name: str, *more: Any) -> Checkpoint | None:
            with self._lost():
                rec = await pool.fetchrow(self._sql[name], execution_id, *more)
            return None if rec is None else decode_one(rec)

        async def row_at(seq: int) -> Checkpoint | None:
            return await fetch("row_at", seq)

        async def row_before(seq: int) -> Checkpoint | None:
            return await fetch("row_before", seq)

        if checkpoint_id is None:
            newest, named = await fetch("newest"), None
        else:
            newest, named = None, await fetch("get", checkpoint_id)
        return await resolve_forkable(execution_id, newest, named, checkpoint_id, row_at, row_before)

    async def get(self, execution_id: str, checkpoint_id: str) -> Checkpoint | None:
        """One row by id (both keys must match)."""
        check_execution_id(execution_id)
        pool = await self._ready()
        with self._lost():
            rec = await pool.fetchrow(self._sql["get"], execution_id, checkpoint_id)
        return None if rec is None else decode_one(rec)

    async def history(
        self, execution_id: str, *, since: int = 0, limit: int | None = None
    ) -> list[Checkpoint]:
        """The rows in ``seq`` order from ``since`` on, at most ``limit`` (one round trip; each
        message log crosses the wire once)."""
        check_execution_id(execution_id)
        check_history_range(since, limit)
        pool = await self._ready()
        with self._lost():
            recs = await pool.fetch(self._sql["history"], execution_id, since, limit)
        return decode_many(recs)

    def watch(self, execution_id: str) -> RowWatch:
        """A watch on the run woken by the rows' ``NOTIFY`` (any process), polling as a fallback."""
        return self._notices.watch(execution_id)

    def watch_waits(self) -> RowWatch:
        """A watch on the resting runs woken by a signal's ``NOTIFY`` when it made one due (any
        process), and by a ``wait`` row due at once; polling as a fallback."""
        return self._notices.watch(WAITS)

    async def pending(
        self,
        execution_id: str | None = None,
        *,
        limit: int | None = None,
        after: PendingInterrupt | None = None,
    ) -> list[PendingInterrupt]:
        """Pending interrupts, newest first; all runs, or one; a page of ``limit`` after ``after``."""
        check_page(execution_id, limit, after)
        pool = await self._ready()
        with self._lost():
            if execution_id is not None:
                # One run has at most one pending row (its primary key): ``limit`` cannot cut it.
                cursor = (None, None) if after is None else (after.created_at, after.execution_id)
                recs = await pool.fetch(self._sql["pending_one"], execution_id, *cursor)
            elif after is None:
                recs = await pool.fetch(self._sql["pending_page"], limit)
            else:
                recs = await pool.fetch(
                    self._sql["pending_after"], limit, after.created_at, after.execution_id
                )
        return [pending_of(r) for r in recs]

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
        sql, params = heads_query(
            f'"{self.schema}".checkpoints',
            lambda n: f"${n}",
            execution_id=execution_id,
            runner=runner,
            state=state,
            before=before,
            limit=limit,
        )
        pool = await self._ready()
        with self._lost():
            recs = await pool.fetch(sql, *params)
        return [head_of(tuple(rec), rec["created_at"]) for rec in recs]

    def _seed(self, rows: Iterable[tuple[Checkpoint, asyncpg.Record]]) -> None:
        """Remember the full log of each conversation read (newest row first wins)."""
        done: set[str] = set()
        for row, rec in sorted(rows, key=lambda pair: -pair[0].seq):
            conversation = conversation_of(row.agent_path)
            if rec["log_id"] is None or conversation in done:
                continue
            done.add(conversation)
            self._logs.remember(row.execution_id, conversation, rec["log_id"], log_of(rec[18]))

    # -- deletes ------------------------------------------------------------------------------

    async def delete_run(self, execution_id: str) -> int:
        """Delete everything of a run in one statement; returns the rows deleted."""
        check_execution_id(execution_id)
        pool = await self._ready()
        self._logs.forget(execution_id)
        with self._lost():
            count: int = await pool.fetchval(self._sql["delete_run"], execution_id)
        return count

    async def prune(self, older_than: timedelta) -> int:
        """The prune rule (:mod:`stores._prune`) in one transaction; returns checkpoint rows deleted.

        Message logs no remaining row references go with the rows.
        """
        cutoff = utcnow() - older_than
        pool = await self._ready()
        deleted = 0
        by_run: dict[str, list[PruneRow]] = {}
        with self._lost():
            async with pool.acquire() as conn, conn.transaction():
                for rec in await conn.fetch(self._sql["prune_skeleton"], cutoff):
                    node_input = rec["node_input"]
                    by_run.setdefault(rec["execution_id"], []).append(
                        PruneRow(
                            rec["seq"],
                            rec["step_type"],
                            rec["status"],
                            rec["old"],
                            {} if node_input is None else decode(node_input),
                            rec["agent_path"],
                        )
                    )
                completed: list[str] = []
                runs: list[str] = []
                seqs: list[int] = []
                for execution_id, skeleton in by_run.items():
                    done, doomed_seqs = doomed(execution_id, skeleton)
                    if done:
                        completed.append(execution_id)
                    runs += [execution_id] * len(doomed_seqs)
                    seqs += doomed_seqs
                if completed:
                    await conn.execute(self._sql["prune_done_cache"], completed, cutoff)
                if runs:
                    deleted = await self._delete_rows(conn, runs, seqs)
        for execution_id in by_run:
            self._logs.forget(execution_id)
        return deleted

    async def _delete_rows(
        self, conn: asyncpg.pool.PoolConnectionProxy, runs: list[str], seqs: list[int]
    ) -> int:
        """Delete rows (inside the caller's transaction); the messages they added move onto the
        remaining rows of their logs that need them (see :func:`stores._codec.rechunk`)."""
        logs: dict[tuple[str, str], list[tuple[int, bytes]]] = {}
        for rec in await conn.fetch(self._sql["prune_logs"], runs, seqs):
            logs.setdefault((rec[0], rec[1]), []).append((rec[2], rec[3]))
        deleted: int = await conn.fetchval(self._sql["prune_rows"], runs, seqs)
        ids: list[int] = []
        chunks: list[bytes | None] = []
        for (execution_id, log_id), held in logs.items():
            bodies = replay_log(held, split_chunk)
            rows = await conn.fetch(self._sql["log_rows"], execution_id, log_id)
            for rec, chunk in zip(rows, rechunk([r[1] for r in rows], bodies), strict=True):
                if chunk != rec[2]:
                    ids.append(rec[0])
                    chunks.append(chunk)
        if ids:
            await conn.execute(self._sql["set_chunks"], ids, chunks)
        return deleted

    # -- ownership (the dialect is ``self._owner_rows``) ----------------------------------------

    @property
    def _lock_conn(self) -> asyncpg.Connection | None:
        """The lock connection holding this store's liveness lock, if open."""
        return self._owner_rows.liveness.connection

    # -- errors -------------------------------------------------------------------------------

    def _lost(self) -> AbstractContextManager[None]:
        """Turn a lost connection into :class:`StoreUnavailable` naming the host (:class:`Lost`)."""
        return self._lost_guard


if TYPE_CHECKING:  # mypy checks the backend against each surface it implements: a renamed method fails
    from .._protocol import OwnedStore, OwnerSessions, ReplicatedStore

    _OWNED: type[OwnedStore] = PostgresStore
    _REPLICATED: type[ReplicatedStore] = PostgresStore
    _SESSIONS: type[OwnerSessions] = PostgresStore
