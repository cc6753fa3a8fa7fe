"""Following a run: the in-process :class:`EventHub` and the :class:`EventStream` of ``RunRef.events()``.

The hub hears of every row this process commits (``StepLog.step``) and of streamed model text (the
sink bound around each model call), and hands both to the subscriptions of that run. A stream
reads the run's rows from the store too: from ``since`` on, and whenever its store watch wakes it
(PostgreSQL ``NOTIFY``, polling on SQLite), so it follows a run owned by any process; rows from
either source are taken in ``seq`` order, once each.

Buffers are bounded: a subscription holds at most :data:`ROW_BUFFER` rows and :data:`TEXT_BUFFER`
text deltas. A reader that falls behind loses text first (a full text buffer drops new deltas,
counted in :attr:`EventStream.dropped_text`); when its row buffer is full the subscription stops
holding rows and the reader reads them from the store instead, a page of :data:`PAGE` at a time, so
durable events are never lost and memory stays bounded however far behind it is.
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Final, Self

from stores import COMPLETED, RUN_END, Checkpoint, RowWatch, Store

from ..events import DurableEvent, Event, TextDelta
from ..models._stream import TextSink
from ._errors import not_in_store
from ._events import RowEvents, attempt_of, is_resting

if TYPE_CHECKING:
    from types import TracebackType

__all__ = ["PAGE", "ROW_BUFFER", "TEXT_BUFFER", "EventHub", "EventStream"]

#: Rows a subscription holds for its reader before it leaves them to the store.
ROW_BUFFER: Final = 64
#: Text deltas a subscription (and a stream waiting for their row) holds; newer ones are dropped.
TEXT_BUFFER: Final = 256
#: Rows per store read.
PAGE: Final = 64
#: Bound on one wait for news (the watch's own poll interval is usually shorter).
_WAIT: Final = 5.0


class _Subscription:
    """What one stream is handed by the hub: rows and (if asked) text, in commit order."""

    __slots__ = ("__weakref__", "_items", "_rows", "_text", "dropped_text", "overflowed", "text", "watch")

    def __init__(self, *, text: bool) -> None:
        self.watch: RowWatch | None = None  # set when the stream starts reading
        self.text = text
        self._items: deque[Checkpoint | TextDelta] = deque()
        self._rows = 0
        self._text = 0
        self.overflowed = False
        self.dropped_text = 0

    def push_row(self, row: Checkpoint) -> None:
        if not self.overflowed:
            if self._rows >= ROW_BUFFER:
                self.overflowed = True  # the reader reads the rows from the store
            else:
                self._items.append(row)
                self._rows += 1
        self._wake()

    def push_text(self, delta: TextDelta) -> None:
        if self.overflowed or self._text >= TEXT_BUFFER:
            self.dropped_text += 1
            return
        self._items.append(delta)
        self._text += 1
        self._wake()

    def _wake(self) -> None:
        if self.watch is not None:
            self.watch.notice()

    def pop(self) -> Checkpoint | TextDelta | None:
        if not self._items:
            return None
        item = self._items.popleft()
        if isinstance(item, TextDelta):
            self._text -= 1
        else:
            self._rows -= 1
        return item

    def take_overflow(self) -> bool:
        overflowed, self.overflowed = self.overflowed, False
        return overflowed


class EventHub:
    """The live rows and streamed text of the runs of one :class:`~actors.ActorSystem`."""

    def __init__(self) -> None:
        self._subs: dict[str, weakref.WeakSet[_Subscription]] = {}
        #: The runs that have (or had, until a publish drops them) subscriptions: a writer skips
        #: :meth:`publish` for a run not in it. The hub's own dict, read-only outside the hub.
        self.followed: Mapping[str, object] = self._subs
        # Per run with readers: the highest text attempt published for each (agent_path, node_id).
        self._highest: dict[str, dict[tuple[str | None, str], int]] = {}

    def subscribe(self, execution_id: str, *, text: bool) -> _Subscription:
        """A subscription to the run (dropped when its stream closes or is collected)."""
        sub = _Subscription(text=text)
        self._subs.setdefault(execution_id, weakref.WeakSet()).add(sub)
        return sub

    def unsubscribe(self, execution_id: str, sub: _Subscription) -> None:
        subs = self._subs.get(execution_id)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._subs[execution_id]
                self._highest.pop(execution_id, None)

    def publish(self, row: Checkpoint) -> None:
        """A row of the run was committed by this process."""
        subs = self._subs.get(row.execution_id)
        if subs is None:
            return
        if not subs:  # every stream of the run was dropped without being closed
            del self._subs[row.execution_id]
            self._highest.pop(row.execution_id, None)
            return
        for sub in list(subs):
            sub.push_row(row)

    def text_sink(self, row: Checkpoint) -> TextSink:
        """The sink for the streamed text of the model call whose row is ``row``.

        A delta's ``attempt`` is the row's attempt plus the client's retries within the call
        (``sink(text, client_attempt)``), raised when needed above every attempt this process
        published for the same step while the run had readers, so a reader sees it only grow.
        """
        eid, path, seq = row.execution_id, row.agent_path, row.seq
        state = [0, 0]  # the client's attempt, and the attempt it is published as

        def sink(text: str, client_attempt: int) -> None:
            subs = self._subs.get(eid)
            if not subs:
                return
            if client_attempt != state[0]:  # (most model calls stream nothing: worked out here)
                step = (path, row.node_id)
                highest = self._highest.setdefault(eid, {})
                state[0] = client_attempt
                state[1] = max(attempt_of(row) + client_attempt - 1, highest.get(step, 0) + 1)
                highest[step] = state[1]
            delta: TextDelta | None = None
            for sub in list(subs):
                if sub.text:
                    if delta is None:
                        delta = TextDelta(
                            execution_id=eid, agent_path=path, seq=seq, text=text, attempt=state[1]
                        )
                    sub.push_text(delta)

        return sink


class EventStream:
    """The events of one run (see ``RunRef.events()``): an async iterator, and an async context
    manager that closes it. ``start`` is where ``since=None`` begins (``None``: the run's next row)."""

    def __init__(
        self,
        store: Callable[[], Awaitable[Store]],
        hub: EventHub,
        execution_id: str,
        *,
        since: int | None,
        tokens: bool,
        start: int | None,
    ) -> None:
        if since is not None and (type(since) is not int or since < 0):
            raise ValueError(f"events(since=...) takes a seq (an int >= 0) or None, not {since!r}")
        self.execution_id = execution_id
        self._open_store = store
        self._hub = hub
        self._since = since if since is not None else start
        self._tokens = tokens
        self._store: Store | None = None
        # Subscribed at once: text streamed from here on reaches this reader.
        self._sub: _Subscription | None = hub.subscribe(execution_id, text=tokens)
        self._rows = RowEvents()
        self._ready: deque[Event] = deque()
        self._held: deque[TextDelta] = deque()
        self._next = 0
        self._last = -1
        self._end_at = 0
        self._gap: Checkpoint | None = None
        self._read_due = True
        self._done = False
        self._closed = False
        self._dropped = 0  # dropped_text, kept when the stream closes

    @property
    def dropped_text(self) -> int:
        """How many text deltas this reader lost because it read too slowly."""
        return self._sub.dropped_text if self._sub is not None else self._dropped

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Event:
        while not self._ready:
            if self._done or self._closed:
                await self.aclose()
                raise StopAsyncIteration
            try:
                await self._more()
            except BaseException:
                await self.aclose()
                raise
        return self._ready.popleft()

    async def __aenter__(self) -> Self:
        """Start reading: the start and the end are fixed here (else at the first read)."""
        if self._store is None and self._sub is not None:
            try:
                await self._begin(self._sub)
            except BaseException:
                await self.aclose()
                raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop following the run (idempotent)."""
        self._closed = True
        sub, self._sub = self._sub, None
        if sub is not None:
            self._dropped = sub.dropped_text
            self._hub.unsubscribe(self.execution_id, sub)
            if sub.watch is not None:
                sub.watch.close()

    # -- reading ----------------------------------------------------------------------------------

    async def _more(self) -> None:
        """One step towards the next events: open, drain the hub, read the store, or wait."""
        sub = self._sub
        assert sub is not None
        if self._store is None:
            await self._begin(sub)
            return
        if sub.take_overflow() or self._gap is not None:
            await self._read_store()
            return
        if self._drain():
            return
        if self._read_due:
            self._read_due = False
            await self._read_store()
            return
        self._read_due = True  # after a wake, read the store once if the hub brought nothing
        assert sub.watch is not None
        await sub.watch.wait(_WAIT)

    async def _begin(self, sub: _Subscription) -> None:
        """Find where to start and where to end, and take in the rows before the start."""
        store = await self._open_store()
        sub.watch = store.watch(self.execution_id)  # before the reads: no later row is missed
        newest = await store.latest(self.execution_id)
        if newest is None:
            raise not_in_store(self.execution_id)
        self._store = store
        start = self._since if self._since is not None else newest.seq + 1
        self._end_at = newest.seq
        if start > newest.seq and newest.step_type == RUN_END and newest.status == COMPLETED:
            self._done = True  # a completed run writes nothing more
            return
        seq = 0
        while seq < start:  # the earlier rows: which tool calls are still open at the start
            rows = await store.history(self.execution_id, since=seq, limit=PAGE)
            for row in rows:
                if row.seq < start:
                    self._rows.seed(row)
            if len(rows) < PAGE:
                break
            seq = rows[-1].seq + 1
        self._next = start

    def _drain(self) -> bool:
        """Take what the hub handed over, in order, up to a gap; whether anything was taken."""
        sub = self._sub
        assert sub is not None
        took = False
        while not self._done and self._gap is None:
            item = sub.pop()
            if item is None:
                break
            took = True
            if isinstance(item, TextDelta):
                self._text(item)
            elif item.seq > self._next:
                self._gap = item  # the rows before it come from the store first
            else:
                self._row(item)
        return took

    async def _read_store(self) -> None:
        """A page of rows from ``self._next`` on (after the hub's news that came meanwhile)."""
        assert self._store is not None
        rows = await self._store.history(self.execution_id, since=self._next, limit=PAGE)
        self._drain()  # streamed text precedes the rows committed after it
        for row in rows:
            if self._done:
                return
            self._row(row)
        self._read_due = len(rows) == PAGE
        gap = self._gap
        if gap is not None and (gap.seq < self._next or len(rows) < PAGE):
            self._gap = None
            self._row(gap)  # the store holds nothing before it any more (e.g. pruned)

    def _row(self, row: Checkpoint) -> None:
        """The events of the run's next row (a row already taken is skipped)."""
        if row.seq < self._next or self._done:
            return
        self._next, self._last = row.seq + 1, row.seq
        event: DurableEvent
        for event in self._rows.events(row):
            self._ready.append(event)
            if is_resting(event) and event.seq >= self._end_at:
                self._done = True  # the iterator ends at its resting row
                return
        while self._held and self._held[0].seq <= row.seq:
            held = self._held.popleft()
            if held.seq == row.seq:
                self._ready.append(held)

    def _text(self, delta: TextDelta) -> None:
        """Streamed text is yielded after its model call's row and before the next row."""
        if delta.seq == self._last:
            self._ready.append(delta)
        elif delta.seq >= self._next and len(self._held) < TEXT_BUFFER:
            self._held.append(delta)
        elif self._sub is not None:
            self._sub.dropped_text += 1
