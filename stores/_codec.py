"""Rows to stored columns and back, with each run's messages stored once.

A row's ``state_snapshot["messages"]`` is not stored whole with every row. Each conversation of a run
has a message log, named by ``log_id``; a row keeps ``log_id``, ``message_count`` (the prefix it saw)
and, in ``new_messages``, only the messages it added to the log (a JSON array: its *chunk*). A log is
the concatenation of its rows' chunks in ``seq`` order, and reading a row puts its prefix back. So a
step costs its new messages plus a constant, not the whole conversation again, and it is ONE row
insert: no second table, no second index.

:class:`MessageLogs` decides, per conversation, which messages are new. It remembers the messages
each log holds (the same objects the writer passed, so the prefix check is mostly identity
comparisons done in C). A row whose messages do not extend the log it would join (a worker started
afresh, a rewritten history) starts a new log: one full copy at the divergence, never per step.
Backends share this module, so they store the same bytes.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

import msgspec

from ._errors import MAX_EXECUTION_ID as _MAX_ID
from ._errors import RowTooLarge, SerializationError, StoreError, check_execution_id
from ._json import check_str, decode, encode, encode_many
from ._model import RUN_END, Checkpoint, PendingInterrupt, new_id
from ._paths import conversation_of

__all__ = [
    "DEFAULT_MAX_ROW_BYTES",
    "LogAppend",
    "LogUnknown",
    "MessageLogs",
    "StoredRow",
    "decode_row",
    "encode_cache_value",
    "encode_pending",
    "rechunk",
    "replay_log",
    "split_chunk",
]

#: The documented limit on the new content of one row (snapshot without old messages, inputs, outputs).
DEFAULT_MAX_ROW_BYTES = 16 * 1024 * 1024
#: Text columns of a row; like JSON strings they may not hold NUL (PostgreSQL text cannot).
_ROW_TEXT = (
    "checkpoint_id",
    "execution_id",
    "runner",
    "node_id",
    "step_type",
    "status",
    "interrupt_reason",
    "agent_path",
    "parent_checkpoint_id",
)
_PENDING_TEXT = ("execution_id", "reason", "node_id", "agent_path")
_MESSAGES = "messages"


class StoredRow(NamedTuple):
    """A row's column values, as every backend stores them (JSON columns as encoded bytes)."""

    checkpoint_id: str
    execution_id: str
    seq: int
    runner: str
    node_id: str
    step_index: int
    step_type: str
    status: str
    state_snapshot: bytes
    log_id: str | None
    message_count: int
    node_input: bytes
    node_output: bytes
    interrupt_reason: str | None
    interrupt_context: bytes
    agent_path: str | None
    parent_checkpoint_id: str | None
    created_at: datetime


class LogAppend(NamedTuple):
    """The messages a row adds to its log: ``chunk`` (a JSON array) goes at index ``start``.

    The row is written only if the log then holds exactly ``start`` messages (its newest chunk row
    has ``message_count == start``): a writer with a stale memory of the log re-plans instead.
    """

    start: int
    chunk: bytes


class LogUnknown(Exception):
    """The row continues a log this store holds no memory of: load it, then plan the row again."""


class _Log:
    __slots__ = ("log_id", "messages")

    def __init__(self, log_id: str, messages: list[Any]) -> None:
        self.log_id = log_id
        self.messages = messages


