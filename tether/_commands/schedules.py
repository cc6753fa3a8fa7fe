"""``tether schedules [--json]``: the schedules in the store, with their next tick and last run."""

from __future__ import annotations

import argparse

from .._timeline import when
from ._command import Command
from ._common import add_json, emit_json, opened_system, print_table

__all__ = ["COMMAND"]


def _arguments(parser: argparse.ArgumentParser) -> None:
    add_json(parser)


async def _run(args: argparse.Namespace) -> int:
    async with opened_system(args.store) as system:
        found = await system.schedules()
    if args.json:
        emit_json(found)
        return 0
    print_table(
        ["NAME", "RUNNER", "WHEN", "NEXT (UTC)", "LAST RUN", "INPUT"],
        [
            [
                s.name,
                s.runner,
                s.cron if s.cron is not None else f"every {s.every}",
                when(s.next_at),
                s.last_run or "-",
                s.input,
            ]
            for s in found
        ],
    )
    return 0


COMMAND = Command(name="schedules", help="the schedules in the store", run=_run, add_arguments=_arguments)
