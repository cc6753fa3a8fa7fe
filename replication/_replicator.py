"""The replicator: an actor that ships one store's outbox to one plane, with one key.

Driven by messages (:mod:`replication._messages`): a :class:`Kick` per commit (sent without waiting,
at most one queued), a :class:`Tick` from its timer child for retries, a :class:`Drain` when asked.
A drain sends unsynced rows oldest first in batches, each with the cache entries and the inbox
entries not yet sent (so a row never reaches the plane before the ``@idempotent`` results of the
step it follows, nor before the consumption of the signals it consumed); a refused batch that names
no rows is bisected until each refused row stands alone, a refusal that names its rows quarantines
those, and per-item rejections in a 2xx are quarantined. Inbox entries are refused, bisected and
quarantined the same way, by their ``signal_id``. A condition of the
connection (401, 403, 404, 408, 429) or a 5xx/transport error leaves the rows buffered, with no age
or count bound, and arms the timer with backoff (``Retry-After`` when the plane gives one); the
backoff counts failures in a row, so an accepted POST, however slow, resets it. Leaving the system
does one final drain, bounded by ``flush_timeout``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Final, NamedTuple

import anyio
import msgspec

from actors import Actor, ActorContext, ActorRef, ActorStopped, MailboxFull, Restart
from stores import CacheEntry, ReplicatedStore, Store, StoredRow, StoredSignal, StoreError

from ._client import INGEST_PATH, Answer, PlaneClient, Verdict
from ._messages import Arm, Drain, Drained, Kick, ReplicatorMessage, Tick
from ._restore import restore_enabled, restore_into
from ._wire import (
    CacheItem,
    Item,
    StoredItem,
    cache_item,
    resource_type,
    signal_item,
    stored_item,
    whole_item,
)

__all__ = ["Replicator"]

#: Backoff of the retry timer: ``_BACKOFF_BASE * 2**n`` seconds, at most ``_BACKOFF_MAX`` apart.
_BACKOFF_BASE: Final = 0.5
_BACKOFF_MAX: Final = 60.0
#: The longest ``Retry-After`` honoured as given (a longer one waits this long).
_RETRY_AFTER_MAX: Final = 600.0
_KICK: Final = Kick()
#: How long a kick waits before its drain, so that the commits of that moment share one POST.
LINGER: Final = 0.2
_log = logging.getLogger("tether")


class _Out(NamedTuple):
    """One row of a batch on its way: its id, whether it carries every message, its item."""

    checkpoint_id: str
    whole: bool
    item: Item | StoredItem


class _Timer(Actor):
    """The retry timer: sleeps as asked, then ticks its parent (a child, stopped with it)."""

    def __init__(self, parent: ActorRef) -> None:
        self._parent = parent

    async def receive(self, ctx: ActorContext, message: Any) -> None:
        match message:
            case Arm(delay=delay):
                await anyio.sleep(delay)
                try:
                    self._parent.send_nowait(Tick())
                except (MailboxFull, ActorStopped):
                    pass  # full: a drain is coming anyway; stopped: nothing left to retry for


class Replicator(Actor):
    """Ships the store of the :class:`~actors.ActorSystem` it is given to (``replicator=``) to a plane.

    ``url`` is the plane's base URL, ``api_key`` its key (one tenant). Batches hold at most
    ``batch_size`` rows; ``timeout`` bounds one request; ``flush_timeout`` the final drain. A batch
    the plane does not answer within ``timeout`` is sent again in halves (the next batches stay
    smaller until the plane answers in time again), so a slow plane gets batches it can answer.
    """

    #: How the system supervises it: a crash (a bug, never a network answer) restarts it, and the
    #: restarted replicator drains once; leaving the system stops it after its final drain.
    restart: Final = Restart.TRANSIENT

    def __init__(
        self,
        url: str,
        api_key: str,
        *,
        batch_size: int = 200,
        timeout: float = 10.0,
        flush_timeout: float = 5.0,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size!r}")
        if not api_key:
            raise ValueError("a replicator needs the plane's api_key")
        self.url = url
        self.batch_size = batch_size
        self.flush_timeout = flush_timeout
        self.stop_timeout = flush_timeout + timeout + 1.0
        self._client = PlaneClient(url, api_key, timeout=timeout)
        self._store: Store | None = None
        self._ref: ActorRef | None = None
        self._timer: ActorRef | None = None
        self._whole: set[str] = set()  # rows the plane asked for with every message
        self._kick_queued = False
        self._armed = False
        self._waiting = False
        self._failures = 0
        self._limit = batch_size  # rows per batch now: halved after a timeout, doubled back after an answer

    def __repr__(self) -> str:
        return f"Replicator({self.url!r})"

    # -- the replicator protocol of ActorSystem ---------------------------------------------------

    def attach(self, store: Store) -> None:
        """Bind to the store of the system this replicator is given to (one store per replicator)."""
        if self._store is not None and self._store is not store:
            raise ValueError(f"{self!r} already serves another store; give each system its own replicator")
        if not isinstance(store, ReplicatedStore):
            raise TypeError(
                f"{type(store).__name__} keeps no outbox (stores.ReplicatedStore): nothing to replicate"
            )
        self._store = store

    def kick(self) -> None:
        """A commit happened: ask for a drain without waiting (at most one kick is queued)."""
        ref = self._ref
        if ref is None or self._kick_queued:
            return
        try:
            ref.send_nowait(_KICK)
        except (MailboxFull, ActorStopped):
            return
        self._kick_queued = True

    async def restore(self, execution_id: str) -> bool:
        """Restore a run the store lacks from the plane (rows, cache entries, the pending row, its
        unconsumed signals); whether it was restored. ``False`` without asking when ``TETHER_RESTORE_FROM_PLANE`` is off;
        :class:`~replication.PlaneError` if the plane cannot answer."""
        if not restore_enabled():
            return False
        return await restore_into(self._outbox(), execution_id, self._client) is not None

    async def drain(self, *, timeout: float = 30.0) -> Drained:
        """Drain now and say what was done (for scripts and tests; commits drain by themselves)."""
        if self._ref is None:
            raise ActorStopped(f"{self!r} is not running")
        result: Drained = await self._ref.ask(Drain(), timeout=timeout)
        return result

    # -- the actor --------------------------------------------------------------------------------

    async def on_start(self, ctx: ActorContext) -> None:
        await self._outbox().attach_replica()  # from now on prune keeps what the plane lacks
        self._ref = ctx.self
        self._whole = set()
        self._kick_queued = self._armed = self._waiting = False
        self._failures = 0
        self._limit = self.batch_size
        self._timer = await ctx.start_child(
            _Timer(ctx.self), name="replicator-timer", restart=Restart.PERMANENT
        )
        self.kick()  # rows written before it was attached, or by processes without one

    async def receive(self, ctx: ActorContext, message: ReplicatorMessage) -> Drained | None:
        match message:
            case Kick():
                if not self._waiting:
                    # Let the commits of the next moment join this drain: fewer, fuller POSTs
                    # and outbox marks while runs are busy; the kicks meanwhile are absorbed.
                    await anyio.sleep(LINGER)
                    self._kick_queued = False
                    await self._drain(Drained(), until_empty=False)
                else:
                    self._kick_queued = False
            case Tick():
                self._armed = False
                await self._drain(Drained(), until_empty=False)
            case Drain():
                return await self._drain(Drained())
        return None

    async def on_stop(self, ctx: ActorContext) -> None:
        self._ref = None
        try:
            with anyio.move_on_after(self.flush_timeout) as bound:
                await self._drain(Drained())
            if bound.cancelled_caught:
                _log.warning(
                    "replicator: the final drain to %s did not finish in %ss", self.url, self.flush_timeout
                )
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(1.0):
                await self._client.aclose()

    # -- draining ---------------------------------------------------------------------------------

    def _outbox(self) -> Any:
        if self._store is None:
            raise RuntimeError(f"{self!r} is not attached to a store: give it to ActorSystem(replicator=...)")
        return self._store

    async def _drain(self, done: Drained, *, until_empty: bool = True) -> Drained:
        """Send batches until the outbox is empty or the plane cannot take more now. A drain for
        a kick or a tick stops after a batch that was not full: what was written meanwhile kicked
        again, and waits for its own (fuller) batch.

        Each batch carries the cache and inbox entries not yet sent, read after its rows: an
        ``@idempotent`` result is committed before the row that follows its step, and a signal's
        consumption with the row that consumed it, so the plane never holds that row without them
        (a run restored from it neither repeats the side effect nor gets the signal again)."""
        box = self._outbox()
        try:
            while True:
                limit = self._limit
                stored = await box.fetch_unsynced_stored(limit)
                cache = await box.fetch_unsynced_cache(self.batch_size)
                while len(cache) >= self.batch_size:  # more than a batch: full ones go first, alone
                    if not await self._ship_cache(box, cache, done):
                        done.buffered = True
                        return done
                    cache = await box.fetch_unsynced_cache(self.batch_size)
                signals = await box.fetch_unsynced_signals(self.batch_size)
                while len(signals) >= self.batch_size:  # the same for inbox entries
                    if not await self._ship_signals(box, signals, done):
                        done.buffered = True
                        return done
                    signals = await box.fetch_unsynced_signals(self.batch_size)
                if not stored:
                    if (cache and not await self._ship_cache(box, cache, done)) or (
                        signals and not await self._ship_signals(box, signals, done)
                    ):
                        done.buffered = True
                        return done
                    break
                moved, whole = done.sent + done.quarantined, len(self._whole)
                if not await self._ship(box, await self._outgoing(box, stored), done, cache, signals):
                    done.buffered = True
                    return done
                if done.sent + done.quarantined == moved and len(self._whole) == whole:
                    break  # nothing moved (rows sent whole are settled either way the next time)
                if not until_empty and len(stored) < limit and len(self._whole) == whole:
                    break
        except (StoreError, OSError) as exc:
            _log.warning("replicator: the store could not be read or marked: %r; retrying later", exc)
            done.buffered = True
            self._wait(None)
            return done
        self._failures = 0
        self._waiting = False
        return done

    async def _outgoing(self, box: Any, stored: list[tuple[StoredRow, bytes | None]]) -> list[_Out]:
        """The items of a batch: each row as stored (its messages once), or whole when the plane
        asked for it so."""
        kinds: dict[str | None, str] = {}
        out: list[_Out] = []
        for row, chunk in stored:
            cid = row.checkpoint_id
            if cid in self._whole:
                found = await box.get(row.execution_id, cid)
                if found is not None:
                    out.append(_Out(cid, True, whole_item(found)))
                    continue
            kind = kinds.get(row.agent_path)
            if kind is None:
                kind = kinds[row.agent_path] = resource_type(row.agent_path)
            out.append(_Out(cid, False, stored_item(row, chunk, kind)))
        return out

    async def _ship(
        self,
        box: Any,
        rows: Sequence[_Out],
        done: Drained,
        cache: Sequence[CacheEntry] = (),
        signals: Sequence[StoredSignal] = (),
    ) -> bool:
        """POST ``rows`` (with ``cache`` and ``signals``, the entries they must not arrive
        without); settle what the answer says. ``False``: the plane cannot take them now."""
        answer = await self._post([row.item for row in rows], [_cache_item(e) for e in cache], signals)
        done.posts += 1
        match answer.outcome:
            case Verdict.ACCEPTED:
                self._failures = 0  # a slow answer is still an answer: no backoff after it
                self._limit = min(self.batch_size, self._limit * 2)
                if cache:
                    await self._cache_sent(box, cache, done)
                if signals:
                    await self._signals_settled(box, signals, answer, done)
                await self._settle(box, rows, answer, done)
                return True
            case Verdict.REFUSED if cache or signals:
                # A row or an entry is at fault: the cache entries alone first (each refused one is
                # dropped), then the inbox entries alone (bisected like rows), then the rows alone
                # (bisected), never a row before its entries.
                return (
                    (not cache or await self._ship_cache(box, cache, done))
                    and (not signals or await self._ship_signals(box, signals, done))
                    and await self._ship(box, rows, done)
                )
            case Verdict.REFUSED:
                ids = {row.checkpoint_id for row in rows}
                named = {cid: reason for cid, reason in answer.rejections.items() if cid in ids}
                if named:
                    await self._quarantine(
                        box, {c: f"HTTP {answer.status}: {r}" for c, r in named.items()}, done
                    )
                    rest = [row for row in rows if row.checkpoint_id not in named]
                    return await self._ship(box, rest, done) if rest else True
                if len(rows) == 1:
                    reason = f"HTTP {answer.status} from {INGEST_PATH}: {answer.explanation}"
                    await self._quarantine(box, {rows[0].checkpoint_id: reason}, done)
                    return True
                mid = len(rows) // 2
                return await self._ship(box, rows[:mid], done) and await self._ship(box, rows[mid:], done)
            case _:
                if answer.timed_out:
                    self._limit = max(1, len(rows) // 2)
                return self._unsent(
                    answer, f"{len(rows)} rows, {len(cache)} cache entries and {len(signals)} inbox entries"
                )

    async def _post(
        self,
        items: Sequence[Item | StoredItem],
        cache: Sequence[CacheItem],
        signals: Sequence[StoredSignal] = (),
    ) -> Answer:
        body: dict[str, Any] = {"checkpoints": items, "cache": cache}
        if signals:  # a POST without inbox entries is what it was before they were shipped
            body["signals"] = [signal_item(e) for e in signals]
        return await self._client.ingest(msgspec.json.encode(body), signals=bool(signals))

    async def _ship_cache(self, box: Any, entries: Sequence[CacheEntry], done: Drained) -> bool:
        """POST cache entries alone; a refused one is dropped from the replica, logged."""
        answer = await self._post([], [_cache_item(e) for e in entries])
        done.posts += 1
        match answer.outcome:
            case Verdict.ACCEPTED:
                self._failures = 0
            case Verdict.REFUSED if len(entries) > 1:
                mid = len(entries) // 2
                return await self._ship_cache(box, entries[:mid], done) and await self._ship_cache(
                    box, entries[mid:], done
                )
            case Verdict.REFUSED:
                _log.warning(
                    "replicator: cache entry %s of run %s refused (HTTP %s: %s); it is not replicated",
                    entries[0].key,
                    entries[0].execution_id,
                    answer.status,
                    answer.explanation,
                )
            case _:
                return self._unsent(answer, f"{len(entries)} cache entries")
        await self._cache_sent(box, entries, done)
        return True

    async def _ship_signals(self, box: Any, entries: Sequence[StoredSignal], done: Drained) -> bool:
        """POST inbox entries alone; refused ones are quarantined as rows are (named ones at once,
        else the batch is bisected until each stands alone). ``False``: the plane cannot take
        them now."""
        answer = await self._post([], [], entries)
        done.posts += 1
        match answer.outcome:
            case Verdict.ACCEPTED:
                self._failures = 0
                await self._signals_settled(box, entries, answer, done)
                return True
            case Verdict.REFUSED:
                ids = {e.signal_id for e in entries}
                named = {sid: reason for sid, reason in answer.signal_rejections.items() if sid in ids}
                if named:
                    refused = [
                        (e, f"HTTP {answer.status}: {named[e.signal_id]}")
                        for e in entries
                        if e.signal_id in named
                    ]
                    await self._quarantine_signals(box, refused, done)
                    rest = [e for e in entries if e.signal_id not in named]
                    return await self._ship_signals(box, rest, done) if rest else True
                if len(entries) == 1:
                    reason = f"HTTP {answer.status} from {INGEST_PATH}: {answer.explanation}"
                    await self._quarantine_signals(box, [(entries[0], reason)], done)
                    return True
                mid = len(entries) // 2
                return await self._ship_signals(box, entries[:mid], done) and await self._ship_signals(
                    box, entries[mid:], done
                )
            case _:
                return self._unsent(answer, f"{len(entries)} inbox entries")

    async def _signals_settled(
        self, box: Any, entries: Sequence[StoredSignal], answer: Answer, done: Drained
    ) -> None:
        """Quarantine the inbox entries the plane rejected in its 2xx, mark the rest synced."""
        rejected = answer.signal_rejections
        await self._quarantine_signals(
            box,
            [
                (e, f"HTTP {answer.status}: plane rejected: {rejected[e.signal_id]}")
                for e in entries
                if e.signal_id in rejected
            ],
            done,
        )
        accepted = [e for e in entries if e.signal_id not in rejected]
        if accepted:
            await box.mark_signals_synced(accepted)
            done.signals += len(accepted)

    async def _quarantine_signals(
        self, box: Any, refused: Sequence[tuple[StoredSignal, str]], done: Drained
    ) -> None:
        if not refused:
            return
        for entry, reason in refused:
            _log.warning(
                "replicator: signal %s of run %s quarantined: %s", entry.signal_id, entry.execution_id, reason
            )
        await box.mark_signals_quarantined(refused)
        done.signals_quarantined += len(refused)

    async def _cache_sent(self, box: Any, entries: Sequence[CacheEntry], done: Drained) -> None:
        await box.mark_cache_synced([(e.execution_id, e.key) for e in entries])
        done.cached += len(entries)

    async def _settle(self, box: Any, rows: Sequence[_Out], answer: Answer, done: Drained) -> None:
        """Quarantine the per-item rejections, keep the rows to send whole, mark the rest synced."""
        ids = {row.checkpoint_id for row in rows}
        rejected = {
            cid: f"HTTP {answer.status}: plane rejected: {r}"
            for cid, r in answer.rejections.items()
            if cid in ids
        }
        accepted: list[str] = []
        for row in rows:
            cid = row.checkpoint_id
            if cid in rejected:
                continue
            if cid in answer.resend:
                if row.whole:
                    rejected[cid] = f"HTTP {answer.status}: plane asked for messages it was sent whole"
                else:
                    self._whole.add(cid)
                continue
            accepted.append(cid)
        await self._quarantine(box, rejected, done)
        self._whole.difference_update(rejected)
        if accepted:
            await box.mark_synced(accepted)
            self._whole.difference_update(accepted)
            done.sent += len(accepted)

    async def _quarantine(self, box: Any, reasons: dict[str, str], done: Drained) -> None:
        if not reasons:
            return
        for cid, reason in reasons.items():
            _log.warning("replicator: row %s quarantined: %s", cid, reason)
        await box.mark_quarantined(reasons)
        done.quarantined += len(reasons)

    def _unsent(self, answer: Answer, what: str) -> bool:
        """Log that the plane could not take ``what`` (it stays buffered) and wait before the
        next try; ``False``, what a ship answers then."""
        _log.warning(
            "replicator: %s answered %s (%s); %s stay buffered",
            self.url,
            answer.status if answer.status is not None else "no response",
            answer.explanation,
            what,
        )
        self._wait(answer.retry_after)
        return False

    def _wait(self, retry_after: float | None) -> None:
        """Keep the rows buffered and arm the timer (backoff, or the plane's ``Retry-After``)."""
        self._waiting = True
        if retry_after is not None:
            delay = min(retry_after, _RETRY_AFTER_MAX)
        else:
            delay = min(_BACKOFF_BASE * 2**self._failures, _BACKOFF_MAX)
        self._failures = min(self._failures + 1, 16)
        if self._armed or self._timer is None:
            return
        try:
            self._timer.send_nowait(Arm(delay))
        except (MailboxFull, ActorStopped):
            return
        self._armed = True


def _cache_item(entry: CacheEntry) -> CacheItem:
    return cache_item(entry.execution_id, entry.key, entry.value, entry.created_at)
