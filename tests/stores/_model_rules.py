"""The memory model's own reading of the rules, written from docs/durability.md, not from ``stores``.

The stateful test compares each backend with the model; a model that called the stores' own re-entry
walk, JSON rule or message-log planning could never disagree with them. So these are separate
implementations of the same documented rules: the JSON rule (with its paths), the new content a row
adds (for ``max_row_bytes``), and the re-entry walk (which rows a resume reads, and so which rows
prune keeps). Only the refusals' wording comes from ``stores.lowlevel`` (wording is not a rule).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import msgspec

from stores import MAX_JSON_DEPTH, Checkpoint, RowTooLarge, SerializationError
from stores.lowlevel import already_finished, no_step

__all__ = ["added_bytes", "json_copy", "stored_row", "text_field", "walk"]

_BOOKKEEPING = ("resume", "recover")
_TEXT = (
    "checkpoint_id",
    "execution_id",
    "runner",
    "node_id",
    "step_type",
    "status",
    "interrupt_reason",
    "agent_path",
    "parent_checkpoint_id",
)


def _key_path(path: str, key: str) -> str:
    return f"{path}.{key}" if key.isidentifier() else f"{path}[{key!r}]"


def text_field(value: object, path: str) -> None:
    """Refuse a text column that is not a str (or None) or holds a NUL or a lone surrogate."""
    if isinstance(value, str):
        _text(value, path, SerializationError)
    elif value is not None:
        raise SerializationError("not a str", path=path)


def _text(value: str, path: str, error: type[SerializationError]) -> None:
    if "\x00" in value:
        raise error("a NUL character", path=path)
    if any(0xD800 <= ord(c) <= 0xDFFF for c in value):
        raise error("a lone surrogate", path=path)


def json_copy(
    value: Any, path: str = "$", error: type[SerializationError] = SerializationError, depth: int = 0
) -> Any:
    """``value`` as the JSON rule stores it (tuples as lists, Structs and dataclasses as dicts), or
    ``error`` at the path of the first part it refuses."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        _text(value, path, error)
        return value
    if isinstance(value, int):
        if not -(2**63) <= value < 2**64:
            raise error("an integer wider than 64 bits", path=path)
        return int(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise error("a float that is not finite", path=path)
        return float(value)
    if isinstance(value, msgspec.Struct):
        return json_copy(msgspec.structs.asdict(value), path, error, depth)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return json_copy(
            {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}, path, error, depth
        )
    if isinstance(value, dict | list | tuple) and depth >= MAX_JSON_DEPTH:
        raise error("nesting deeper than the limit", path=path)
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise error("a key that is not a str", path=path)
            _text(key, path, error)
            out[key] = json_copy(item, _key_path(path, key), error, depth + 1)
        return out
    if isinstance(value, list | tuple):
        return [json_copy(item, f"{path}[{i}]", error, depth + 1) for i, item in enumerate(value)]
    raise error(f"a {type(value).__name__}", path=path)


def stored_row(row: Checkpoint) -> Checkpoint:
    """``row`` as a store keeps it (its JSON fields by the rule), or the refusal naming the field."""
    for name in _TEXT:
        text_field(getattr(row, name), f"$.{name}")
    snapshot = row.state_snapshot
    messages = snapshot.get("messages") if isinstance(snapshot, dict) else None
    if isinstance(messages, list | tuple):
        copied = [json_copy(m, f"$.state_snapshot.messages[{i}]") for i, m in enumerate(messages)]
        rest = json_copy({k: v for k, v in snapshot.items() if k != "messages"}, "$.state_snapshot")
        snapshot = {"messages": copied, **rest}
    else:
        snapshot = json_copy(snapshot, "$.state_snapshot")
    return msgspec.structs.replace(
        row,
        state_snapshot=snapshot,
        node_input=json_copy(row.node_input, "$.node_input"),
        node_output=json_copy(row.node_output, "$.node_output"),
        interrupt_context=json_copy(row.interrupt_context, "$.interrupt_context"),
    )


def added_bytes(row: Checkpoint, earlier: list[Checkpoint], limit: int) -> None:
    """Refuse with ``RowTooLarge`` a stored ``row`` whose new content (its fields, and the messages
    its conversation did not hold in its newest earlier row) is over ``limit`` bytes."""
    size = sum(len(msgspec.json.encode(v)) for v in (row.node_input, row.node_output, row.interrupt_context))
    snapshot = row.state_snapshot
    messages = snapshot.get("messages")
    size += len(msgspec.json.encode({k: v for k, v in snapshot.items() if k != "messages"}))
    if isinstance(messages, list):
        conversation = (row.agent_path or "").split("/tool:")[0]
        known: list[Any] = []
        for old in reversed(earlier):
            if (old.agent_path or "").split("/tool:")[0] == conversation and "messages" in old.state_snapshot:
                known = old.state_snapshot["messages"]
                break
        if messages[: len(known)] == known:
            start = len(known)  # it extends the conversation
        elif known[: len(messages)] == messages:
            start = len(messages)  # it re-reads a shorter prefix: nothing new
        else:
            start = 0  # a new conversation
        new = [msgspec.json.encode(m) for m in messages[start:]]
        if new:
            size += 2 + sum(len(b) for b in new) + len(new) - 1
    if size > limit:
        raise RowTooLarge(f"row {row.node_id!r} adds {size} bytes, over the limit of {limit}", path="$")


def walk(
    execution_id: str,
    rows: dict[int, Checkpoint],
    start: Checkpoint,
    *,
    refuse_finished: bool,
    read: set[int] | None = None,
) -> tuple[Checkpoint, dict[str, Any] | None, set[int]]:
    """``(step, decision, read)`` of the re-entry walk from ``start``: over ``run_end`` markers to the
    row below, through ``resume``/``recover`` rows to the row they name (a ``resume`` row's decision is
    the first one met), to the first step; ``read`` is every seq the walk looked at (filled in as it
    goes, so a walk that finds no step still says what it read)."""
    if refuse_finished and start.step_type == "run_end" and start.status == "completed":
        raise already_finished(execution_id)
    order = sorted(rows)
    decision = None
    read = read if read is not None else set()
    read.add(start.seq)
    current: Checkpoint | None = start
    while current is not None:
        read.add(current.seq)
        if current.step_type not in ("run_end", *_BOOKKEEPING):
            return current, decision, read
        target = current.node_input.get("reentry_seq") if current.step_type in _BOOKKEEPING else None
        # A recover row after a claimed pause carries the claimed decision as well (it names the
        # paused step itself, past the resume row).
        found = current.node_input.get("resume") if current.step_type in _BOOKKEEPING else None
        if decision is None and isinstance(found, dict):
            decision = found
        if type(target) is int and target < current.seq:
            current = rows.get(target)
        else:
            below = [s for s in order if s < current.seq]
            current = rows[below[-1]] if below else None
    raise no_step(execution_id)
