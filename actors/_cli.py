"""The ``tether`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import anyio

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tether`` console script."""
    parser = argparse.ArgumentParser(prog="tether", description="Durable AI-agent runs as supervised actors.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="run the main example on the embedded SQLite store")
    demo.add_argument("--db", default="tether.db", help="SQLite file to use (default: tether.db)")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from ._demo import run_demo

        anyio.run(run_demo, args.db)
        return 0
    parser.error(f"unknown command {args.command!r}")
    return 2  # pragma: no cover - parser.error exits


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
