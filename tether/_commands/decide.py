"""``tether approve ID`` / ``tether reject ID`` ``[--meta k=v]... [--runner module:attr]``.

The decision claims the pause (exactly one claimer wins; a second one is refused with
``AlreadyResumed``). Given ``--runner``, this process then continues the run to its next pause or
its end and prints how it stands.
"""

from __future__ import annotations

import argparse

from actors import Resume

from ._command import Command
from ._common import add_json, add_runner, meta_pair, opened_system, print_result

__all__ = ["APPROVE", "REJECT"]


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("execution_id", metavar="ID", help="the paused run")
    parser.add_argument(
        "--meta",
        metavar="KEY=VALUE",
        type=meta_pair,
        action="append",
        default=[],
        help="metadata handed to the paused tool with the decision; repeat for several",
    )
    add_runner(parser, required=False, what="that continues the run here")
    add_json(parser)


def _decide(approved: bool) -> Command:
    async def run(args: argparse.Namespace) -> int:
        decision = Resume(approved=approved, metadata=dict(args.meta))
        async with opened_system(args.store, args.runner, as_json=args.json) as system:
            result = await system.resume(args.execution_id, decision)
        print_result(result, args.json)
        return 0

    verb = "approve" if approved else "reject"
    return Command(
        name=verb,
        help=f"{verb} a paused run (with --runner, continue it here)",
        run=run,
        add_arguments=_arguments,
    )


APPROVE = _decide(True)
REJECT = _decide(False)
