"""``tether cancel ID [--reason R]``: end a run now with a failed ``run_end`` (reason ``R``).

A cancel needs no runner: it writes the marker from any process, and the run's owner, if one is
driving it, stops its step in flight. A paused run's pending approval goes with it. The run then
stands ``failed``; ``tether resume ID --runner module:attr`` can take it up again from its last step.
"""

from __future__ import annotations

import argparse

from ._command import Command
from ._common import add_json, opened_system, print_result

__all__ = ["COMMAND"]


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("execution_id", metavar="ID", help="the run to cancel")
    parser.add_argument("--reason", default="cancelled", help="recorded in the marker (default: cancelled)")
    # Accepted for scripts written when a cancel needed it; a cancel needs no runner.
    parser.add_argument("--runner", metavar="MODULE:ATTR", help=argparse.SUPPRESS)
    add_json(parser)


async def _run(args: argparse.Namespace) -> int:
    async with opened_system(args.store, as_json=args.json) as system:
        result = await system.cancel(args.execution_id, reason=args.reason)
    print_result(result, args.json)
    return 0


COMMAND = Command(
    name="cancel",
    help=(
        "end a run now: it stands failed (reason R) and a pending approval goes; needs no runner "
        "(tether resume ID --runner ... can take it up again)"
    ),
    run=_run,
    add_arguments=_arguments,
)
