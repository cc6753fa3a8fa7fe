"""``tether runs [--status S] [--runner NAME] [--queue Q] [--limit N] [--json]``: how the store's runs stand.

The ``VERSION`` column is the runner version each run was recorded under (``-``: unversioned): a
queued or orphaned run that stays so waits for a worker with that version (``docs/versions.md``).
"""

from __future__ import annotations

import argparse

from actors import RunSummary

from .._timeline import when
from ._command import Command
from ._common import RUN_STATUSES, add_json, emit_json, opened_system, positive, print_table

__all__ = ["COMMAND", "summary_detail"]


def summary_detail(summary: RunSummary) -> str:
    """What a listing says after a run's status: its output, error or what it waits for."""
    if summary.pending is not None:
        return f"waiting for {summary.pending.reason}"
    if summary.status == "approved":
        return "waiting for a worker (tether worker --runner MODULE:ATTR finishes it)"
    if summary.status == "waiting":
        return "resting until " + (summary.wake_at.isoformat() if summary.wake_at else "its signal comes")
    return summary.output or summary.error or ""


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--status", choices=RUN_STATUSES, help="only runs of this status")
    parser.add_argument("--runner", metavar="NAME", help="only runs of the runner of this name")
    parser.add_argument("--queue", metavar="Q", help="only runs enqueued in this queue")
    parser.add_argument(
        "--limit", type=positive, default=100, metavar="N", help="at most N runs (default 100)"
    )
    add_json(parser)


async def _run(args: argparse.Namespace) -> int:
    async with opened_system(args.store) as system:
        found = await system.runs(status=args.status, runner=args.runner, limit=args.limit, queue=args.queue)
    if args.json:
        emit_json(found)
        return 0
    print_table(
        ["EXECUTION_ID", "STATUS", "RUNNER", "NODE", "ROWS", "VERSION", "UPDATED (UTC)", "DETAIL"],
        [
            [
                s.execution_id,
                s.status,
                s.runner,
                s.node_id,
                s.rows,
                s.version if s.version is not None else "-",
                when(s.updated_at),
                summary_detail(s),
            ]
            for s in found
        ],
        status_column=1,
    )
    return 0


COMMAND = Command(
    name="runs", help="list runs, newest first, with how each stands", run=_run, add_arguments=_arguments
)
