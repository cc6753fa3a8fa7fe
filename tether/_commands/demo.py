"""``tether demo``: the refund example across two processes (see :mod:`tether._demo`)."""

from __future__ import annotations

import argparse

from .._demo import run_demo
from ._command import Command

__all__ = ["COMMAND"]


async def _run(args: argparse.Namespace) -> int:
    await run_demo(args.store)
    return 0


COMMAND = Command(
    name="demo",
    help="run the refund example: a small refund, and a large one paused in a child process and approved here",
    run=_run,
)
