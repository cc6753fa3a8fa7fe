"""``tether inspect [--port N] [--token T] [--runner module:attr]``: the inspector on 127.0.0.1.

Needs the optional extra ``inspect`` (Starlette, Jinja2, uvicorn): ``pip install 'tether[inspect]'``.
"""

from __future__ import annotations

import argparse
import sys

from ._command import Command
from ._common import add_runner, positive

__all__ = ["COMMAND"]


def _port(text: str) -> int:
    if text == "0":
        return 0
    value = positive(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port")
    return value


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--port", type=_port, default=8765, help="the port on 127.0.0.1 (default 8765; 0: any)"
    )
    parser.add_argument("--token", metavar="T", help="require this token (the printed address carries it)")
    add_runner(parser, required=False, what="that Approve / Reject continue runs with")


async def _run(args: argparse.Namespace) -> int:
    try:
        from ..inspector import serve
    except ImportError as exc:
        print(
            f"tether inspect needs the extra 'inspect': pip install 'tether[inspect]' ({exc})",
            file=sys.stderr,
        )
        return 1
    await serve(
        args.store,
        port=args.port,
        runners=args.runner,
        token=args.token,
        ready=lambda line: print(line, flush=True),
    )
    return 0


COMMAND = Command(
    name="inspect",
    help="serve the inspector page on 127.0.0.1 (runs, timelines, diffs, approvals)",
    run=_run,
    add_arguments=_arguments,
)
