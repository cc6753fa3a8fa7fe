"""``tether diff ID SEQ_A SEQ_B [--json]``: how the run's state changed from one row to another."""

from __future__ import annotations

import argparse

import msgspec

from .._timeline import diff_rows, pick_rows
from ._command import Command
from ._common import add_json, emit_json, opened_system

__all__ = ["COMMAND"]

#: How much of a message's content or a value a line shows.
_WIDTH = 100


def _short(value: object) -> str:
    text = value if isinstance(value, str) else msgspec.json.encode(value).decode()
    return text if len(text) <= _WIDTH else text[: _WIDTH - 1] + "…"


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("execution_id", metavar="ID", help="the run")
    parser.add_argument("seq_a", metavar="SEQ_A", type=int, help="the row to compare from")
    parser.add_argument("seq_b", metavar="SEQ_B", type=int, help="the row to compare to")
    add_json(parser)


async def _run(args: argparse.Namespace) -> int:
    async with opened_system(args.store) as system:
        rows = await system.history(args.execution_id)
    diff = diff_rows(*pick_rows(rows, args.seq_a, args.seq_b))
    if args.json:
        emit_json(diff)
        return 0
    print(f"{diff.execution_id}: state at seq {diff.seq_a} -> seq {diff.seq_b}")
    print(f"messages: {diff.common} shared, {len(diff.added)} added, {len(diff.removed)} removed")
    for sign, messages in (("+", diff.added), ("-", diff.removed)):
        for message in messages:
            print(f"  {sign} {message.get('role', '?')}: {_short(message.get('content', ''))}")
            for call in message.get("tool_calls") or []:
                print(f"      calls {call.get('name')}({_short(call.get('arguments', {}))})")
    if not diff.keys:
        print("keys: none changed")
    for change in diff.keys:
        if change.change == "added":
            print(f"  + {change.key} = {_short(change.after)}")
        elif change.change == "removed":
            print(f"  - {change.key} (was {_short(change.before)})")
        else:
            print(f"  ~ {change.key}: {_short(change.before)} -> {_short(change.after)}")
    return 0


COMMAND = Command(
    name="diff",
    help="the state diff between two rows of a run: messages added, keys changed",
    run=_run,
    add_arguments=_arguments,
)
