"""A plain in-memory store: the model the stateful test compares backends with.

It follows the protocol docstrings and rule 10 literally and keeps everything in dicts; it also
runs the conformance suite (tests/stores/test_conformance.py), which checks the suite itself.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

import msgspec
from _memory_inbox import MemoryInboxOutbox
from _model_rules import added_bytes, json_copy, stored_row, text_field, walk

from stores import (
    COMPLETED,
    CONSUMES,
    LLM_CALL,
    MESSAGE,
    RUN_END,
    SIGNAL,
    WAKE,
    AlreadyResumed,
    Cached,
    CacheEntry,
    Checkpoint,
    IncompatibleSchema,
    PendingInterrupt,
    ReEntry,
    RowWatch,
    RunExists,
    RunHead,
    RunNotFound,
    SignalsWaiting,
    StoredRow,
    StoredSchedule,
    StoredSignal,
    WriteConflict,
    check_execution_id,
    new_id,
    utcnow,
)
from stores.lowlevel import (
    DEFAULT_MAX_ROW_BYTES,
    WAITS,
    MessageLogs,
    check_copy,
    check_heads_arguments,
    check_history_range,
    check_page,
    check_signal,
    intent_key,
    marker_not_step,
    no_checkpoint,
    no_checkpoints,
    refuse_signal,
    restored_wait,
)

__all__ = ["MemoryDatabase", "MemoryStore"]

SCHEMA_VERSION = 1


class MemoryDatabase:
    """What a database file would hold; shared by every :class:`MemoryStore` opened on it."""

    def __init__(self) -> None:
        self.schema_version = 0
        self.rows: dict[str, dict[int, Checkpoint]] = {}
        self.ids: dict[str, tuple[str, int]] = {}
        self.order: dict[str, int] = {}
        self.sync: dict[str, tuple[bool, str | None]] = {}
        self.pending: dict[str, PendingInterrupt] = {}
        self.cache: dict[tuple[str, str], tuple[Any, Any]] = {}
        self.locks: dict[str, int] = {}
        self.cache_sent: set[tuple[str, str]] = set()
        self.attached = False
        self.counter = itertools.count()
        self.signals: list[StoredSignal] = []
        self.signal_ids = itertools.count(1)
        self.signal_sync: dict[str, tuple[bool, str | None]] = {}  # by signal_id
        self.waits: dict[str, tuple[int, str | None, datetime | None]] = {}
        self.schedules: dict[str, StoredSchedule] = {}


_instances = itertools.count(1)
T = TypeVar("T")


class MemoryStore(MemoryInboxOutbox):
    """An in-memory :class:`~stores.Store` and :class:`~stores.ReplicatedStore`."""

    def __init__(
        self, db: MemoryDatabase | None = None, *, max_row_bytes: int = DEFAULT_MAX_ROW_BYTES
    ) -> None:
        self.db = db if db is not None else MemoryDatabase()
        self._max_row_bytes = max_row_bytes
        self._me = next(_instances)
        self._held: set[str] = set()  # the runs this store holds
        # Held runs whose lock a resting row (run_end, pause) dropped: the next write takes it again.
        self._resting: set[str] = set()

    async def setup(self) -> None:
        if self.db.schema_version > SCHEMA_VERSION:
            raise IncompatibleSchema(
                f"schema version {self.db.schema_version} is newer than {SCHEMA_VERSION}"
            )
        self.db.schema_version = SCHEMA_VERSION

    async def close(self) -> None:
        for eid in [e for e, owner in self.db.locks.items() if owner == self._me]:
            del self.db.locks[eid]
        self._held.clear()
        self._resting.clear()

    def _owning(self, eid: str, write: Callable[[], T], *, rests: bool, check: Callable[[], Any]) -> T:
        """``write()`` with the ownership a held run's row carries: a rested run is taken again
        (after ``check()``, the row's own validation; refused if another holds it), undone with a
        failed write; a resting row drops the lock."""
        if eid in self._resting:
            self._resting.discard(eid)  # even when refused: the run counts as taken, unlock releases
            check()
            if self.db.locks.get(eid) not in (None, self._me):
                raise RunExists(f"run {eid!r} is owned by another live process or actor")
            value = write()
            self.db.locks[eid] = self._me
        else:
            value = write()
        if rests and eid in self._held:
            if self.db.locks.get(eid) == self._me:
                del self.db.locks[eid]
            self._resting.add(eid)
        return value

    # -- writes ------------------------------------------------------------------------------------

    def _check(self, row: Checkpoint) -> Checkpoint:
        """Validate by the documented rules (the id's limits, the JSON rule, the size of the new content)."""
        check_execution_id(row.execution_id)
        stored = stored_row(row)
        earlier = [r for r in self._sorted(row.execution_id) if r.seq < row.seq]
        added_bytes(stored, earlier, self._max_row_bytes)
        return stored

    def _conflict(self, row: Checkpoint) -> None:
        run = self.db.rows.get(row.execution_id, {})
        if row.seq == 0 and run:
            raise RunExists(f"run {row.execution_id!r} already has rows")
        if row.seq in run or row.checkpoint_id in self.db.ids:
            raise WriteConflict(f"seq {row.seq} or checkpoint {row.checkpoint_id!r} is taken")

    def _insert(self, row: Checkpoint, *, synced: bool = False) -> None:
        self.db.rows.setdefault(row.execution_id, {})[row.seq] = row
        self.db.ids[row.checkpoint_id] = (row.execution_id, row.seq)
        self.db.order[row.checkpoint_id] = next(self.db.counter)
        self.db.sync[row.checkpoint_id] = (synced, None)

    async def append_copy(self, row: Checkpoint) -> None:
        self._conflict(row)
        self._insert(self._check(row))  # the inbox untouched, no ownership
        if row.step_type == RUN_END:
            self.db.pending.pop(row.execution_id, None)

    async def append(self, row: Checkpoint) -> None:
        self._owning(
            row.execution_id,
            lambda: self._append(row),
            rests=row.step_type == RUN_END,
            check=lambda: self._check(row),
        )

    def _append(self, row: Checkpoint) -> None:
        self._conflict(row)
        stored = self._check(row)
        self._inbox(stored)
        self._insert(stored)
        if stored.step_type == RUN_END:
            self.db.pending.pop(stored.execution_id, None)

    def _inbox(self, row: Checkpoint) -> None:
        """Mark the signals ``row`` consumes, or refuse a model turn's row while messages wait."""
        eid = row.execution_id
        consumes = row.node_input.get(CONSUMES)
        if row.step_type in (SIGNAL, WAKE) and self.db.waits.get(eid, (row.seq,))[0] < row.seq:
            del self.db.waits[eid]
        if isinstance(consumes, list) and consumes:
            open_ids = {s.id for s in self.db.signals if s.execution_id == eid and s.consumed_seq is None}
            if not open_ids.issuperset(consumes):
                raise WriteConflict(f"run {eid!r}: the signals row {row.seq} consumes were consumed already")
            self.db.signals = [
                msgspec.structs.replace(s, consumed_seq=row.seq) if s.id in consumes else s
                for s in self.db.signals
            ]
            for s in self.db.signals:
                if s.id in consumes:
                    self.db.signal_sync[s.signal_id] = (False, None)  # its new state: to send
        elif row.step_type == LLM_CALL and any(
            s.execution_id == eid and s.name == MESSAGE and s.consumed_seq is None for s in self.db.signals
        ):
            raise SignalsWaiting(eid)

    async def signal(self, execution_id: str, name: str, payload: Any = None) -> int:
        check_signal(execution_id, name, payload)
        run = self._sorted(execution_id)
        refuse_signal(execution_id, (run[-1].step_type, run[-1].status) if run else None)
        found = StoredSignal(
            id=next(self.db.signal_ids),
            execution_id=execution_id,
            name=name,
            payload=json_copy(payload, "$.payload"),
            created_at=utcnow(),
            signal_id=new_id(),
        )
        self.db.signals.append(found)
        self.db.signal_sync[found.signal_id] = (False, None)
        wait = self.db.waits.get(execution_id)
        if wait is not None and wait[1] == name and (wait[2] is None or wait[2] > found.created_at):
            self.db.waits[execution_id] = (wait[0], name, found.created_at)
        return found.id

    async def append_wait(self, row: Checkpoint, name: str | None, wake_at: datetime | None) -> None:
        def write() -> None:
            self._append(row)
            due = wake_at
            if name is not None and any(
                s.execution_id == row.execution_id and s.name == name and s.consumed_seq is None
                for s in self.db.signals
            ):
                due = utcnow()
            self.db.waits[row.execution_id] = (row.seq, name, due)

        self._owning(row.execution_id, write, rests=True, check=lambda: self._check(row))

    async def due_waits(self, limit: int) -> list[tuple[str, int]]:
        now = utcnow()
        due = sorted(
            (w[2], eid, w[0]) for eid, w in self.db.waits.items() if w[2] is not None and w[2] <= now
        )
        return [(eid, seq) for _, eid, seq in due[:limit]]

    async def put_schedule(self, schedule: StoredSchedule) -> None:
        json_copy(schedule.input, "$.input")
        old = self.db.schedules.get(schedule.name)
        if old is not None and (old.cron, old.every) == (schedule.cron, schedule.every):
            schedule = msgspec.structs.replace(schedule, next_at=old.next_at, last_run=old.last_run)
        self.db.schedules[schedule.name] = schedule

    async def delete_schedule(self, name: str) -> bool:
        return self.db.schedules.pop(name, None) is not None

    async def list_schedules(self) -> list[StoredSchedule]:
        return [self.db.schedules[name] for name in sorted(self.db.schedules)]

    async def due_schedules(self, now: datetime, limit: int) -> list[StoredSchedule]:
        due = sorted((s for s in self.db.schedules.values() if s.next_at <= now), key=lambda s: s.next_at)
        return due[:limit]

    async def advance_schedule(self, name: str, seen: datetime, next_at: datetime, last_run: str) -> bool:
        found = self.db.schedules.get(name)
        if found is None or found.next_at != seen:
            return False
        self.db.schedules[name] = msgspec.structs.replace(found, next_at=next_at, last_run=last_run)
        return True

    async def next_wake(self, after: datetime | None = None) -> datetime | None:
        times = (w[2] for w in self.db.waits.values() if w[2] is not None)
        return min((t for t in times if after is None or t > after), default=None)

    async def settle_wait(self, execution_id: str, seq: int) -> None:
        if self.db.waits.get(execution_id, (None,))[0] == seq:
            del self.db.waits[execution_id]

    async def signals(
        self, execution_id: str, *, name: str | None = None, consumed_by: int | None = None
    ) -> list[StoredSignal]:
        check_execution_id(execution_id)
        return [
            s
            for s in self.db.signals
            if s.execution_id == execution_id
            and s.consumed_seq == consumed_by
            and (name is None or s.name == name)
        ]

    async def append_pause(self, row: Checkpoint, pending: PendingInterrupt) -> None:
        def check() -> None:
            self._check_pending(pending)
            self._check(row)

        self._owning(row.execution_id, lambda: self._append_pause(row, pending), rests=True, check=check)

    def _check_pending(self, pending: PendingInterrupt) -> Any:
        check_execution_id(pending.execution_id)
        for name in ("execution_id", "reason", "node_id", "agent_path"):
            text_field(getattr(pending, name), f"$.{name}")
        return json_copy(pending.context, "$.context")

    def _append_pause(self, row: Checkpoint, pending: PendingInterrupt) -> None:
        self._conflict(row)
        if row.execution_id in self.db.pending:
            raise WriteConflict(f"run {row.execution_id!r} is already paused")
        context = self._check_pending(pending)
        stored = self._check(row)
        self._insert(stored)
        self.db.pending[stored.execution_id] = PendingInterrupt(
            execution_id=pending.execution_id,
            reason=pending.reason,
            context=context,
            node_id=pending.node_id,
            agent_path=pending.agent_path,
            created_at=pending.created_at,
        )

    async def claim(self, row: Checkpoint) -> PendingInterrupt:
        eid = row.execution_id
        if not self.db.rows.get(eid):
            raise RunNotFound(f"run {eid!r} has no checkpoints")
        if eid not in self.db.pending:
            raise AlreadyResumed(f"run {eid!r} has no pending interrupt to claim")
        return self._owning(eid, lambda: self._claim(row), rests=False, check=lambda: self._check(row))

    def _claim(self, row: Checkpoint) -> PendingInterrupt:
        self._conflict(row)
        stored = self._check(row)
        self._insert(stored)
        return self.db.pending.pop(row.execution_id)

    # -- reads -----------------------------------------------------------------------------------

    def _sorted(self, eid: str) -> list[Checkpoint]:
        run = self.db.rows.get(eid, {})
        return [run[s] for s in sorted(run)]

    async def _row_at(self, eid: str, seq: int) -> Checkpoint | None:
        return self.db.rows.get(eid, {}).get(seq)

    async def _row_before(self, eid: str, seq: int) -> Checkpoint | None:
        below = [r for r in self._sorted(eid) if r.seq < seq]
        return below[-1] if below else None

    async def latest(self, execution_id: str) -> Checkpoint | None:
        check_execution_id(execution_id)
        rows = self._sorted(execution_id)
        return rows[-1] if rows else None

    async def reentry(self, execution_id: str) -> ReEntry:
        check_execution_id(execution_id)
        newest = await self.latest(execution_id)
        if newest is None:
            raise no_checkpoints(execution_id)
        step, decision, _ = walk(execution_id, self.db.rows[execution_id], newest, refuse_finished=True)
        return ReEntry(step=step, newest=newest, resume=decision)

    async def forkable(self, execution_id: str, checkpoint_id: str | None = None) -> Checkpoint:
        check_execution_id(execution_id)
        if checkpoint_id is not None:
            start = await self.get(execution_id, checkpoint_id)
            if start is None:
                raise no_checkpoint(execution_id, checkpoint_id)
            if start.step_type == RUN_END:
                raise marker_not_step(execution_id, checkpoint_id)
        else:
            start = await self.latest(execution_id)
            if start is None:
                raise no_checkpoints(execution_id)
        step, _, _ = walk(execution_id, self.db.rows[execution_id], start, refuse_finished=False)
        return step

    async def get(self, execution_id: str, checkpoint_id: str) -> Checkpoint | None:
        check_execution_id(execution_id)
        where = self.db.ids.get(checkpoint_id)
        if where is None or where[0] != execution_id:
            return None
        return self.db.rows[where[0]][where[1]]

    async def history(
        self, execution_id: str, *, since: int = 0, limit: int | None = None
    ) -> list[Checkpoint]:
        check_execution_id(execution_id)
        check_history_range(since, limit)
        rows = [row for row in self._sorted(execution_id) if row.seq >= since]
        return rows if limit is None else rows[:limit]

    def watch(self, execution_id: str) -> RowWatch:
        return RowWatch(execution_id)

    def watch_waits(self) -> RowWatch:
        return RowWatch(WAITS)

    async def pending(
        self,
        execution_id: str | None = None,
        *,
        limit: int | None = None,
        after: PendingInterrupt | None = None,
    ) -> list[PendingInterrupt]:
        check_page(execution_id, limit, after)
        found = [p for e, p in self.db.pending.items() if execution_id is None or e == execution_id]
        if after is not None:
            found = [
                p for p in found if (p.created_at, p.execution_id) < (after.created_at, after.execution_id)
            ]
        return sorted(found, key=lambda p: (p.created_at, p.execution_id), reverse=True)[:limit]

    async def heads(
        self,
        *,
        execution_id: str | None = None,
        runner: str | None = None,
        state: str | None = None,
        before: tuple[datetime, str] | None = None,
        limit: int = 100,
    ) -> list[RunHead]:
        check_heads_arguments(state, limit)
        found = []
        for eid in self.db.rows:
            rows = self._sorted(eid)
            if not rows or execution_id not in (None, eid):
                continue
            top = rows[-1]
            snapshot = {k: v for k, v in top.state_snapshot.items() if k != "messages"}
            head = RunHead(
                execution_id=eid, runner=top.runner, seq=top.seq, rows=len(rows), node_id=top.node_id,
                agent_path=top.agent_path, step_type=top.step_type, status=top.status,
                updated_at=top.created_at, snapshot=snapshot,
            )  # fmt: skip
            if runner not in (None, head.runner) or state not in (None, head.state):
                continue
            if before is not None and (head.updated_at, eid) >= before:
                continue
            found.append(head)
        found.sort(key=lambda h: (h.updated_at, h.execution_id), reverse=True)
        return found[:limit]

    # -- deletes ---------------------------------------------------------------------------------

    def _drop(self, row: Checkpoint) -> None:
        del self.db.rows[row.execution_id][row.seq]
        if not self.db.rows[row.execution_id]:
            del self.db.rows[row.execution_id]
        for table in (self.db.ids, self.db.order, self.db.sync):
            table.pop(row.checkpoint_id, None)

    async def delete_run(self, execution_id: str) -> int:
        check_execution_id(execution_id)
        rows = self._sorted(execution_id)
        for row in rows:
            self._drop(row)
        self.db.pending.pop(execution_id, None)
        for key in [k for k in self.db.cache if k[0] == execution_id]:
            del self.db.cache[key]
        return len(rows)

    async def prune(self, older_than: timedelta) -> int:
        cutoff = utcnow() - older_than
        deleted = 0
        db = self.db

        def old(row: Checkpoint) -> bool:  # attached to a replicator: only what the plane accepted
            return row.created_at < cutoff and (not db.attached or db.sync[row.checkpoint_id][0])

        for eid in list(db.rows):
            rows = self._sorted(eid)
            newest = rows[-1]
            if newest.step_type == RUN_END and newest.status == COMPLETED:
                doomed = [r for r in rows if old(r)]
                for key in [
                    k
                    for k, (_, at) in db.cache.items()
                    if k[0] == eid and at < cutoff and (not db.attached or k in db.cache_sent)
                ]:
                    del db.cache[key]
            else:
                keep = await self._reentry_chain(eid, rows)
                doomed = [r for r in rows if r.status == COMPLETED and old(r) and r.seq not in keep]
            for row in doomed:
                self._drop(row)
            deleted += len(doomed)
        return deleted

    async def _reentry_chain(self, eid: str, rows: list[Checkpoint]) -> set[int]:
        """The rows prune keeps of a run that has not completed: the newest row, the re-entry row
        (the newest that is not a marker) and every row the re-entry walk reads."""
        keep = {rows[-1].seq}
        non_markers = [r for r in rows if r.step_type != RUN_END]
        if non_markers:
            keep.add(non_markers[-1].seq)
        read: set[int] = set()
        try:
            walk(eid, self.db.rows[eid], rows[-1], refuse_finished=False, read=read)
        except RunNotFound:
            pass  # only markers and bookkeeping: keep what the walk read
        return keep | read

    # -- cache -----------------------------------------------------------------------------------

    async def cache_get(self, execution_id: str, key: str) -> Cached | None:
        check_execution_id(execution_id)
        hit = self.db.cache.get((execution_id, key))
        return None if hit is None else Cached(hit[0])

    async def cache_put(self, execution_id: str, key: str, value: Any) -> Any:
        check_execution_id(execution_id)
        text_field(key, "$.key")
        normal = json_copy(value, "$")
        hit = self.db.cache.setdefault((execution_id, key), (normal, utcnow()))
        return hit[0]

    async def cache_intend(self, execution_id: str, key: str) -> Cached | bool:
        hit = self.db.cache.get((execution_id, key))
        if hit is not None:
            return Cached(hit[0])
        marker = (execution_id, intent_key(key))
        if marker in self.db.cache:
            return False
        self.db.cache[marker] = ({"intent": "recorded"}, utcnow())
        return True

    # -- ownership lock --------------------------------------------------------------------------

    async def try_lock(self, execution_id: str) -> bool:
        check_execution_id(execution_id)
        if execution_id in self._held:
            return False
        owner = self.db.locks.get(execution_id)
        if owner is None:
            self.db.locks[execution_id] = self._me
            self._held.add(execution_id)
            return True
        return False

    async def unlock(self, execution_id: str) -> None:
        check_execution_id(execution_id)
        self._held.discard(execution_id)
        if execution_id in self._resting:
            self._resting.discard(execution_id)  # its lock went with its resting row
        elif self.db.locks.get(execution_id) == self._me:
            del self.db.locks[execution_id]

    async def owned(self, execution_ids: Sequence[str]) -> set[str]:
        return {eid for eid in execution_ids if eid in self.db.locks}

    # -- outbox ----------------------------------------------------------------------------------

    async def fetch_unsynced(self, limit: int) -> list[Checkpoint]:
        ids = sorted((i for i, (s, _) in self.db.sync.items() if not s), key=self.db.order.__getitem__)
        out = []
        for cid in ids[:limit]:
            eid, seq = self.db.ids[cid]
            out.append(self.db.rows[eid][seq])
        return out

    async def mark_synced(self, checkpoint_ids: Sequence[str]) -> None:
        for cid in checkpoint_ids:
            if cid in self.db.sync:
                self.db.sync[cid] = (True, self.db.sync[cid][1])

    async def mark_quarantined(self, reasons: dict[str, str]) -> None:
        for cid, reason in reasons.items():
            if cid in self.db.sync:
                self.db.sync[cid] = (True, reason)

    async def sync_state(self, checkpoint_id: str) -> tuple[bool, str | None] | None:
        return self.db.sync.get(checkpoint_id)

    async def import_rows(self, rows: Sequence[Checkpoint]) -> int:
        inserted = 0
        for row in rows:
            if row.checkpoint_id in self.db.ids or row.seq in self.db.rows.get(row.execution_id, {}):
                continue
            self._insert(self._check(row), synced=True)
            inserted += 1
        return inserted

    async def cache_entries(self, execution_id: str) -> list[CacheEntry]:
        found = [
            CacheEntry(execution_id=eid, key=key, value=value, created_at=created)
            for (eid, key), (value, created) in self.db.cache.items()
            if eid == execution_id
        ]
        return sorted(found, key=lambda e: (e.created_at, e.key))

    async def import_run(
        self,
        execution_id: str,
        rows: Sequence[Checkpoint],
        cache: Sequence[CacheEntry],
        pending: PendingInterrupt | None,
        signals: Sequence[StoredSignal] = (),
    ) -> int:
        if self.db.rows.get(execution_id):
            raise RunExists(f"run {execution_id!r} already has checkpoints")
        checked = [self._check(row) for row in sorted(rows, key=lambda r: r.seq)]
        for entry in cache:
            text_field(entry.key, "$.key")
            json_copy(entry.value, "$")
        for found in signals:
            check_copy(found, execution_id)
        for row in checked:
            self._conflict(row)
        for row in checked:
            self._insert(row, synced=True)
        for entry in cache:
            self.db.cache.setdefault((execution_id, entry.key), (json_copy(entry.value), entry.created_at))
            self.db.cache_sent.add((execution_id, entry.key))
        if pending is not None:
            self.db.pending[execution_id] = pending
        self._import_signals(signals)
        rest = restored_wait(checked[-1] if checked else None, (e.name for e in signals), utcnow())
        if rest is not None:
            self.db.waits[execution_id] = (checked[-1].seq, *rest)
        return len(checked)

    async def fetch_unsynced_cache(self, limit: int) -> list[CacheEntry]:
        sent = self.db.cache_sent
        found = [
            CacheEntry(execution_id=eid, key=key, value=value, created_at=created)
            for (eid, key), (value, created) in self.db.cache.items()
            if (eid, key) not in sent
        ]
        return sorted(found, key=lambda e: (e.created_at, e.execution_id, e.key))[:limit]

    async def mark_cache_synced(self, keys: Sequence[tuple[str, str]]) -> None:
        self.db.cache_sent.update(k for k in keys if k in self.db.cache)

    async def attach_replica(self) -> None:
        self.db.attached = True

    async def fetch_unsynced_stored(self, limit: int) -> list[tuple[StoredRow, bytes | None]]:
        wanted = await self.fetch_unsynced(limit)
        plans: dict[str, tuple[StoredRow, bytes | None]] = {}
        for eid in {row.execution_id for row in wanted}:
            logs = MessageLogs()  # one per run: its rows in seq order share their logs
            for earlier in self._sorted(eid):
                stored, append = logs.plan(earlier)
                plans[earlier.checkpoint_id] = (stored, append.chunk if append is not None else None)
        return [plans[row.checkpoint_id] for row in wanted]
