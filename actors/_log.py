"""Per-step logging that costs nothing when nobody listens.

Events go through structlog to the standard library logger ``"tether"``. That logger has no handler
and the WARNING level by default, so a run prints nothing per step unless the application asks:
``logging.basicConfig(level=logging.INFO)`` (or a handler on ``"tether"``) turns the events on.
The level is checked before an event is built, so a quiet run does not format anything.
"""

from __future__ import annotations

import logging
from typing import Any

import structlog

from stores import Checkpoint

__all__ = ["StepLog", "tether_logger"]

_STDLIB = logging.getLogger("tether")


def tether_logger(**bindings: Any) -> Any:
    """A structlog logger writing to the stdlib ``"tether"`` logger, bound with ``bindings``."""
    return structlog.wrap_logger(
        _STDLIB,
        wrapper_class=structlog.stdlib.BoundLogger,
        processors=[
            structlog.stdlib.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.KeyValueRenderer(
                key_order=["event", "execution_id", "agent_path", "node_id"]
            ),
        ],
    ).bind(**bindings)


class StepLog:
    """One event per step (``execution_id``, ``agent_path``, ``node_id``), built only when enabled."""

    __slots__ = ("_bindings", "_logger")

    def __init__(self, **bindings: Any) -> None:
        self._bindings = bindings
        self._logger: Any = None

    def step(self, row: Checkpoint) -> None:
        """Log that ``row`` was written (an INFO event named after its ``step_type``)."""
        if not _STDLIB.isEnabledFor(logging.INFO):
            return
        if self._logger is None:
            self._logger = tether_logger(**self._bindings)
        self._logger.info(
            row.step_type,
            execution_id=row.execution_id,
            agent_path=row.agent_path,
            node_id=row.node_id,
            seq=row.seq,
            status=row.status,
        )
