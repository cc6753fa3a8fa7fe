"""What both store backends share that is not I/O: the front both stores build on.

:class:`BaseStore` holds the store's state (:class:`StoreState`), its memory of the message logs
(:class:`~stores._codec.MessageLogs`) and the write loop every backend runs: plan the row on the
event loop (so :class:`SerializationError` and :class:`RowTooLarge` come before any I/O), hand it
to the backend's write, and when the backend finds that the log in the database is not what the
plan assumed (:class:`LogMoved`: another store appended to the run), forget the run's log and plan
again, at most :data:`REPLAN_BUDGET` times. The refusals both backends raise are built in
:mod:`stores._errors`, the prune rule is :mod:`stores._prune`, the re-entry walk :mod:`stores._reentry`.
"""

from __future__ import annotations

import abc
import enum
import weakref
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Final, Protocol, Self, TypeVar

from ._codec import LogAppend, LogUnknown, MessageLogs, StoredRow, encode_cache_value
from ._errors import check_execution_id, log_kept_changing, store_closed
from ._json import decode
from ._model import Cached, Checkpoint, PendingInterrupt, utcnow
from ._owners import BaseOwnedStore, Ownership
from ._watch import WAITS, RowWatch

__all__ = [
    "INTENT_PREFIX",
    "REPLAN_BUDGET",
    "BaseStore",
    "Intents",
    "LogMoved",
    "Plan",
    "Recall",
    "StoreState",
    "check_history_range",
    "check_page",
    "intent_key",
]

T = TypeVar("T")

#: How many plans one write may try before it gives up with ``WriteConflict``. One stale memory
#: of a log costs one re-plan (the next plan reloads or starts a new log); a third attempt covers
#: another writer appending once more in between.
REPLAN_BUDGET: Final = 3

#: An intent of ``@idempotent(at_most_once=True)`` is a cache entry under this prefix and the call's
#: key: it lives, is pruned and is deleted with the run's other cache entries. No other key starts
#: so (default keys are hex digests, explicit ones start with the function's dotted name).
INTENT_PREFIX: Final = "intent:"
#: The value of an intent entry (what it holds does not matter; its key says what it is).
_INTENT_VALUE: Final = {"intent": "recorded"}

#: A row planned for storage: its columns and the messages it adds to its log.
Plan = tuple[StoredRow, LogAppend | None]


def check_page(execution_id: str | None, limit: int | None, after: PendingInterrupt | None) -> None:
    """Refuse a ``pending()`` request of the wrong type (``TypeError``) or size (``ValueError``),
    or naming a run by an invalid id (:class:`InvalidExecutionId`)."""
    if execution_id is not None:
        check_execution_id(execution_id)
    if limit is not None and (type(limit) is not int or limit < 1):
        if type(limit) is not int:
            raise TypeError(f"pending(limit=...) takes a positive int or None, not {type(limit).__name__}")
        raise ValueError(f"pending(limit=...) must be at least 1, not {limit}")
    if after is not None and not isinstance(after, PendingInterrupt):
        raise TypeError(
            "pending(after=...) takes the last PendingInterrupt of the previous page or None, "
            f"not {type(after).__name__}"
        )


def check_history_range(since: int, limit: int | None) -> None:
    """Refuse a ``history()`` range of the wrong type (``TypeError``) or value (``ValueError``)."""
    if type(since) is not int:
        raise TypeError(f"history(since=...) takes an int seq, not {type(since).__name__}")
    if since < 0:
        raise ValueError(f"history(since=...) must be at least 0, not {since}")
    if limit is not None and (type(limit) is not int or limit < 1):
        if type(limit) is not int:
            raise TypeError(f"history(limit=...) takes a positive int or None, not {type(limit).__name__}")
        raise ValueError(f"history(limit=...) must be at least 1, not {limit}")


class StoreState(enum.Enum):
    """Where a store is in its life: not yet set up, usable, or closed for good."""

    NEW = "new"
    READY = "ready"
    CLOSED = "closed"


class LogMoved(Exception):
    """The message log in the database is not what the plan assumed; the write is planned again."""


class Intents(Protocol):
    """The backend's half of :meth:`BaseStore.cache_intend` (its cache part, held as ``_cache``)."""

    async def intend(
        self, execution_id: str, key: str, marker: str, body: bytes, now: datetime
    ) -> tuple[bytes | str | None, bool]:
        """In one transaction: the value stored under ``key``, or ``None`` and whether the entry
        ``marker`` (with ``body``) was inserted just now."""
        ...


