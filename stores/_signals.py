"""A run's inbox: the signals sent to it, kept in the store until a row of the run consumes them.

What both backends share lives here once: the inbox entry (:class:`StoredSignal`), the checks a
``signal()`` makes before anything is written and the refusals it makes from the run's newest row,
and how a row says which signals it consumes (its ``node_input`` under :data:`CONSUMES`). A backend
holds only its SQL: the insert, the read of a run's unconsumed signals, and the guard of a model
turn's row (see :class:`SignalsWaiting`).

No ``from __future__ import annotations`` here: ``stores`` reports :class:`StoredSignal` as
``stores.StoredSignal``, and msgspec resolves string annotations in the module ``__module__`` names.
"""

from datetime import datetime
from typing import Any, Final

import msgspec

from ._errors import check_execution_id, signal_to_completed, signal_to_no_run
from ._json import decode, encode
from ._model import COMPLETED, LLM_CALL, RUN_END, SIGNAL, WAIT, WAKE

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
    "SignalsWaiting",
    "StoredSignal",
    "check_signal",
    "consumed_ids",
    "guards_steering",
    "refuse_signal",
]

#: The name of a steering signal: its payload is a user message for the run's next model turn.
MESSAGE: Final = "message"
#: The ``node_input`` key of a row that consumes signals: their inbox ids, in order.
CONSUMES: Final = "signals"
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
    ``seq`` of the row that consumed it (``None``: not yet)."""

    id: int
    execution_id: str
    name: str
    payload: Any = None
    created_at: datetime
    consumed_seq: int | None = None


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
    if b'"' + CONSUMES.encode() + b'"' not in raw:
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
