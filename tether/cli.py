"""The ``tether`` command line (also ``python -m tether``).

``tether [--store URL] COMMAND [--store URL] ...``: the store comes from ``--store`` (before or after
the command), else ``$TETHER_STORE``, else ``sqlite:///tether.db``. Exit status 0 on success, 1 on a
refusal (one line on stderr, ``ErrorType: message``, no traceback; with ``--json`` also one JSON
document on stdout, ``{"error": ErrorType, "message": ...}``), 2 on a usage error. A reader that
stops reading (``tether runs | head -1``) ends the command quietly.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import anyio

from actors import ResumeRequired, RunnerNotFound
from stores import TetherError

from . import __version__
from ._commands import COMMANDS, Command
from ._commands._common import emit_json
from ._store_url import DEFAULT_STORE, ENV_STORE, store_url

__all__ = ["build_parser", "main"]

#: Exit status of a refusal (a ``TetherError``) and of a usage error.
EXIT_REFUSED = 1
EXIT_USAGE = 2
#: Exit status after Ctrl-C (128 + SIGINT), as shells report it.
EXIT_INTERRUPTED = 130
#: Exit status when stdout's reader went away (128 + SIGPIPE), as shells report it.
EXIT_PIPE_CLOSED = 141

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
        code = anyio.run(command.run, args)
        sys.stdout.flush()  # here, so a reader that went away is seen here, not at exit
        return code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except (BrokenPipeError, TetherError, BaseExceptionGroup) as error:
        if _only(error, BrokenPipeError):
            return _pipe_closed()
        refusal = _refusal(error)
        if refusal is None:
            raise
        message = _on_the_command_line(refusal)
        if getattr(args, "json", False):
            emit_json({"error": type(refusal).__name__, "message": message})
        print(f"{type(refusal).__name__}: {message}", file=sys.stderr)
        return EXIT_REFUSED


def _on_the_command_line(refusal: TetherError) -> str:
    """A refusal's message, with the command that fixes it where the library's names code."""
    if isinstance(refusal, ResumeRequired):
        eid = refusal.execution_id
        why = f" (reason: {refusal.reason!r})" if refusal.reason else ""
        return f"run {eid!r} is paused{why}; decide it: tether approve {eid} or tether reject {eid}"
    if isinstance(refusal, RunnerNotFound):
        return f"{refusal} (on the command line: --runner MODULE:ATTR)"
    return str(refusal)


def _only(error: BaseException, kind: type[BaseException]) -> bool:
    """Whether ``error`` is a ``kind``, or a group made only of them."""
    if isinstance(error, BaseExceptionGroup):
        return all(_only(inner, kind) for inner in error.exceptions)
    return isinstance(error, kind)


def _pipe_closed() -> int:
    """Stdout's reader went away: point stdout at /dev/null, so the flush at exit raises nothing."""
    try:
        fileno = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (captured): nothing is flushed to it
        return EXIT_PIPE_CLOSED
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fileno)
    os.close(devnull)
    return EXIT_PIPE_CLOSED


def _refusal(error: BaseException) -> TetherError | None:
    """The refusal ``error`` is, or the first one of a group made only of refusals."""
    if isinstance(error, TetherError):
        return error
    if isinstance(error, BaseExceptionGroup):
        found = [_refusal(inner) for inner in error.exceptions]
        if found and all(f is not None for f in found):
            return found[0]
    return None
