"""``tether fork ID [--at CHECKPOINT_ID] [--input TEXT] --runner module:attr``: a new run from a row."""

from __future__ import annotations

import argparse

from ._command import Command
from ._common import add_json, add_runner, opened_system, print_result

__all__ = ["COMMAND"]


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("execution_id", metavar="ID", help="the run to fork")
    parser.add_argument(
        "--at", metavar="CHECKPOINT_ID", help="the row to start from (default: the newest step)"
    )
    parser.add_argument("--input", metavar="TEXT", help="appended as the next user message")
    add_runner(parser, required=True, what="of the run")
    add_json(parser)


async def _run(args: argparse.Namespace) -> int:
    async with opened_system(args.store, args.runner, as_json=args.json) as system:
        ref = await system.fork(args.execution_id, checkpoint_id=args.at, input=args.input)
        result = await ref.result()
    print_result(result, args.json)
    return 0


COMMAND = Command(
    name="fork",
    help="start a new run from a row of a run (the original is not touched)",
    run=_run,
    add_arguments=_arguments,
)
