"""The ``tether`` command line (also ``python -m tether``).

``tether [--store URL] COMMAND [--store URL] ...``: the store comes from ``--store`` (before or after
the command), else ``$TETHER_STORE``, else ``sqlite:///tether.db``. Exit status 0 on success, 1 on a
refusal (one line on stderr, ``ErrorType: message``, no traceback), 2 on a usage error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import anyio

from actors import RunnerNotFound
from stores import TetherError

from . import __version__
from ._commands import COMMANDS, Command
from ._store_url import DEFAULT_STORE, ENV_STORE, store_url

__all__ = ["build_parser", "main"]

#: Exit status of a refusal (a ``TetherError``) and of a usage error.
EXIT_REFUSED = 1
EXIT_USAGE = 2
#: Exit status after Ctrl-C (128 + SIGINT), as shells report it.
EXIT_INTERRUPTED = 130

_STORE_HELP = f"the store's URL (default: ${ENV_STORE}, else {DEFAULT_STORE})"


def build_parser() -> argparse.ArgumentParser:
    """The parser: global options, then one subparser per command of :data:`~tether._commands.COMMANDS`."""
    parser = argparse.ArgumentParser(prog="tether", description="Durable AI-agent runs as supervised actors.")
    parser.add_argument("--version", action="version", version=f"tether {__version__}")
    parser.add_argument("--store", metavar="URL", default=None, help=_STORE_HELP)
    # The same option after the command; SUPPRESS keeps a value given before it when it is absent.
    after = argparse.ArgumentParser(add_help=False)
    after.add_argument("--store", metavar="URL", default=argparse.SUPPRESS, help=_STORE_HELP)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        sub = commands.add_parser(command.name, help=command.help, description=command.help, parents=[after])
        command.add_arguments(sub)
        sub.set_defaults(run_command=command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; the exit status (0 success, 1 refusal, 2 usage error)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:  # argparse: --help and --version (0), a usage error (2)
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
    args.store = store_url(args.store)
    command: Command = args.run_command
    try:
        return anyio.run(command.run, args)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except (TetherError, BaseExceptionGroup) as error:
        refusal = _refusal(error)
        if refusal is None:
            raise
        hint = " (on the command line: --runner MODULE:ATTR)" if isinstance(refusal, RunnerNotFound) else ""
        print(f"{type(refusal).__name__}: {refusal}{hint}", file=sys.stderr)
        return EXIT_REFUSED


def _refusal(error: BaseException) -> TetherError | None:
    """The refusal ``error`` is, or the first one of a group made only of refusals."""
    if isinstance(error, TetherError):
        return error
    if isinstance(error, BaseExceptionGroup):
        found = [_refusal(inner) for inner in error.exceptions]
        if found and all(f is not None for f in found):
            return found[0]
    return None