#: Load what a row's log holds into memory before the row is planned again (called when its plan
#: found a continuing run's log not known here, :class:`~stores._codec.LogUnknown`): the load to
#: await, or ``None`` when there is nothing to load; a backend that reads the log back gives one to
#: :class:`BaseStore`.
Recall = Callable[[Checkpoint], Awaitable[None] | None]


class BaseStore(BaseOwnedStore, abc.ABC):
    """The shared front of :class:`~stores.SQLiteStore` and :class:`~stores.PostgresStore`.

    What it needs of the backend are objects the store holds: its ownership dialect
    (``_owner_rows``, :class:`~stores._owners.OwnerRows`), its cache part (``_cache``,
    :class:`Intents`), and ``recall`` if it loads logs before planning. Each store has its own
    lifecycle (:meth:`setup`, :meth:`close`).
    """

    _cache: Intents

    def __init__(self, *, max_row_bytes: int, recall: Recall | None = None) -> None:
        self._recall = recall
        self._logs = MessageLogs(max_row_bytes=max_row_bytes)
        self._state = StoreState.NEW
        self._own = Ownership(self)
        #: The open watches of :meth:`watch`, by run: this store's own writes wake them at once.
        self._watching: dict[str, weakref.WeakSet[RowWatch]] = {}

    @abc.abstractmethod
    async def setup(self) -> None:
        """Open the store's connections and migrate its schema (idempotent)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release everything the store holds (idempotent)."""

    async def __aenter__(self) -> Self:
        await self.setup()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def watch(self, execution_id: str) -> RowWatch:
        """A :class:`~stores._watch.RowWatch` on the run: its waits end when this store wrote a row
        of the run, or else by polling (for the rows of other processes; a backend that hears of
        them overrides this)."""
        watch = RowWatch(execution_id, on_close=self._unwatch)
        self._watching.setdefault(execution_id, weakref.WeakSet()).add(watch)
        return watch

    def _unwatch(self, watch: RowWatch) -> None:
        watches = self._watching.get(watch.execution_id)
        if watches is not None:
            watches.discard(watch)
            if not watches:
                del self._watching[watch.execution_id]

    def watch_waits(self) -> RowWatch:
        """A watch on the store's resting runs: its waits end when a signal may have made one due
        in any process, here by polling (a backend that hears of signals overrides this); the
        reader then reads :meth:`next_wake` / :meth:`due_waits`."""
        return RowWatch(WAITS)

    def _refuse_closed(self) -> None:
        """Raise ``StoreUnavailable`` if the store is closed."""
        if self._state is StoreState.CLOSED:
            raise store_closed(self)

    async def cache_intend(self, execution_id: str, key: str) -> Cached | bool:
        """Before an at-most-once side effect: the result stored under ``key`` if there is one, else
        whether this call recorded the intent now (``False``: an intent without a result was already
        there, so an earlier attempt may have had its effect). One round trip."""
        self._refuse_closed()
        self._own.check(execution_id)
        marker = intent_key(key)
        body = encode_cache_value(execution_id, marker, _INTENT_VALUE)
        found, recorded = await self._cache.intend(execution_id, key, marker, body, utcnow())
        return Cached(decode(found)) if found is not None else recorded

    async def _planned(
        self, row: Checkpoint, attempt: Callable[[Plan], Awaitable[T]], plan: Plan | None = None
    ) -> T:
        """Plan ``row`` (unless ``plan`` is the first plan, made already) and run ``attempt`` on it.

        ``attempt`` raises :class:`LogMoved` when the database's log is not the planned one; the
        run's memory is then dropped and the row planned again, within :data:`REPLAN_BUDGET`. Any
        other failure also drops the memory (a failed write may have left it ahead of the database).
        A continuing run's log not in memory is loaded by the backend's ``recall`` before the plan.
        """
        eid = row.execution_id
        self._own.check(eid)  # a run abandoned with a lost lock writes nothing more
        logs, recall = self._logs, self._recall
        try:
            for _ in range(REPLAN_BUDGET):
                if plan is None:
                    try:
                        plan = logs.plan(row, recall is not None)
                    except LogUnknown:
                        if recall is not None and (loading := recall(row)) is not None:
                            await loading
                        plan = logs.plan(row)
                try:
                    written = await attempt(plan)
                except LogMoved:
                    self._logs.forget(eid)
                    plan = None
                    continue
                if self._watching:
                    for watch in self._watching.get(eid, ()):
                        watch.notice()
                return written
        except BaseException:
            self._logs.forget(eid)
            raise
        raise log_kept_changing(eid, row.node_id)


def intent_key(key: str) -> str:
    """The cache key of the intent recorded for the call cached under ``key``."""
    return INTENT_PREFIX + key
