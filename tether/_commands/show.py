"""``tether show ID [--json] [--follow]``: how the run stands, then its timeline (agent paths as a tree).

A run whose models reported token usage shows its total under its status, and a ``TOKENS`` column
with the tokens each row is the first to count (the replies of the model calls before it).

With ``--follow`` the command then follows the run live (``RunRef.events()``, from any process) and
prints a line per event until the run's next pause or its end (at once for a completed run); with
``--json --follow`` it prints NDJSON instead: every event of the run from its first row on, one per
line, then the live ones.
"""

from __future__ import annotations

import argparse
import sys

from actors import ActorSystem
from actors.events import (
    DurableEvent,
    Paused,
    Resumed,
    RunEnded,
    StepStarted,
    TextDelta,
    ToolFinished,
    encode_event,
)

from .._timeline import next_step, status_text, sync_states, timeline, usage_text, when
from ._command import Command
from ._common import add_json, emit_json, opened_system, print_table
from .runs import summary_detail

__all__ = ["COMMAND"]


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("execution_id", metavar="ID", help="the run")
    parser.add_argument(
        "--follow", action="store_true", help="then follow the run live, to its next pause or its end"
    )
    add_json(parser)


def _event_line(event: DurableEvent) -> str:
    """One followed event as a line: seq, what happened, where, and its outcome."""
    detail = ""
    match event:
        case StepStarted():
            detail = event.step_type
        case ToolFinished():
            detail = f"{event.tool} ok" if event.ok else f"{event.tool} error: {event.error}"
        case Paused():
            detail = f"waiting for {event.pending.reason}"
        case Resumed():
            detail = f"approved={event.resume.get('approved')}"
        case RunEnded():
            detail = f"{event.status} · {event.output if event.status == 'completed' else event.error}"
    kind = type(event).__name__
    return f"{event.seq:<4} {kind:<12} {event.node_id:<24} {detail}  [{event.agent_path or '-'}]"


async def _follow(system: ActorSystem, args: argparse.Namespace, since: int) -> int:
    """Print the run's events from ``since`` to its next resting row (a line each, or NDJSON);
    the seq of the last one printed (``since - 1`` when none was)."""
    last = since - 1
    async with system.ref(args.execution_id).events(since=since) as events:
        async for event in events:
            if isinstance(event, TextDelta):
                continue
            line = encode_event(event).decode() if args.json else _event_line(event)
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
            last = event.seq
    return last


async def _run(args: argparse.Namespace) -> int:
    async with opened_system(args.store) as system:
        summary = await system.status(args.execution_id)  # RunNotFound before anything is printed
        if args.follow and args.json:
            # Every event so far; a run resting at a pause or a failure is then followed into its
            # next leg, as the text form follows it from its next row.
            last = await _follow(system, args, since=0)
            if summary.status in ("paused", "failed"):
                await _follow(system, args, since=last + 1)
            return 0
        rows = await system.history(args.execution_id)
        assert system.store is not None
        lines = timeline(rows, await sync_states(system.store, rows))
        if args.json:
            emit_json({"summary": summary, "rows": lines})
            return 0
        detail = summary_detail(summary)
        standing = status_text(summary.status)
        version = f" version {summary.version}" if summary.version is not None else ""
        print(f"{summary.execution_id}  {standing}  runner {summary.runner}{version}  {summary.rows} rows")
        if detail and summary.status != "approved":
            print(f"  {detail}")
        if summary.usage:
            print(f"  usage: {usage_text(summary.usage)}")
        step = next_step(summary)
        if step is not None:
            print(f"  to go on, {step[0]}: {step[1]}")
        print()
        headers = ["SEQ", "NODE", "STEP", "STATUS", "TIME (UTC)", "SYNC", "AGENT PATH"]
        table = [[r.seq, r.node_id, r.step_type, r.status, when(r.created_at), r.sync, r.tree] for r in lines]
        if summary.usage:  # the tokens of the replies each row is the first to count
            headers.insert(-1, "TOKENS")
            for row, line in zip(table, lines, strict=True):
                row.insert(-1, line.tokens or "-")
        print_table(headers, table, status_column=3)
        if args.follow:
            sys.stdout.flush()
            await _follow(system, args, since=rows[-1].seq + 1)
    return 0


COMMAND = Command(
    name="show", help="a run's status and its timeline of rows", run=_run, add_arguments=_arguments
)
