"""``tether prune --older-than 7d [--json]``: delete old rows by the prune rule (never a pause)."""

from __future__ import annotations

import argparse
from datetime import timedelta

from .._progress import Progress
from ._command import Command
from ._common import add_json, duration, emit_json, opened_system

__all__ = ["COMMAND"]


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--older-than", metavar="AGE", type=duration, required=True, help="e.g. 30s, 15m, 12h, 7d, 2w"
    )
    add_json(parser)


def _age(age: timedelta) -> str:
    """``7d``, ``12h``, ``90s``: an age in the largest unit (up to days) that states it exactly."""
    seconds = age.total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


async def _run(args: argparse.Namespace) -> int:
    age = _age(args.older_than)
    async with opened_system(args.store) as system, Progress(f"pruning rows older than {age}"):
        deleted = await system.prune(args.older_than)
    if args.json:
        emit_json({"deleted": deleted})
    else:
        print(f"deleted {deleted} rows older than {age}")
    return 0


COMMAND = Command(
    name="prune",
    help="delete rows older than an age (finished runs whole; never a pause or a re-entry row)",
    run=_run,
    add_arguments=_arguments,
)
