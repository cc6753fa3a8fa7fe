"""``tether pending [--limit N] [--json]``: the pauses waiting for a decision, newest first.

Read in pages of ``system.pending(limit=, after=)``, each page costing the same however many pauses wait.
"""

from __future__ import annotations

import argparse
from typing import Final

from stores import PendingInterrupt, encode_json

from .._timeline import when
from ._command import Command
from ._common import add_json, emit_json, opened_system, positive, print_table

__all__ = ["COMMAND"]

#: Pending rows read per page.
PAGE: Final = 200


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--limit", type=positive, default=None, metavar="N", help="at most N pauses")
    add_json(parser)


async def _run(args: argparse.Namespace) -> int:
    found: list[PendingInterrupt] = []
    async with opened_system(args.store) as system:
        after = None
        while args.limit is None or len(found) < args.limit:
            want = PAGE if args.limit is None else min(PAGE, args.limit - len(found))
            page = await system.pending(limit=want, after=after)
            found += page
            if len(page) < want:
                break
            after = page[-1]
    if args.json:
        emit_json(found)
        return 0
    print_table(
        ["EXECUTION_ID", "REASON", "AGENT PATH", "NODE", "SINCE (UTC)", "CONTEXT"],
        [
            [
                p.execution_id,
                p.reason,
                p.agent_path or "-",
                p.node_id,
                when(p.created_at),
                encode_json(p.context).decode(),
            ]
            for p in found
        ],
    )
    return 0


COMMAND = Command(
    name="pending", help="the pauses waiting for a decision", run=_run, add_arguments=_arguments
)
