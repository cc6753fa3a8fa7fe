"""A run's inbox: the signals sent to it, kept in the store until a row of the run consumes them.

What both backends share lives here once: the inbox entry (:class:`StoredSignal`), the checks a
``signal()`` makes before anything is written and the refusals it makes from the run's newest row,
and how a row says which signals it consumes (its ``node_input`` under :data:`CONSUMES`). A backend
holds only its SQL: the insert, the read of a run's unconsumed signals, and the guard of a model
turn's row (see :class:`SignalsWaiting`).

Replication: an entry is named in every store and on the plane by its ``signal_id`` (a restored
entry keeps it), and its state (sent, then consumed by a row) rides the store's outbox. How a
copy received from elsewhere merges with the one held (:func:`merge_copy`) and which wait a restored
run rests at (:func:`restored_wait`) are decided here, once.

No ``from __future__ import annotations`` here: ``stores`` reports :class:`StoredSignal` as
``stores.StoredSignal``, and msgspec resolves string annotations in the module ``__module__`` names.
"""

import enum
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final, NamedTuple

import msgspec

from ._errors import (
    SerializationError,
    check_execution_id,
    signal_to_completed,
    signal_to_no_run,
)
from ._json import decode, encode
from ._model import COMPLETED, INTERRUPTED, LLM_CALL, RUN_END, SIGNAL, WAIT, WAKE, Checkpoint

__all__ = [
    "CONSUMES",
    "MESSAGE",
    "SIGNAL",
    "WAIT",
    "WAIT_DEADLINE",
    "WAIT_K",
    "WAIT_NAME",
    "WAIT_STEP",
    "WAKE",
    "WAKE_AT",
    "Merge",
    "Merged",
    "SignalsWaiting",
    "StoredSignal",
    "check_copies",
    "check_copy",
    "check_signal",
    "consumed_ids",
    "guards_steering",
    "merge_copies",
    "merge_copy",
    "refuse_signal",
    "restored_wait",
]

#: The name of a steering signal: its payload is a user message for the run's next model turn.
MESSAGE: Final = "message"
#: The ``node_input`` key of a row that consumes signals: their inbox ids, in order.
CONSUMES: Final = "signals"
#: The key :data:`CONSUMES` as it appears in a row's stored ``node_input`` (searched for, not decoded).
_CONSUMES_KEY: Final = b'"' + CONSUMES.encode() + b'"'
#: The ``interrupt_context`` of a ``wait`` row: what it waits for (a signal's name, ``None`` for a
#: sleep), its place among the waits of its step (``k``), its deadline (ISO 8601; ``None``: none)
#: and the step's ``seq``.
WAIT_NAME: Final = "name"
WAIT_K: Final = "k"
WAIT_DEADLINE: Final = "deadline"
WAIT_STEP: Final = "step"
#: The ``state_snapshot`` key of a ``wait`` row holding its deadline (ISO 8601), for listings.
WAKE_AT: Final = "wake_at"
#: The longest signal name (it is indexed).
_MAX_NAME: Final = 200


class StoredSignal(msgspec.Struct, kw_only=True, frozen=True):
    """One inbox entry: ``id`` orders a run's signals (the store's sequence); ``consumed_seq`` is the
    ``seq`` of the row that consumed it (``None``: not yet); ``signal_id`` names it in every store
    and on the plane (a restored entry keeps it; an entry given to a store to copy or import gets
    that store's own ``id``, whatever it carries)."""

    id: int
    execution_id: str
    name: str
    payload: Any = None
    created_at: datetime
    consumed_seq: int | None = None
    signal_id: str = ""


class SignalsWaiting(Exception):
    """A model turn's row was refused because ``"message"`` signals wait in the run's inbox: the
    writer reads them, adds them to the conversation and writes the row again, consuming them
    (:data:`CONSUMES`). Nothing was written. Internal to the store and the run engine."""

    def __init__(self, execution_id: str) -> None:
        super().__init__(f"run {execution_id!r} has steering messages waiting")
        self.execution_id = execution_id


