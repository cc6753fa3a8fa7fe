"""Rows, cache and inbox entries to the plane's wire items and back (docs/replication.md, "What is sent").

An item carries a row's messages once, as they are stored: ``messages`` is ``{"log", "count",
"new"}``, where ``log`` names the conversation (:func:`stores.conversation_of` of the row's
``agent_path``), ``count`` is the length of the row's materialised messages and ``new`` the ones
it adds over the conversation as the receiver holds it; the receiver's messages are then
``held[:count - len(new)] + new``. :class:`Conversations` is the sender's memory of what the
receiver holds (per run and conversation, bounded); a conversation it does not remember is sent
whole (``new`` = every message), which is always correct. :class:`Rebuilder` is the receiver's
half (the reference plane and :func:`~replication.restore_from_plane` use it).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, Final

import msgspec

from stores import RUN_END, STATUSES, Checkpoint, StoredRow, StoredSignal, conversation_of, parse_path

__all__ = [
    "CacheItem",
    "Conversations",
    "Item",
    "Messages",
    "Rebuilder",
    "SignalItem",
    "StoredItem",
    "cache_item",
    "resource_type",
    "row_of",
    "signal_item",
    "stored_item",
    "whole_item",
]

_MESSAGES: Final = "messages"
#: The resource types of the wire: from the root segment of a run's ``agent_path``.
_RESOURCE: Final = {"agent": "agent", "swarm": "swarm", "supervisor": "supervisor"}


class Messages(msgspec.Struct, forbid_unknown_fields=True):
    """A row's messages on the wire: its conversation, their count, the ones it adds."""

    log: str
    count: int
    new: list[Any]


class Metadata(msgspec.Struct, forbid_unknown_fields=True):
    """The fields of a row a resume needs that are not a step's identity."""

    node_input: dict[str, Any]
    node_output: dict[str, Any]
    interrupt_reason: str | None
    interrupt_context: dict[str, Any]
    agent_path: str | None


class Item(msgspec.Struct, forbid_unknown_fields=True):
    """One row on the wire (field names as docs/replication.md lists them)."""

    checkpoint_id: str
    execution_id: str
    seq: int
    runner: str
    resource_type: str
    agent_id: str
    node_id: str
    step_index: int
    step_type: str
    status: str
    parent_checkpoint_id: str | None
    created_at: datetime
    state_snapshot: dict[str, Any]
    messages: Messages | None
    metadata: Metadata

    def check(self) -> None:
        """Refuse what decoding cannot: a bad status, a negative seq or count (:class:`ValueError`)."""
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {sorted(STATUSES)}")
        if self.seq < 0 or self.step_index < 0:
            raise ValueError("seq and step_index must be >= 0")
        if self.created_at.tzinfo is None:
            raise ValueError("created_at must carry a time zone (UTC)")
        if _MESSAGES in self.state_snapshot:
            raise ValueError("state_snapshot must not hold messages: they travel in 'messages'")
        if self.messages is not None and not 0 <= len(self.messages.new) <= self.messages.count:
            raise ValueError("messages.new cannot hold more than messages.count messages")


class StoredMessages(msgspec.Struct):
    """:class:`Messages` of a row as stored: ``new`` is the stored chunk, unparsed."""

    log: str
    count: int
    new: msgspec.Raw


class StoredMetadata(msgspec.Struct):
    """:class:`Metadata` of a row as stored (JSON columns unparsed)."""

    node_input: msgspec.Raw
    node_output: msgspec.Raw
    interrupt_reason: str | None
    interrupt_context: msgspec.Raw
    agent_path: str | None


class StoredItem(msgspec.Struct):
    """An :class:`Item` built from a row's stored columns: it encodes to the same JSON without
    decoding and re-encoding them (the replicator's path; ``whole``: it carries every message)."""

    checkpoint_id: str
    execution_id: str
    seq: int
    runner: str
    resource_type: str
    agent_id: str
    node_id: str
    step_index: int
    step_type: str
    status: str
    parent_checkpoint_id: str | None
    created_at: datetime
    state_snapshot: msgspec.Raw
    messages: StoredMessages | None
    metadata: StoredMetadata


_EMPTY: Final = msgspec.Raw(b"[]")