class MessageLogs:
    """Per-store memory of which messages each conversation's log already holds.

    Not thread-safe: a store calls :meth:`plan` and :meth:`forget` from one task or thread.
    Memory is kept per run, least recently written first out: ``capacity`` bounds how many runs are
    remembered, and a run is forgotten when its ``run_end`` is planned. A forgotten run is re-read
    from the database by the backend (:meth:`known` / :meth:`remember`) before its next write.
    """

    def __init__(self, *, capacity: int = 1024, max_row_bytes: int = DEFAULT_MAX_ROW_BYTES) -> None:
        self._runs: OrderedDict[str, dict[str, _Log]] = OrderedDict()
        self._capacity = capacity
        self.max_row_bytes = max_row_bytes

    def known(self, execution_id: str, conversation: str) -> bool:
        """Whether the log of this conversation is in memory (else the backend loads it first)."""
        logs = self._runs.get(execution_id)
        return logs is not None and conversation in logs

    def remember(self, execution_id: str, conversation: str, log_id: str, messages: list[Any]) -> None:
        """Record what a log holds, as loaded from the database."""
        self._logs_of(execution_id)[conversation] = _Log(log_id, messages)

    def forget(self, execution_id: str) -> None:
        """Drop what is remembered of a run (after a failed write, a delete, or when it ends)."""
        self._runs.pop(execution_id, None)

    def _logs_of(self, execution_id: str) -> dict[str, _Log]:
        logs = self._runs.get(execution_id)
        if logs is None:
            logs = self._runs[execution_id] = {}
            while len(self._runs) > self._capacity:
                self._runs.popitem(last=False)
        else:
            self._runs.move_to_end(execution_id)
        return logs

    def plan(self, row: Checkpoint, recall: bool = False) -> tuple[StoredRow, LogAppend | None]:
        """Encode ``row`` for storage and work out which messages are new.

        Raises :class:`SerializationError` (with the path inside the row) or :class:`RowTooLarge`
        before anything is written. The caller must :meth:`forget` the run if the write then fails.
        With ``recall``, a row past ``seq`` 0 whose conversation's log is not in memory raises
        :class:`LogUnknown` once it is validated, before anything is remembered: the backend loads
        the log (:meth:`remember`) and plans again.
        """
        eid = row.execution_id
        # The text columns: the common case (a str execution_id of allowed length, every other
        # column a str or None, all ASCII without NUL) is cleared by one join and two C-level
        # scans; anything else is checked column by column, which names what is wrong.
        reason, path, parent = row.interrupt_reason, row.agent_path, row.parent_checkpoint_id
        try:
            joined = "".join(
                (
                    eid,
                    row.checkpoint_id,
                    row.runner,
                    row.node_id,
                    row.step_type,
                    row.status,
                    "" if reason is None else reason,
                    "" if path is None else path,
                    "" if parent is None else parent,
                )
            )
        except TypeError:  # a column that is not a str
            joined = "\x00"
        if "\x00" in joined or not joined.isascii() or type(eid) is not str or not 0 < len(eid) <= _MAX_ID:
            _check_text(row, _ROW_TEXT)
        snapshot = row.state_snapshot
        messages = snapshot.get(_MESSAGES) if isinstance(snapshot, dict) else None
        log_id: str | None = None
        count = start = 0
        if type(messages) is list or isinstance(messages, list | tuple):
            if type(messages) is not list:
                messages = list(messages)
            rest = dict(snapshot)
            del rest[_MESSAGES]
            count = len(messages)
            log_id, start = self._place(eid, conversation_of(path), messages, count, recall and row.seq != 0)
            values: list[Any] = [rest, row.node_input, row.node_output, row.interrupt_context]
            if start < count:
                values.append(messages[start:])
        else:
            rest = snapshot
            values = [rest, row.node_input, row.node_output, row.interrupt_context]
        # One check for every JSON column and the new messages (the chunk is the JSON array of them,
        # the same bytes as encoding each message and joining them); a value the check refuses is
        # encoded alone, which normalises it or names its path.
        parts = encode_many(values)
        if parts is None:
            parts = _encode_one_by_one(row, rest, messages if log_id is not None else None, start)
        # A LogAppend from its fields, without the frame of the NamedTuple's generated __new__.
        append = tuple.__new__(LogAppend, (start, parts[4])) if len(parts) > 4 else None
        state, node_input, node_output, context = parts[0], parts[1], parts[2], parts[3]
        stored = tuple.__new__(  # a StoredRow from its column values in order, no copy
            StoredRow,
            (
                row.checkpoint_id,
                eid,
                row.seq,
                row.runner,
                row.node_id,
                row.step_index,
                row.step_type,
                row.status,
                state,
                log_id,
                count,
                node_input,
                node_output,
                row.interrupt_reason,
                context,
                row.agent_path,
                row.parent_checkpoint_id,
                row.created_at,
            ),
        )
        size = len(state) + len(node_input) + len(node_output) + len(context)
        if append is not None:
            size += len(append.chunk)
        if size > self.max_row_bytes:
            self.forget(eid)
            raise RowTooLarge(
                f"row {row.node_id!r} of run {eid!r} adds {size} bytes, "
                f"over the store's limit of {self.max_row_bytes}",
                path="$",
            )
        if row.step_type == RUN_END:
            self.forget(eid)  # an ended run writes again only after a reload
        return stored, append

    def _place(
        self, execution_id: str, conversation: str, messages: list[Any], count: int, recall: bool
    ) -> tuple[str, int]:
        """The log the ``count`` messages go to and the index of the first new one (``recall``: an
        unknown log raises :class:`LogUnknown`, with nothing remembered yet)."""
        runs = self._runs
        logs = runs.get(execution_id)
        log = None if logs is None else logs.get(conversation)
        if log is not None:
            known = log.messages
            start = len(known)
            if count >= start and messages[:start] == known:
                known.extend(messages[start:])
                runs.move_to_end(execution_id)
                return log.log_id, start
            if count < start and known[:count] == messages:
                runs.move_to_end(execution_id)
                return log.log_id, count
        elif recall:
            raise LogUnknown
        log_id = new_id()
        self._logs_of(execution_id)[conversation] = _Log(log_id, list(messages))
        return log_id, 0