def check_signal(execution_id: str, name: object, payload: Any) -> bytes:
    """The payload as stored (JSON bytes), after checking the id, the name (a non-empty str) and
    the payload (the JSON rule: ``SerializationError`` naming its path), before any I/O."""
    check_execution_id(execution_id)
    if not isinstance(name, str) or not name:
        raise TypeError(f"a signal's name is a non-empty str, not {name!r}")
    if len(name) > _MAX_NAME or "\x00" in name:
        raise ValueError(
            f"a signal's name is at most {_MAX_NAME} characters without NUL, not {name[:40]!r}..."
        )
    encode(name, path="$.name")
    return encode(payload, path="$.payload")


def refuse_signal(execution_id: str, newest: tuple[str, str] | None) -> None:
    """Refuse a signal to a run by its newest row's ``(step_type, status)``: none (``RunNotFound``),
    or a completed ``run_end`` (``AlreadyResumed``: nothing is left to deliver to)."""
    if newest is None:
        raise signal_to_no_run(execution_id)
    if newest[0] == RUN_END and newest[1] == COMPLETED:
        raise signal_to_completed(execution_id)


def consumed_ids(node_input: bytes | bytearray | memoryview) -> list[int] | None:
    """The inbox ids a row consumes, from its stored ``node_input`` (``None``: none; most rows
    cost a byte search, not a decode)."""
    raw = bytes(node_input)
    if _CONSUMES_KEY not in raw:
        return None
    found = decode(raw).get(CONSUMES)
    if not isinstance(found, list) or not all(type(i) is int for i in found):
        return None
    return list(found)


def guards_steering(step_type: str, consumes: list[int] | None) -> bool:
    """Whether a row's write must be refused while ``"message"`` signals wait: a model turn's row
    that consumes none (one indexed probe in the row's own transaction)."""
    return step_type == LLM_CALL and consumes is None


def payload_of(raw: bytes | bytearray | memoryview | str) -> Any:
    """A stored payload, decoded."""
    return decode(bytes(raw) if not isinstance(raw, str) else raw.encode())


class Merge(enum.Enum):
    """What a store does with a copy of an inbox entry held elsewhere (see :func:`merge_copy`)."""

    INSERT = "insert"  # unknown here: stored as it is
    CONSUME = "consume"  # held unconsumed here, consumed there: the consumption is recorded
    KEEP = "keep"  # nothing new (the same state, or an older one sent again)


def merge_copy(held: StoredSignal | None, sent: StoredSignal) -> Merge:
    """How the copy ``sent`` merges with the entry ``held`` under its ``signal_id`` (``None``: none).

    States only move forward (sent, then consumed once), so an older state sent again changes
    nothing. :class:`ValueError` (its reason) for a copy that contradicts the held entry: another
    run, name, payload or time, or a consumption by another row (the first one recorded stands).
    """
    if held is None:
        return Merge.INSERT
    if (held.execution_id, held.name, held.created_at) != (sent.execution_id, sent.name, sent.created_at) or (
        held.payload != sent.payload
    ):
        raise ValueError(f"a known signal_id {sent.signal_id!r} sent again with different content")
    if sent.consumed_seq is None or sent.consumed_seq == held.consumed_seq:
        return Merge.KEEP
    if held.consumed_seq is None:
        return Merge.CONSUME
    raise ValueError(
        f"signal {sent.signal_id!r} was consumed by the row at seq {held.consumed_seq}, "
        f"not by the one at seq {sent.consumed_seq}"
    )


