"""The events of a run, one msgspec tagged union (``type`` is the tag; tags are stable).

Durable events are derived from the run's rows, so every process reads the same ones, in ``seq``
order; ``seq`` is the row each one comes from. :class:`TextDelta` is ephemeral: streamed model
text, seen only in the process that calls the model. Annotations here are real objects (no
postponed evaluation): the package face renames ``__module__`` and msgspec must still decode them.
"""

from datetime import datetime
from typing import Any, Literal

import msgspec

from stores import PendingInterrupt

__all__ = [
    "DURABLE_EVENTS",
    "DurableEvent",
    "Event",
    "Handoff",
    "Paused",
    "Recovered",
    "Resumed",
    "RunEnded",
    "SignalConsumed",
    "StepStarted",
    "TextDelta",
    "ToolFinished",
    "Waiting",
    "Woken",
    "decode_event",
    "encode_event",
]


class _Base(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    execution_id: str
    #: Who the event comes from (``agent:<name>``, ``swarm:<s>/agent:<a>``, ``.../tool:<name>``).
    agent_path: str | None


class _Row(_Base, frozen=True, kw_only=True):
    #: The row the event is read from; ``events(since=seq + 1)`` continues after it.
    seq: int
    node_id: str
    created_at: datetime


class StepStarted(_Row, frozen=True, kw_only=True, tag="step_started"):
    """A step's row was written: a model call (``llm_call``), a tool call (``tool_call``, with its
    tool and arguments) or the first row of a fork (``fork_origin``). ``attempt`` counts the issues
    of a model call (a re-issue after a crash or a failed call has a higher one)."""

    step_type: str
    step_index: int
    attempt: int = 1
    tool: str | None = None
    arguments: dict[str, Any] | None = None


class ToolFinished(_Row, frozen=True, kw_only=True, tag="tool_finished"):
    """A tool call's result, read from the tool message in the next row of its conversation.

    ``seq`` is that row, ``tool_seq`` the tool's own row; ``node_id`` and ``agent_path`` are the
    tool's. ``ok`` is false for a tool that raised, timed out, got invalid arguments or does not
    exist: ``error`` is then what the model read; otherwise ``output`` is.
    """

    tool: str
    tool_seq: int
    ok: bool
    output: str | None = None
    error: str | None = None


class Handoff(_Row, frozen=True, kw_only=True, tag="handoff"):
    """A Swarm hop (a ``handoff:N`` row at the swarm's path): member ``source`` hands to ``target``."""

    source: str | None
    target: str | None
    reason: str | None = None


class Paused(_Row, frozen=True, kw_only=True, tag="paused"):
    """The run paused for a human (``hitl_pause``); ``pending`` is what a resume must answer."""

    pending: PendingInterrupt


class Resumed(_Row, frozen=True, kw_only=True, tag="resumed"):
    """A pause was claimed (the ``resume`` row); ``resume`` is the decision."""

    resume: dict[str, Any]
    reentry_seq: int | None = None


class Recovered(_Row, frozen=True, kw_only=True, tag="recovered"):
    """Crash recovery (or the resume of a failed run) re-enters the step at ``reentry_seq``."""

    reentry_seq: int | None = None


class RunEnded(_Row, frozen=True, kw_only=True, tag="run_ended"):
    """The ``run_end`` marker: ``status`` is ``completed`` (``output``) or ``failed`` (``error``)."""

    status: Literal["completed", "failed"]
    output: str | None = None
    error: str | None = None


class Waiting(_Row, frozen=True, kw_only=True, tag="waiting"):
    """A tool rests the run (the ``wait`` row): for the signal ``name``, or (``name`` ``None``) a
    sleep; ``wake_at`` is its time, if it has one. A resting event, like :class:`Paused`."""

    name: str | None = None
    wake_at: datetime | None = None


class Woken(_Row, frozen=True, kw_only=True, tag="woken"):
    """A wait ended without a signal (the ``wake`` row): a sleep's time came, or (``timed_out``)
    a ``wait_signal`` timeout passed."""

    name: str | None = None
    timed_out: bool = False


class SignalConsumed(_Row, frozen=True, kw_only=True, tag="signal_consumed"):
    """A tool's ``wait_signal`` consumed the signal ``name`` with ``payload`` (the ``signal`` row)."""

    name: str
    payload: Any = None


class TextDelta(_Base, frozen=True, kw_only=True, tag="text_delta"):
    """A chunk of streamed model text (``RunRef.events(tokens=True)``), before the step's next row.

    ``seq`` is the row of the model call it streams for; ``attempt`` is that call's attempt, so a
    reader drops the partial text of a lower attempt when a higher one starts.
    """

    seq: int
    text: str
    attempt: int = 1


DurableEvent = (
    StepStarted
    | ToolFinished
    | Handoff
    | Paused
    | Resumed
    | Recovered
    | RunEnded
    | Waiting
    | Woken
    | SignalConsumed
)
Event = DurableEvent | TextDelta
#: The event classes read from rows (every one but :class:`TextDelta`).
DURABLE_EVENTS: tuple[type[DurableEvent], ...] = (
    StepStarted,
    ToolFinished,
    Handoff,
    Paused,
    Resumed,
    Recovered,
    RunEnded,
    Waiting,
    Woken,
    SignalConsumed,
)

_encoder = msgspec.json.Encoder()
_decoder: msgspec.json.Decoder[Event] | None = None


def encode_event(event: Event) -> bytes:
    """One event as JSON (one NDJSON line without the newline); ``type`` names its class."""
    return _encoder.encode(event)


def decode_event(data: bytes | str) -> Event:
    """Read :func:`encode_event`'s JSON back (``msgspec.ValidationError`` on a malformed event)."""
    global _decoder
    if _decoder is None:  # built on first use: after the package face renamed the classes
        _decoder = msgspec.json.Decoder(Event)
    return _decoder.decode(data)
