"""The text hook: how a streaming model hands the text it receives to whoever watches the run.

A model's ``complete()`` still returns the whole :class:`~actors.models.ModelReply`; while it
streams, it calls :func:`stream_text` with each piece of text as it arrives. The run binds a sink
around each model call (:func:`streaming_to`), which turns the pieces into ``TextDelta`` events of
``RunRef.events(tokens=True)``; outside a run, or when nobody reads tokens, the call does nothing.
The sink is a context variable, so the :class:`~actors.models.Model` protocol is unchanged and a
model needs no knowledge of runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["TextSink", "stream_text", "streaming_to"]

#: Called with each piece of streamed text, in order.
TextSink = Callable[[str], None]

_sink: ContextVar[TextSink | None] = ContextVar("tether_text_sink", default=None)


def stream_text(text: str) -> None:
    """Hand one piece of streamed model text to the run's readers (a no-op when none listen)."""
    sink = _sink.get()
    if sink is not None and text:
        sink(text)


@contextmanager
def streaming_to(sink: TextSink | None) -> Iterator[None]:
    """Bind ``sink`` as the receiver of :func:`stream_text` for the model call inside the block."""
    token = _sink.set(sink)
    try:
        yield
    finally:
        _sink.reset(token)