def stored_item(stored: StoredRow, chunk: bytes | None, kind: str) -> StoredItem:
    """The wire item of a row as stored: its chunk is what it adds to its conversation's log."""
    messages = None
    if stored.log_id is not None:
        messages = StoredMessages(
            conversation_of(stored.agent_path),
            stored.message_count,
            msgspec.Raw(chunk) if chunk is not None else _EMPTY,
        )
    return StoredItem(
        checkpoint_id=stored.checkpoint_id,
        execution_id=stored.execution_id,
        seq=stored.seq,
        runner=stored.runner,
        resource_type=kind,
        agent_id=stored.runner,
        node_id=stored.node_id,
        step_index=stored.step_index,
        step_type=stored.step_type,
        status=stored.status,
        parent_checkpoint_id=stored.parent_checkpoint_id,
        created_at=stored.created_at,
        state_snapshot=msgspec.Raw(stored.state_snapshot),
        messages=messages,
        metadata=StoredMetadata(
            msgspec.Raw(stored.node_input),
            msgspec.Raw(stored.node_output),
            stored.interrupt_reason,
            msgspec.Raw(stored.interrupt_context),
            stored.agent_path,
        ),
    )


def whole_item(row: Checkpoint) -> Item:
    """The wire item of a row with every message it holds (for a receiver that lacks its base)."""
    messages, snapshot = _split(row)
    wire = None if messages is None else Messages(conversation_of(row.agent_path), len(messages), messages)
    return _item(row, wire, snapshot, resource_type(row.agent_path))


class CacheItem(msgspec.Struct, forbid_unknown_fields=True):
    """One ``@idempotent`` result on the wire."""

    execution_id: str
    key: str
    value: Any
    created_at: datetime


class SignalItem(msgspec.Struct, forbid_unknown_fields=True):
    """One inbox entry on the wire: a signal sent to a run and, once a row consumed it, that row's
    ``seq``. ``signal_id`` names it in every store and on the plane."""

    signal_id: str
    execution_id: str
    name: str
    payload: Any
    created_at: datetime
    consumed_seq: int | None

    def check(self) -> None:
        """Refuse what decoding cannot: a time without a zone (:class:`ValueError`); the store
        checks the rest (:meth:`~stores.ReplicatedStore.copy_signals`)."""
        if self.created_at.tzinfo is None:
            raise ValueError("created_at must carry a time zone (UTC)")

    def entry(self) -> StoredSignal:
        """The inbox entry it carries (its ``id`` is the receiving store's to give)."""
        return StoredSignal(
            id=0,
            execution_id=self.execution_id,
            name=self.name,
            payload=self.payload,
            created_at=self.created_at,
            consumed_seq=self.consumed_seq,
            signal_id=self.signal_id,
        )


def signal_item(entry: StoredSignal) -> SignalItem:
    """The wire form of an inbox entry."""
    return SignalItem(
        signal_id=entry.signal_id,
        execution_id=entry.execution_id,
        name=entry.name,
        payload=entry.payload,
        created_at=entry.created_at,
        consumed_seq=entry.consumed_seq,
    )


def resource_type(agent_path: str | None) -> str:
    """``agent``, ``swarm`` or ``supervisor``: the kind of the root segment of a run's path."""
    if not agent_path:
        return "agent"
    return _RESOURCE.get(parse_path(agent_path)[0][0], "agent")


def cache_item(execution_id: str, key: str, value: Any, created_at: datetime) -> CacheItem:
    """The wire form of a cache entry."""
    return CacheItem(execution_id=execution_id, key=key, value=value, created_at=created_at)


def _item(row: Checkpoint, messages: Messages | None, snapshot: dict[str, Any], kind: str) -> Item:
    return Item(
        checkpoint_id=row.checkpoint_id,
        execution_id=row.execution_id,
        seq=row.seq,
        runner=row.runner,
        resource_type=kind,
        agent_id=row.runner,
        node_id=row.node_id,
        step_index=row.step_index,
        step_type=row.step_type,
        status=row.status,
        parent_checkpoint_id=row.parent_checkpoint_id,
        created_at=row.created_at,
        state_snapshot=snapshot,
        messages=messages,
        metadata=Metadata(
            node_input=row.node_input,
            node_output=row.node_output,
            interrupt_reason=row.interrupt_reason,
            interrupt_context=row.interrupt_context,
            agent_path=row.agent_path,
        ),
    )


def _split(row: Checkpoint) -> tuple[list[Any] | None, dict[str, Any]]:
    snapshot = row.state_snapshot
    messages = snapshot.get(_MESSAGES)
    if not isinstance(messages, list):
        return None, snapshot
    return messages, {k: v for k, v in snapshot.items() if k != _MESSAGES}