def restored_wait(
    newest: Checkpoint | None, unconsumed: Iterable[str], now: datetime
) -> tuple[str | None, datetime | None] | None:
    """The wait a restored run rests at, as its store's index of waits records it: ``(name,
    wake_at)`` when its newest row is a tool's ``wait`` (``None`` otherwise). It is due ``now``
    when a signal it waits for is among the ``unconsumed`` names restored with it, else at its
    deadline (``None``: no time), as :meth:`Store.append_wait` records it."""
    if newest is None or newest.step_type != WAIT or newest.status != INTERRUPTED:
        return None
    name = newest.interrupt_context.get(WAIT_NAME)
    name = name if isinstance(name, str) else None
    if name is not None and name in set(unconsumed):
        return name, now
    deadline = newest.interrupt_context.get(WAIT_DEADLINE)
    try:
        return name, datetime.fromisoformat(deadline) if isinstance(deadline, str) else None
    except ValueError:  # not a time: the run rests until a signal or a person wakes it
        return name, None


def check_copy(entry: StoredSignal, execution_id: str | None = None) -> bytes:
    """The payload as stored of an entry to copy or import (the checks of ``signal()``: its run's
    id, its name, the JSON rule), after checking its ``signal_id`` (a non-empty str of at most
    200 characters, no NUL), ``consumed_seq`` (``None`` or a seq) and, if given, that it is of the
    run ``execution_id``: ``TypeError``, ``ValueError`` or ``SerializationError`` before any I/O."""
    if execution_id is not None and entry.execution_id != execution_id:
        raise ValueError(f"signal {entry.signal_id!r} is of run {entry.execution_id!r}, not {execution_id!r}")
    sid = entry.signal_id
    if not isinstance(sid, str) or not sid or len(sid) > _MAX_NAME or "\x00" in sid:
        raise ValueError(f"a signal_id is a non-empty str of at most {_MAX_NAME} characters, not {sid!r}")
    seq = entry.consumed_seq
    if seq is not None and (type(seq) is not int or seq < 0):
        raise ValueError(f"consumed_seq is None or a seq (an int >= 0), not {seq!r}")
    return check_signal(entry.execution_id, entry.name, entry.payload)


def check_copies(entries: Iterable[StoredSignal]) -> tuple[list[tuple[StoredSignal, bytes]], dict[str, str]]:
    """The entries to copy that pass :func:`check_copy`, each with its payload as stored, and the
    others refused, ``{signal_id: reason}`` (before any I/O)."""
    checked: list[tuple[StoredSignal, bytes]] = []
    refused: dict[str, str] = {}
    for entry in entries:
        try:
            checked.append((entry, check_copy(entry)))
        except (TypeError, ValueError, SerializationError) as exc:
            refused[str(entry.signal_id)] = f"malformed signal: {exc}"
    return checked, refused


class Merged(NamedTuple):
    """What copies change in a store: entries to insert (in order, each with its payload as
    stored), consumptions to record on held entries, and the copies refused by reason."""

    fresh: list[tuple[StoredSignal, bytes]]
    consumed: list[StoredSignal]
    refused: dict[str, str]


def merge_copies(held: Mapping[str, StoredSignal], checked: Sequence[tuple[StoredSignal, bytes]]) -> Merged:
    """Merge checked copies, in order, into the entries ``held`` under their ``signal_id``
    (:func:`merge_copy` each, against the state the copies before it left)."""
    state = dict(held)
    fresh: dict[str, tuple[StoredSignal, bytes]] = {}
    consumed: dict[str, StoredSignal] = {}
    refused: dict[str, str] = {}
    for entry, body in checked:
        sid = entry.signal_id
        try:
            merge = merge_copy(state.get(sid), entry)
        except ValueError as exc:
            refused[sid] = str(exc)
            continue
        if merge is Merge.KEEP:
            continue
        now = state[sid] = (
            entry
            if merge is Merge.INSERT
            else msgspec.structs.replace(state[sid], consumed_seq=entry.consumed_seq)
        )
        if merge is Merge.INSERT or sid in fresh:
            fresh[sid] = (now, fresh[sid][1] if sid in fresh else body)
        else:
            consumed[sid] = now
    return Merged(list(fresh.values()), list(consumed.values()), refused)
