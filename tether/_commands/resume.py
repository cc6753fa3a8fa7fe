"""``tether resume ID --runner module:attr``: crash recovery of an orphaned run, in this process."""

from __future__ import annotations

import argparse

from ._command import Command
from ._common import add_json, add_runner, opened_system, print_result

__all__ = ["COMMAND"]


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("execution_id", metavar="ID", help="the run to recover")
    add_runner(parser, required=True, what="whose tools the run uses")
    add_json(parser)


async def _run(args: argparse.Namespace) -> int:
    async with opened_system(args.store, args.runner, as_json=args.json) as system:
        result = await system.resume(args.execution_id)
    print_result(result, args.json)
    return 0


COMMAND = Command(
    name="resume",
    help="recover a run from its newest row in this process (a crash or a stop mid-step)",
    run=_run,
    add_arguments=_arguments,
)
