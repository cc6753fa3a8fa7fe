"""``tether bench NAME [ARGS]``: run ``benchmarks/NAME.py`` of a source checkout (``--tiny`` etc. pass on).

The benchmark runs as ``python -m benchmarks.NAME ARGS`` from the checkout's root; its lines are
passed through while a progress line shows how long it has run. Exit 0 when it succeeded, 1 when
it failed (one line on stderr naming its exit status).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import anyio
import anyio.abc

from .._progress import Progress
from ._command import Command

__all__ = ["COMMAND"]

#: The source checkout holding ``benchmarks/`` (none in an installed wheel).
ROOT: Final = Path(__file__).resolve().parents[2]


def _benchmarks() -> list[str]:
    folder = ROOT / "benchmarks"
    return (
        sorted(p.stem for p in folder.glob("*.py") if not p.stem.startswith("_")) if folder.is_dir() else []
    )


def _benchmark(name: str) -> str:
    known = _benchmarks()
    if name not in known:
        where = f"one of {', '.join(known)}" if known else f"none: {ROOT} is not a source checkout"
        raise argparse.ArgumentTypeError(f"no benchmark {name!r} ({where})")
    return name


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", metavar="NAME", type=_benchmark, help=f"one of {', '.join(_benchmarks())}")
    parser.add_argument(
        "bench_args", metavar="ARGS", nargs=argparse.REMAINDER, help="the benchmark's options"
    )


async def _run(args: argparse.Namespace) -> int:
    command = [sys.executable, "-u", "-m", f"benchmarks.{args.name}", *args.bench_args]
    async with Progress(f"bench {args.name}") as progress:
        async with await anyio.open_process(command, cwd=ROOT, stderr=None) as proc:
            assert proc.stdout is not None
            async for line in _lines(proc.stdout):
                progress.echo(line)
            code = await proc.wait()
    if code != 0:
        print(f"bench: benchmarks.{args.name} exited with status {code}", file=sys.stderr)
        return 1
    return 0


async def _lines(stream: anyio.abc.ByteReceiveStream) -> AsyncIterator[str]:
    """The lines of a byte stream, decoded (the last one even without a newline)."""
    buffered = b""
    async for chunk in stream:
        buffered += chunk
        *complete, buffered = buffered.split(b"\n")
        for line in complete:
            yield line.decode(errors="replace")
    if buffered:
        yield buffered.decode(errors="replace")


COMMAND = Command(
    name="bench",
    help="run a benchmark of the source checkout (python -m benchmarks.NAME)",
    run=_run,
    add_arguments=_arguments,
)
