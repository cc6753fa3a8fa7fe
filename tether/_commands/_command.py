"""What a command of ``tether`` is: a name, its arguments and the coroutine that runs it."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

__all__ = ["Command"]


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    """A command without arguments of its own (``--store`` is everyone's)."""


@dataclass(frozen=True)
class Command:
    """One subcommand.

    ``run`` gets the parsed arguments (``args.store`` is the resolved store URL) and returns the exit
    status; a refusal is a :class:`~stores.TetherError` it lets escape (the command line turns it into
    exit status 1 and one line on stderr).
    """

    name: str
    help: str
    run: Callable[[argparse.Namespace], Awaitable[int]]
    add_arguments: Callable[[argparse.ArgumentParser], None] = _no_arguments
