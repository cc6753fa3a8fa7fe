"""``tether cancel ID [--reason R]``: end a run with a failed ``run_end`` (a pause's pending row goes)."""

from __future__ import annotations

import argparse

from ._command import Command
from ._common import add_json, add_runner, opened_system, print_result

__all__ = ["COMMAND"]


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("execution_id", metavar="ID", help="the run to cancel")
    parser.add_argument("--reason", default="cancelled", help="recorded in the marker (default: cancelled)")
    add_runner(parser, required=False, what="of the run")
    add_json(parser)


async def _run(args: argparse.Namespace) -> int:
    async with opened_system(args.store, args.runner, as_json=args.json) as system:
        result = await system.cancel(args.execution_id, reason=args.reason)
    print_result(result, args.json)
    return 0


COMMAND = Command(
    name="cancel", help="cancel a run (it can be resumed later)", run=_run, add_arguments=_arguments
)
