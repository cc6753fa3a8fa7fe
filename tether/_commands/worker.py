"""``tether worker --runner module:attr [--concurrency N] [--poll SECONDS] [--queue SPEC ...]``: a
process of the fleet.

It serves the store (``system.serve``): it takes queued runs, runs whose owner died and claimed
pauses, at most ``--concurrency`` at once, until it is interrupted (Ctrl-C or SIGTERM); runs it was
driving then stay recoverable, and another worker takes them over. Each ``--queue
NAME:concurrency=3,per_key=1,rate=10/60s`` gives the fleet that queue's limits (fleet-wide).
"""

from __future__ import annotations

import argparse
import signal

import anyio

from stores import Queue, parse_queue

from ._command import Command
from ._common import add_runner, opened_system, positive

__all__ = ["COMMAND"]


def _seconds(text: str) -> float:
    """A positive number of seconds (an argparse ``type``)."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def _queue(text: str) -> Queue:
    """A queue's limits, ``NAME:concurrency=3,per_key=1,rate=10/60s`` (an argparse ``type``)."""
    try:
        return parse_queue(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _arguments(parser: argparse.ArgumentParser) -> None:
    add_runner(parser, required=True, what="whose runs this worker drives")
    parser.add_argument("--concurrency", type=positive, default=16, help="runs at once (default 16)")
    parser.add_argument(
        "--poll", type=_seconds, default=1.0, help="seconds between looks for work (default 1.0)"
    )
    parser.add_argument(
        "--queue",
        type=_queue,
        action="append",
        default=[],
        metavar="NAME:LIMITS",
        help="a queue's fleet-wide limits, e.g. llm:concurrency=3,per_key=1,rate=10/60s (repeatable)",
    )


async def _run(args: argparse.Namespace) -> int:
    names = ", ".join(runner.name for runner in args.runner)
    async with opened_system(args.store, args.runner, create=True) as system:
        print(f"worker serving {names} (concurrency {args.concurrency}); Ctrl-C stops it", flush=True)
        async with anyio.create_task_group() as tg:

            async def stop_on_signal() -> None:
                with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    async for _ in signals:
                        tg.cancel_scope.cancel()
                        return

            tg.start_soon(stop_on_signal)
            await system.serve(concurrency=args.concurrency, poll=args.poll, queues=args.queue)
    return 0


COMMAND = Command(
    name="worker",
    help="serve the store as a worker of the fleet: take queued and orphaned runs and drive them",
    run=_run,
    add_arguments=_arguments,
)