class Conversations:
    """The sender's memory of the messages the receiver holds, per run and conversation.

    :meth:`items` builds a batch against it (rows of one conversation later in the batch build on
    the earlier ones); :meth:`accepted` records what the receiver took. Bounded to ``capacity``
    runs, least recently sent first out; a run is forgotten once its ``run_end`` was accepted.
    """

    def __init__(self, capacity: int = 1024) -> None:
        self._runs: OrderedDict[str, dict[str, list[Any]]] = OrderedDict()
        self._capacity = capacity

    def items(self, rows: Sequence[Checkpoint]) -> list[Item]:
        """The wire items of ``rows`` (in order), each adding its messages over what came before."""
        held: dict[tuple[str, str], list[Any]] = {}
        kinds: dict[str | None, str] = {}
        out: list[Item] = []
        for row in rows:
            messages, snapshot = _split(row)
            wire: Messages | None = None
            if messages is not None:
                key = (row.execution_id, conversation_of(row.agent_path))
                before = held.get(key)
                if before is None:
                    before = self._runs.get(key[0], {}).get(key[1], [])
                wire = Messages(log=key[1], count=len(messages), new=messages[_start(before, messages) :])
                held[key] = messages
            kind = kinds.get(row.agent_path)
            if kind is None:
                kind = kinds[row.agent_path] = resource_type(row.agent_path)
            out.append(_item(row, wire, snapshot, kind))
        return out

    def accepted(self, rows: Iterable[Checkpoint]) -> None:
        """The receiver now holds these rows (in order)."""
        for row in rows:
            if row.step_type == RUN_END:
                self._runs.pop(row.execution_id, None)
                continue
            messages, _ = _split(row)
            if messages is None:
                continue
            logs = self._runs.get(row.execution_id)
            if logs is None:
                logs = self._runs[row.execution_id] = {}
                while len(self._runs) > self._capacity:
                    self._runs.popitem(last=False)
            else:
                self._runs.move_to_end(row.execution_id)
            logs[conversation_of(row.agent_path)] = messages

    def forget(self, execution_id: str, log: str) -> None:
        """Send this conversation whole next time (the receiver said it lacks the base)."""
        logs = self._runs.get(execution_id)
        if logs is not None:
            logs.pop(log, None)


def _start(before: list[Any], messages: list[Any]) -> int:
    """How many leading messages ``messages`` shares with ``before`` (list equality checks identity
    first, so rows materialised from one read compare in C at almost no cost)."""
    n = min(len(before), len(messages))
    if messages[:n] == before[:n]:
        return n
    low, high = 0, n  # the longest common prefix: rare (a re-read or rewritten conversation)
    while low < high:
        mid = (low + high + 1) // 2
        if messages[:mid] == before[:mid]:
            low = mid
        else:
            high = mid - 1
    return low


#: How a receiver reads what it holds of a conversation when it does not remember it.
HeldReader = Callable[[str, str], Awaitable[list[Any] | None]]


class Rebuilder:
    """The receiver's half: turns items back into rows, holding each conversation's messages.

    ``held`` reads the messages a conversation holds when this rebuilder has not seen it (the
    plane reads its store; a restore starts empty). :meth:`row` raises :class:`LookupError` when an
    item builds on messages the receiver does not hold (a gap: the sender should send it whole).
    """

    def __init__(self, held: HeldReader | None = None) -> None:
        self._logs: dict[tuple[str, str], list[Any]] = {}
        self._held = held

    async def row(self, item: Item) -> Checkpoint:
        """The row of ``item``; the conversation it belongs to now holds its messages."""
        snapshot = dict(item.state_snapshot)
        wire = item.messages
        if wire is not None:
            key = (item.execution_id, wire.log)
            start = wire.count - len(wire.new)
            before = self._logs.get(key)
            if before is None and start > 0 and self._held is not None:
                before = await self._held(*key)
            before = before or []
            if start > len(before):
                raise LookupError(
                    f"messages.new of {item.checkpoint_id!r} starts at message {start}, but conversation "
                    f"{wire.log!r} holds {len(before)}: send it whole"
                )
            if wire.new:
                log = self._logs[key] = before[:start] + wire.new
            else:  # a row that adds nothing reads a prefix; the log keeps what it holds
                log = self._logs[key] = before
            messages = log[: wire.count]
            snapshot[_MESSAGES] = messages
        return row_of(item, snapshot)

    def drop(self, item: Item) -> None:
        """Forget the conversation of a refused item (its messages were not taken)."""
        if item.messages is not None:
            self._logs.pop((item.execution_id, item.messages.log), None)


def row_of(item: Item, snapshot: dict[str, Any]) -> Checkpoint:
    """The :class:`~stores.Checkpoint` of an item whose snapshot (with messages) is rebuilt."""
    meta = item.metadata
    return Checkpoint(
        execution_id=item.execution_id,
        seq=item.seq,
        runner=item.runner,
        node_id=item.node_id,
        step_index=item.step_index,
        step_type=item.step_type,
        status=item.status,
        state_snapshot=snapshot,
        node_input=meta.node_input,
        node_output=meta.node_output,
        interrupt_reason=meta.interrupt_reason,
        interrupt_context=meta.interrupt_context,
        agent_path=meta.agent_path,
        parent_checkpoint_id=item.parent_checkpoint_id,
        checkpoint_id=item.checkpoint_id,
        created_at=item.created_at,
    )
