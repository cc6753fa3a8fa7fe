"""The one logger of tether: every event goes to the standard-library logger ``"tether"``.

Events are built with structlog (``event key=value ...``) and handed to ``logging.getLogger("tether")``,
never printed (an ``exc_info=`` reaches the record, with its traceback). The package adds no handler: an application that configured nothing sees WARNING and
above on stderr through Python's last-resort handler, and ``logging.basicConfig(level=logging.INFO)``
(or a handler on ``"tether"``) turns on the INFO events too. The level is checked before an event is
built, so a quiet logger formats nothing.
"""

from __future__ import annotations

import logging

import structlog

__all__ = ["LOGGER", "tether_logger"]

LOGGER = logging.getLogger("tether")
"""The standard-library logger every tether event goes to."""


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
    its traceback as they print any other."""
    exc_info = event.pop("exc_info", None)
    text = _key_values(logger, method, event)
    return (str(text),), ({"exc_info": exc_info} if exc_info else {})