def decode_row(
    stored: StoredRow,
    messages: list[Any] | None,
) -> Checkpoint:
    """Build a :class:`Checkpoint` from stored columns; ``messages`` is the log prefix the row saw."""
    snapshot: dict[str, Any] = decode(stored.state_snapshot)
    if stored.log_id is not None:
        snapshot = {_MESSAGES: messages if messages is not None else [], **snapshot}
    return Checkpoint(
        checkpoint_id=stored.checkpoint_id,
        execution_id=stored.execution_id,
        seq=stored.seq,
        runner=stored.runner,
        node_id=stored.node_id,
        step_index=stored.step_index,
        step_type=stored.step_type,
        status=stored.status,
        state_snapshot=snapshot,
        node_input=decode(stored.node_input),
        node_output=decode(stored.node_output),
        interrupt_reason=stored.interrupt_reason,
        interrupt_context=decode(stored.interrupt_context),
        agent_path=stored.agent_path,
        parent_checkpoint_id=stored.parent_checkpoint_id,
        created_at=stored.created_at,
    )


def split_chunk(chunk: bytes) -> list[bytes]:
    """The messages of a stored chunk as their JSON bytes, without decoding them."""
    return [bytes(raw) for raw in _raw_list.decode(chunk)]


_raw_list = msgspec.json.Decoder(list[msgspec.Raw])


def replay_log(chunks: Iterable[tuple[int, Any]], split: Callable[[Any], list[Any]] = decode) -> list[Any]:
    """A log's messages from its rows' ``(message_count, new_messages)`` in ``seq`` order.

    Each chunk goes at ``message_count - len(chunk)`` (it was written only if the log then had that
    many messages). ``split`` turns a chunk into its messages: decoded (the default),
    :func:`split_chunk` to keep them as JSON bytes, or ``list`` for a chunk already decoded. A
    chunk that would leave a gap means rows were lost from under the log: :class:`StoreError`,
    never a silently shorter conversation.
    """
    log: list[Any] = []
    for count, chunk in chunks:
        new = split(chunk)
        start = count - len(new)
        if not 0 <= start <= len(log):
            raise StoreError(
                f"a message log is missing messages {len(log)}..{start - 1}: rows holding them are gone"
            )
        del log[start:]
        log.extend(new)
    return log


def rechunk(counts: Sequence[int], bodies: Sequence[bytes]) -> list[bytes | None]:
    """The chunks that rows with these ``message_count`` (in ``seq`` order) carry for a log of ``bodies``.

    Used when rows of a log are deleted (prune) or a log is converted: each row carries the
    messages between the largest count before it and its own, so the remaining rows still read
    exactly the messages they saw.
    """
    chunks: list[bytes | None] = []
    have = 0
    for count in counts:
        if count > have:
            chunks.append(b"[" + b",".join(bodies[have:count]) + b"]")
            have = count
        else:
            chunks.append(None)
    return chunks


def encode_pending(pending: PendingInterrupt) -> bytes:
    """The pending row's context as JSON (raises :class:`SerializationError` with its path)."""
    _check_text(pending, _PENDING_TEXT)
    return encode(pending.context, path="$.context")


def encode_cache_value(execution_id: str, key: str, value: Any) -> bytes:
    """An idempotency-cache value as JSON; ``SerializationError`` for a value or a NUL-bearing id."""
    check_execution_id(execution_id)
    if not isinstance(key, str):
        raise SerializationError(f"a value of type {type(key).__name__} is not a str", path="$.key")
    check_str(key, "$.key", SerializationError)
    return encode(value, path="$")


def _encode_one_by_one(row: Checkpoint, rest: Any, messages: list[Any] | None, start: int) -> list[bytes]:
    """The row's JSON columns (and, when ``messages`` has new ones, their chunk) encoded value by
    value: what :func:`encode_many` refused is normalised here, or refused naming its path."""
    chunk: bytes | None = None
    if messages is not None and start < len(messages):
        bodies = [
            encode(m, path=f"$.state_snapshot.messages[{i}]") for i, m in enumerate(messages[start:], start)
        ]
        chunk = b"[" + b",".join(bodies) + b"]"
    parts = [
        encode(rest, path="$.state_snapshot"),
        encode(row.node_input, path="$.node_input"),
        encode(row.node_output, path="$.node_output"),
        encode(row.interrupt_context, path="$.interrupt_context"),
    ]
    if chunk is not None:
        parts.append(chunk)
    return parts


def _check_text(obj: Checkpoint | PendingInterrupt, fields: tuple[str, ...]) -> None:
    """Refuse a text column that is not a str (or None), or holds a NUL or a lone surrogate,
    before anything is written, naming the field; the execution_id's documented limits first."""
    check_execution_id(obj.execution_id)
    for name in fields:
        value = getattr(obj, name)
        if isinstance(value, str):
            if "\x00" in value or not value.isascii():
                check_str(value, f"$.{name}", SerializationError)
        elif value is not None:
            raise SerializationError(f"a value of type {type(value).__name__} is not a str", path=f"$.{name}")
