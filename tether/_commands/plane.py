"""``tether plane serve``: the reference replication plane (optional extra ``plane``)."""

from __future__ import annotations

import argparse
import os
import sys

from ._command import Command

__all__ = ["COMMAND", "ENV_KEYS"]

#: Comma-separated ``KEY=TENANT`` pairs, added to the ``--api-key`` flags.
ENV_KEYS = "TETHER_PLANE_KEYS"
_USAGE = 2


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["serve"], help="serve: run the plane until interrupted")
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8787, help="the port to listen on (default 8787)")
    parser.add_argument(
        "--api-key",
        action="append",
        default=[],
        metavar="KEY[=TENANT]",
        help=f"a key the plane accepts, and its tenant (repeat for several; also ${ENV_KEYS})",
    )


async def _run(args: argparse.Namespace) -> int:
    from replication.plane import parse_keys, serve  # needs the optional extra ``plane`` to serve

    try:
        keys = parse_keys([*args.api_key, *os.environ.get(ENV_KEYS, "").split(",")])
    except ValueError as exc:
        print(f"tether plane: {exc}", file=sys.stderr)
        return _USAGE
    if not keys:
        print(f"tether plane: give at least one --api-key KEY[=TENANT] (or ${ENV_KEYS})", file=sys.stderr)
        return _USAGE
    await serve(args.store, keys, host=args.host, port=args.port)
    return 0


COMMAND = Command(
    name="plane",
    help="serve the reference replication plane, each tenant in its own store under --store",
    run=_run,
    add_arguments=_arguments,
)
