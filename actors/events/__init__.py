"""The typed events of ``RunRef.events()``: one msgspec tagged union, tagged by ``type``.

Durable events (:class:`StepStarted`, :class:`ToolFinished`, :class:`Handoff`, :class:`Paused`,
:class:`Resumed`, :class:`Recovered`, :class:`RunEnded`, and a tool's :class:`Waiting`,
:class:`Woken` and :class:`SignalConsumed`) are read from a run's rows, so any
process can replay them from a ``seq`` and follow the run live; :class:`TextDelta` carries streamed
model text in the process that calls the model. Every event names its ``agent_path``.
See ``docs/events.md``.
"""

from ._types import (
    DURABLE_EVENTS,
    DurableEvent,
    Event,
    Handoff,
    Paused,
    Recovered,
    Resumed,
    RunEnded,
    SignalConsumed,
    StepStarted,
    TextDelta,
    ToolFinished,
    Waiting,
    Woken,
    decode_event,
    encode_event,
)

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
