"""The commands of ``tether``: one module each (``approve`` and ``reject`` share ``decide``), each
exposing its :class:`Command`; :data:`COMMANDS` lists them.

A new command is a module here with a :class:`Command` and one line in :data:`COMMANDS`.
"""

from __future__ import annotations

from . import (
    bench,
    cancel,
    check,
    decide,
    demo,
    diff,
    fork,
    inspect,
    migrate,
    pending,
    plane,
    prune,
    recover,
    resume,
    runs,
    schedules,
    show,
    signal,
    worker,
)
from ._command import Command

__all__ = ["COMMANDS", "Command"]

#: Every command of the command line, in the order ``tether --help`` lists them.
COMMANDS: tuple[Command, ...] = (
    demo.COMMAND,
    runs.COMMAND,
    show.COMMAND,
    diff.COMMAND,
    pending.COMMAND,
    decide.APPROVE,
    decide.REJECT,
    resume.COMMAND,
    recover.COMMAND,
    worker.COMMAND,
    cancel.COMMAND,
    signal.COMMAND,
    schedules.COMMAND,
    fork.COMMAND,
    prune.COMMAND,
    migrate.COMMAND,
    check.COMMAND,
    plane.COMMAND,
    inspect.COMMAND,
    bench.COMMAND,
)
