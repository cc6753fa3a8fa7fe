"""``tether signal ID NAME [--payload JSON]``: send a signal into a run, from the shell.

A signal needs no runner and no ownership: it is committed to the run's inbox and the command
returns. ``"message"`` with a string payload steers the conversation at its next model turn; a
tool's ``wait_signal(NAME)`` takes the others (a worker, or the run's own process, wakes a run
waiting for it). A finished run refuses it (``AlreadyResumed``), an unknown one (``RunNotFound``).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ._command import Command
from ._common import add_json, emit_json, opened_system

__all__ = ["COMMAND"]


def _payload(text: str) -> Any:
    """The ``--payload`` JSON (an argparse ``type``)."""
    try:
        return json.loads(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"--payload is not JSON: {error}") from None


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("execution_id", metavar="ID", help="the run to signal")
    parser.add_argument("name", metavar="NAME", help='the signal\'s name ("message" steers the conversation)')
    parser.add_argument("--payload", type=_payload, default=None, metavar="JSON", help="its payload (JSON)")
    add_json(parser)


async def _run(args: argparse.Namespace) -> int:
    async with opened_system(args.store, as_json=args.json) as system:
        await system.signal(args.execution_id, args.name, args.payload)
    if args.json:
        emit_json({"execution_id": args.execution_id, "name": args.name, "sent": True})
    else:
        print(f"signal {args.name!r} sent to {args.execution_id}")
    return 0


COMMAND = Command(
    name="signal",
    help='send a signal into a run (needs no runner); "message" steers its next model turn',
    run=_run,
    add_arguments=_arguments,
)
