"""``tether approve ID`` / ``tether reject ID`` ``[--meta k=v]... [--runner module:attr]``.

The decision claims the pause (exactly one claimer wins; a second one is refused with
``AlreadyResumed``). Given ``--runner``, this process then continues the run to its next pause or
its end and prints how it stands; without it the claim needs no runner and hands the run to the
fleet (``system.claim``): a worker's sweep, or ``tether resume ID --runner ...``, finishes it with
the decision.
"""

from __future__ import annotations

import argparse

from actors import Resume

from ._command import Command
from ._common import add_json, add_runner, emit_json, meta_pair, opened_system, print_result

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
    add_runner(parser, required=False, what="that continues the run here (else the fleet does)")
    add_json(parser)


def _decide(approved: bool) -> Command:
    verb = "approve" if approved else "reject"

    async def run(args: argparse.Namespace) -> int:
        decision = Resume(approved=approved, metadata=dict(args.meta))
        async with opened_system(args.store, args.runner, as_json=args.json) as system:
            if args.runner:
                result = await system.resume(args.execution_id, decision)
            else:
                pending = await system.claim(args.execution_id, decision)
                summary = await system.status(args.execution_id)
        if args.runner:  # printed after the block: with --json, stdout is stderr inside it
            print_result(result, args.json)
        elif args.json:
            emit_json({"claimed": pending, "summary": summary})
        else:
            print(
                f"{args.execution_id}: {verb}d ({pending.reason} at {pending.node_id}); "
                "handed to the fleet: a worker finishes the run"
            )
        return 0

    return Command(
        name=verb,
        help=f"{verb} a paused run (with --runner, continue it here; else the fleet finishes it)",
        run=run,
        add_arguments=_arguments,
    )


APPROVE = _decide(True)
REJECT = _decide(False)
