"""The rows a run writes: :class:`Checkpoint` and :class:`PendingInterrupt`, and the row grammar's names.

No ``from __future__ import annotations`` here: ``stores`` reports these Structs as ``stores.Checkpoint``
(``__module__`` is rewritten), and msgspec resolves string annotations in the module ``__module__``
names; evaluated annotations need no resolving.
"""

import os
import time
from datetime import UTC, datetime
from typing import Any, Final

import msgspec

__all__ = [
    "BOOKKEEPING_STEPS",
    "CacheEntry",
    "Cached",
    "Checkpoint",
    "PendingInterrupt",
    "ReEntry",
    "new_id",
    "utcnow",
]

# step_type values of the row grammar (docs/durability.md, "The row grammar").
LLM_CALL: Final = "llm_call"
TOOL_CALL: Final = "tool_call"
HITL_PAUSE: Final = "hitl_pause"
RESUME: Final = "resume"
RECOVER: Final = "recover"
HANDOFF: Final = "handoff"
FORK_ORIGIN: Final = "fork_origin"
RUN_END: Final = "run_end"
#: A tool rests for a signal or a time (no pending row); a tool consumed a signal; a wait woken
#: (its timeout passed, its sleep ended). See ``stores._signals``.
WAIT: Final = "wait"
SIGNAL: Final = "signal"
WAKE: Final = "wake"

#: Rows that record a decision about the run rather than a step of it; re-entry reads through them.
BOOKKEEPING_STEPS: Final = frozenset({RESUME, RECOVER, SIGNAL, WAKE})

# A row's status values (a run's are ``actors.RunSummary.status``).
COMPLETED: Final = "completed"
INTERRUPTED: Final = "interrupted"
FAILED: Final = "failed"
#: Every status a row (a ``Checkpoint``) can have.
STATUSES: Final = frozenset({COMPLETED, INTERRUPTED, FAILED})

#: Key in a ``resume``/``recover`` row's ``node_input`` naming the ``seq`` of the row it re-enters.
REENTRY_SEQ: Final = "reentry_seq"
#: Key in a ``resume`` row's ``node_input`` holding the claimed ``Resume`` as a dict.
RESUME_KEY: Final = "resume"


def new_id() -> str:
    """A fresh, globally unique id: 32 hex digits laid out as a UUID version 7 (RFC 9562).

    The first 48 bits are the Unix time in milliseconds and the next 12 the fraction of that
    millisecond, so ids sort by creation time (ties within ~0.25 µs fall in random order); the
    last 62 bits are random. Time order is what keeps the stores' indexes cheap: a new row's
    ``checkpoint_id`` and a new run's ``execution_id`` land at the end of their B-trees, so a
    commit rewrites one index page there instead of a random page per row. Built from bytes
    (~2 µs), not through ``uuid.UUID``.
    """
    now = time.time_ns()
    millis, sub = divmod(now, 1_000_000)
    raw = bytearray(millis.to_bytes(6, "big") + os.urandom(10))
    fraction = sub * 4096 // 1_000_000  # 12 bits of the millisecond
    raw[6] = 0x70 | (fraction >> 8)
    raw[7] = fraction & 0xFF
    raw[8] = (raw[8] & 0x3F) | 0x80
    return raw.hex()


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


class Checkpoint(msgspec.Struct, kw_only=True):
    """One row of a run's log, written before the step it names.

    Rows of a run are ordered by ``seq`` (unique per ``execution_id``), never by ``created_at``.
    ``state_snapshot["messages"]``, when present, is stored once in the run's message log and
    materialised on read.
    """

    execution_id: str
    seq: int
    runner: str
    node_id: str
    step_index: int = 0
    step_type: str = LLM_CALL
    status: str = COMPLETED
    state_snapshot: dict[str, Any] = {}
    node_input: dict[str, Any] = {}
    node_output: dict[str, Any] = {}
    interrupt_reason: str | None = None
    interrupt_context: dict[str, Any] = {}
    agent_path: str | None = None
    parent_checkpoint_id: str | None = None
    checkpoint_id: str = msgspec.field(default_factory=new_id)
    created_at: datetime = msgspec.field(default_factory=utcnow)


class PendingInterrupt(msgspec.Struct, kw_only=True):
    """A paused run waiting for a human: at most one per ``execution_id``. ``expires_at``: past it,
    a sweep resolves the pause as a refusal (``interrupt(..., expires_in=)``); ``None`` never."""

    execution_id: str
    reason: str
    context: dict[str, Any] = {}
    node_id: str = ""
    agent_path: str | None = None
    created_at: datetime = msgspec.field(default_factory=utcnow)
    expires_at: datetime | None = None


class ReEntry(msgspec.Struct, kw_only=True, frozen=True):
    """Where a resume or a crash recovery re-enters a run.

    ``step`` is the step row to re-enter (bookkeeping rows read through), ``newest`` the newest row
    of the run (the next row takes ``newest.seq + 1``), and ``resume`` the claimed decision found on
    the way, if a ``resume`` row names the step.
    """

    step: Checkpoint
    newest: Checkpoint
    resume: dict[str, Any] | None = None


class Cached(msgspec.Struct, frozen=True):
    """An idempotency-cache hit; ``value`` may itself be ``None``."""

    value: Any


class CacheEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One stored ``@idempotent`` result, as the outbox ships it and a restore imports it."""

    execution_id: str
    key: str
    value: Any
    created_at: datetime
