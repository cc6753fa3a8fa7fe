"""The one logger of tether: every event goes to the standard-library logger ``"tether"``.

Events are built with structlog (``event key=value ...``) and handed to ``logging.getLogger("tether")``,
never printed (an ``exc_info=`` reaches the record, with its traceback). The package adds no handler: an application that configured nothing sees WARNING and
above on stderr through Python's last-resort handler, and ``logging.basicConfig(level=logging.INFO)``
(or a handler on ``"tether"``) turns on the INFO events too. The level is checked before an event is
built, so a quiet logger formats nothing. Each record carries the run's fields as attributes
(:data:`FIELDS`: ``record.execution_id``, ``record.seq``, ``record.trace_id``...), so a structured
handler or a log pipeline joins logs to runs and traces.
"""

from __future__ import annotations

import logging
import sys
from typing import Final

import structlog

__all__ = ["FIELDS", "LOGGER", "current_span_ids", "tether_logger"]

LOGGER = logging.getLogger("tether")
"""The standard-library logger every tether event goes to."""

_RUN_FIELDS: Final = ("execution_id", "agent_path", "seq")
FIELDS: Final = (*_RUN_FIELDS, "trace_id", "span_id")
"""The attributes every record of :data:`LOGGER` carries (``None`` when the event has none): the
run, the writer's path and the row's ``seq``, and the ids of the OpenTelemetry span active when it
was logged."""


def tether_logger(**bindings: object) -> structlog.stdlib.BoundLogger:
    """A structlog logger writing to :data:`LOGGER`, bound with ``bindings``."""
    logger: structlog.stdlib.BoundLogger = structlog.wrap_logger(
        LOGGER,
        wrapper_class=structlog.stdlib.BoundLogger,
        processors=[
            structlog.stdlib.filter_by_level,
            structlog.stdlib.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _render,
        ],
    ).bind(**bindings)
    return logger


_key_values = structlog.processors.KeyValueRenderer(
    key_order=["event", "execution_id", "agent_path", "node_id"], drop_missing=True
)


def _render(
    logger: object, method: str, event: structlog.typing.EventDict
) -> tuple[tuple[str], dict[str, object]]:
    """``event key=value ...`` as the message; an ``exc_info=`` goes to the record, so handlers print
    its traceback as they print any other. The record also carries the run fields (:data:`FIELDS`)
    as attributes, for handlers that log structured records and for log-trace correlation."""
    exc_info = event.pop("exc_info", None)
    extra: dict[str, object] = {name: event.get(name) for name in _RUN_FIELDS}
    extra["trace_id"], extra["span_id"] = current_span_ids()
    text = _key_values(logger, method, event)
    kwargs: dict[str, object] = {"extra": extra}
    if exc_info:
        kwargs["exc_info"] = exc_info
    return (str(text),), kwargs


def current_span_ids() -> tuple[str | None, str | None]:
    """The trace and span ids (hex) of the current OpenTelemetry span, or ``(None, None)`` when no
    span is active (or ``opentelemetry`` was never imported: then nothing can be)."""
    api = sys.modules.get("opentelemetry.trace")
    if api is None:
        return None, None
    context = api.get_current_span().get_span_context()
    if not context.is_valid:
        return None, None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"
