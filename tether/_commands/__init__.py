"""The commands of ``tether``: one module each, each exposing ``COMMAND``; :data:`COMMANDS` lists them.

A new command is a module here with a :class:`Command` and one line in :data:`COMMANDS`.
"""

from __future__ import annotations

from . import demo, plane
from ._command import Command

__all__ = ["COMMANDS", "Command"]

#: Every command of the command line, in the order ``tether --help`` lists them.
COMMANDS: tuple[Command, ...] = (demo.COMMAND, plane.COMMAND)
