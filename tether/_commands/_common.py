"""What several commands share: ``--json``, ``--runner module:attr``, ``--meta k=v``, durations,
tables, and the system a command opens on its store."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import re
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any, TypeAlias, get_args, get_type_hints

import msgspec

from actors import ActorSystem, Agent, RunResult, RunSummary, Supervisor, Swarm

from .._store_url import opened_store

#: What ``--runner`` names (or what a function it names returns): a runner of ``actors``.
Runner: TypeAlias = Agent | Swarm | Supervisor

__all__ = [
    "RUN_STATUSES",
    "Runner",
    "add_json",
    "add_runner",
    "colours",
    "duration",
    "emit_json",
    "meta_pair",
    "opened_system",
    "positive",
    "print_result",
    "print_table",
    "runner_spec",
]

#: Every status a run can have (``RunSummary.status``; not a row's: ``stores.STATUSES``).
RUN_STATUSES: tuple[str, ...] = get_args(get_type_hints(RunSummary)["status"])

#: ANSI colours of statuses on a terminal (green, red, yellow, blue, magenta, cyan).
_COLOURS = {
    "completed": "32",
    "failed": "31",
    "paused": "33",
    "interrupted": "33",
    "running": "34",
    "orphaned": "35",
    "approved": "36",
    "queued": "36",
}

_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def add_json(parser: argparse.ArgumentParser) -> None:
    """``--json``: print one JSON document instead of a table."""
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def emit_json(value: Any) -> None:
    """Print ``value`` (Structs, lists, dicts, datetimes as ISO 8601) as one JSON document."""
    sys.stdout.write(msgspec.json.encode(value).decode() + "\n")


def runner_spec(spec: str) -> Runner:
    """The runner named by ``module:attr``: an ``Agent``, ``Swarm`` or ``Supervisor``, or a callable
    returning one, imported here with the current directory on the import path (as ``python -m``
    puts it there), so ``--runner my_app:agent`` finds ``my_app.py`` in the folder it is run from.

    An argparse ``type``: what cannot be imported, or is not a runner, is a usage error naming the spec.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise argparse.ArgumentTypeError(f"{spec!r} is not module:attr (e.g. my_app:agent)")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        found: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise argparse.ArgumentTypeError(f"cannot load {spec!r}: {exc}") from None
    named = found
    if not isinstance(found, Runner) and callable(found):
        try:
            found = found()
        except Exception:  # not a factory (a tool, a function taking arguments): said below
            found = None
    if not isinstance(found, Runner):
        what = (
            type(named).__name__
            if found is None or found is named
            else f"function returning {type(found).__name__}"
        )
        raise argparse.ArgumentTypeError(
            f"{spec!r} is a {what}, not a runner: name an Agent, a Swarm or a Supervisor, or a "
            "function returning one"
        )
    return found


def add_runner(parser: argparse.ArgumentParser, *, required: bool, what: str) -> None:
    """``--runner module:attr`` (repeatable): the runners this process can drive runs with."""
    parser.add_argument(
        "--runner",
        metavar="MODULE:ATTR",
        type=runner_spec,
        action="append",
        required=required,
        default=[],
        help=(
            f"the runner {what}: an Agent, Swarm or Supervisor, or a function returning one, "
            "imported from the current directory; repeat for several"
        ),
    )


def meta_pair(text: str) -> tuple[str, str]:
    """``k=v`` of ``--meta`` (an argparse ``type``)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not key=value")
    return key, value


def positive(text: str) -> int:
    """A whole number of at least 1 (an argparse ``type``)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return value


def duration(text: str) -> timedelta:
    """``30s``, ``15m``, ``12h``, ``7d``, ``2w`` (an argparse ``type``)."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 30s, 15m, 12h, 7d or 2w")
    return timedelta(**{_UNITS[match[2]]: float(match[1])})


@asynccontextmanager
async def opened_system(
    url: str, runners: Sequence[Runner] = (), *, as_json: bool = False, create: bool = False
) -> AsyncIterator[ActorSystem]:
    """An :class:`ActorSystem` on the store at ``url``, with ``runners`` (the ``--runner`` ones).

    A SQLite file that is not there is refused (``StoreUnavailable`` naming it, nothing created)
    unless ``create``: only a command that starts work on a new store makes one. With ``as_json``,
    what the runners' tools print goes to stderr while the block runs: stdout carries the one JSON
    document only.
    """
    quiet = contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext()
    with quiet:
        async with (
            opened_store(url, create=create) as store,
            ActorSystem(store, runners=runners) as system,
        ):
            yield system


def colours() -> bool:
    """Whether to colour statuses: stdout is a terminal and ``$NO_COLOR`` is not set."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def print_table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], *, status_column: int | None = None
) -> None:
    """Rows under headers, each column as wide as its widest cell (the last one left ragged); on a
    terminal the cells of ``status_column`` are coloured by status."""
    cells = [[str(c) for c in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(line[i]) for line in cells) for i in range(len(headers))]
    paint = colours() and status_column is not None
    for index, line in enumerate(cells):
        padded = [cell.ljust(width) for cell, width in zip(line[:-1], widths, strict=False)]
        padded.append(line[-1])
        if paint and index and status_column is not None:
            colour = _COLOURS.get(line[status_column])
            if colour is not None:
                padded[status_column] = f"\x1b[{colour}m{padded[status_column]}\x1b[0m"
        print("  ".join(padded).rstrip())


def print_result(result: RunResult, as_json: bool) -> None:
    """How a run stands after a command drove it."""
    if as_json:
        emit_json(result)
        return
    detail = result.output if result.status == "completed" else result.error
    if result.status == "paused" and result.pending is not None:
        detail = f"waiting for {result.pending.reason} at {result.pending.node_id}"
    print(f"{result.execution_id}: {result.status}" + (f" · {detail}" if detail else ""))
