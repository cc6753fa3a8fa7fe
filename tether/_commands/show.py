"""``tether show ID [--json]``: how the run stands, then its timeline (agent paths as a tree)."""

from __future__ import annotations

import argparse

from .._timeline import sync_states, timeline, when
from ._command import Command
from ._common import add_json, emit_json, opened_system, print_table
from .runs import summary_detail

__all__ = ["COMMAND"]


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("execution_id", metavar="ID", help="the run")
    add_json(parser)


async def _run(args: argparse.Namespace) -> int:
    async with opened_system(args.store) as system:
        summary = await system.status(args.execution_id)
        rows = await system.history(args.execution_id)
        assert system.store is not None
        lines = timeline(rows, await sync_states(system.store, rows))
    if args.json:
        emit_json({"summary": summary, "rows": lines})
        return 0
    detail = summary_detail(summary)
    print(f"{summary.execution_id}  {summary.status}  runner {summary.runner}  {summary.rows} rows")
    if detail:
        print(f"  {detail}")
    print()
    print_table(
        ["SEQ", "NODE", "STEP", "STATUS", "TIME (UTC)", "SYNC", "AGENT PATH"],
        [[r.seq, r.node_id, r.step_type, r.status, when(r.created_at), r.sync, r.tree] for r in lines],
    )
    return 0


COMMAND = Command(
    name="show", help="a run's status and its timeline of rows", run=_run, add_arguments=_arguments
)
