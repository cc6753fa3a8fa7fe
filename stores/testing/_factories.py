"""Rows, pending rows and messages the conformance suite writes (also handy in a store's own tests)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import msgspec

from .._model import (
    COMPLETED,
    HITL_PAUSE,
    INTERRUPTED,
    LLM_CALL,
    REENTRY_SEQ,
    RESUME,
    RESUME_KEY,
    RUN_END,
    TOOL_CALL,
    WAIT,
    Checkpoint,
    PendingInterrupt,
)
from .._paths import tool_node, turn_node
from .._signals import WAIT_DEADLINE, WAIT_K, WAIT_NAME, WAIT_STEP

__all__ = [
    "BAD_IDS",
    "BAD_VALUES",
    "Pair",
    "Point",
    "make_message",
    "make_pending",
    "make_row",
    "pause_row",
    "resume_row",
    "run_end_row",
    "tool_row",
    "wait_row",
]


def make_message(i: int, role: str = "user", size: int = 40) -> dict[str, Any]:
    """A chat message numbered ``i`` with about ``size`` bytes of content."""
    text = f"message {i} " + "x" * max(0, size - 12)
    return {"role": role, "content": text, "tool_calls": [], "tool_call_id": None, "name": None}


def make_row(
    execution_id: str,
    seq: int,
    node_id: str | None = None,
    *,
    step_type: str = LLM_CALL,
    status: str = COMPLETED,
    messages: Sequence[Any] | None = None,
    agent_path: str | None = "agent:a",
    step_index: int | None = None,
    created_at: datetime | None = None,
    **fields: Any,
) -> Checkpoint:
    """A row of the run ``execution_id`` at ``seq``; ``messages`` go into ``state_snapshot``."""
    turn = seq if step_index is None else step_index
    snapshot: dict[str, Any] = dict(fields.pop("state_snapshot", {"turn": turn}))
    if messages is not None:
        snapshot["messages"] = list(messages)
    extra: dict[str, Any] = {}
    if created_at is not None:
        extra["created_at"] = created_at
    return Checkpoint(
        execution_id=execution_id,
        seq=seq,
        runner="conformance",
        node_id=node_id if node_id is not None else turn_node(turn),
        step_index=turn,
        step_type=step_type,
        status=status,
        state_snapshot=snapshot,
        agent_path=agent_path,
        **extra,
        **fields,
    )


def run_end_row(
    execution_id: str, seq: int, status: str = COMPLETED, reason: str | None = None
) -> Checkpoint:
    """The ``run_end`` marker of a run (``failed`` with ``reason="cancelled"`` is a cancel)."""
    snapshot: dict[str, Any] = {"run_status": status}
    if reason is not None:
        snapshot["run_reason"] = reason
    return make_row(execution_id, seq, "run_end", step_type=RUN_END, status=status, state_snapshot=snapshot)


def resume_row(
    execution_id: str, seq: int, pause: Checkpoint, *, approved: bool = True, by: str = "alice"
) -> Checkpoint:
    """The ``resume`` row that claims the pause ``pause``, carrying the decision."""
    return make_row(
        execution_id,
        seq,
        pause.node_id,
        step_type=RESUME,
        step_index=pause.step_index,
        agent_path=pause.agent_path,
        node_input={REENTRY_SEQ: pause.seq, RESUME_KEY: {"approved": approved, "metadata": {"by": by}}},
    )


def make_pending(
    execution_id: str,
    pause: Checkpoint | None = None,
    *,
    context: dict[str, Any] | None = None,
    created_at: datetime | None = None,
) -> PendingInterrupt:
    """The pending row that goes with the ``hitl_pause`` row ``pause``."""
    extra: dict[str, Any] = {}
    if created_at is not None:
        extra["created_at"] = created_at
    return PendingInterrupt(
        execution_id=execution_id,
        reason=pause.interrupt_reason or "approve" if pause is not None else "approve",
        context=context if context is not None else {"amount": 120, "items": ["a", "b"]},
        node_id=pause.node_id if pause is not None else "turn:0/tool:refund",
        agent_path=pause.agent_path if pause is not None else "agent:a/tool:refund",
        **extra,
    )


def pause_row(
    execution_id: str, seq: int, turn: int = 0, messages: Sequence[Any] | None = None
) -> Checkpoint:
    return make_row(
        execution_id,
        seq,
        tool_node(turn, "refund"),
        step_type=HITL_PAUSE,
        status=INTERRUPTED,
        step_index=turn,
        agent_path="agent:a/tool:refund",
        messages=messages,
        node_input={"amount": 120},
        interrupt_reason="approve",
        interrupt_context={"amount": 120, "items": ["a", "b"]},
    )


def tool_row(execution_id: str, seq: int, turn: int = 0) -> Checkpoint:
    return make_row(
        execution_id,
        seq,
        tool_node(turn, "refund"),
        step_type=TOOL_CALL,
        step_index=turn,
        agent_path="agent:a/tool:refund",
        node_input={"amount": 120},
    )


def wait_row(
    execution_id: str, seq: int, name: str | None, deadline: datetime | None = None, step: int = 1
) -> Checkpoint:
    """A tool's ``wait`` row: for the signal ``name`` (``None``: a sleep) until ``deadline``, the
    first wait of the step at ``step``."""
    return make_row(
        execution_id,
        seq,
        "turn:0/tool:refund",
        step_type=WAIT,
        status=INTERRUPTED,
        step_index=0,
        agent_path="agent:a/tool:refund",
        interrupt_reason="sleep" if name is None else f"signal:{name}",
        interrupt_context={
            WAIT_NAME: name,
            WAIT_K: 0,
            WAIT_STEP: step,
            WAIT_DEADLINE: None if deadline is None else deadline.isoformat(),
        },
    )


@dataclasses.dataclass
class Point:
    x: int
    y: tuple[int, ...]


class Pair(msgspec.Struct):
    left: int
    right: list[int]


def bad_values() -> list[tuple[str, Any, str]]:
    """(label, value, path inside the value) for every kind the JSON rule refuses."""
    return [
        ("nan", math.nan, ""),
        ("inf", math.inf, ""),
        ("-inf", -math.inf, ""),
        ("bytes", b"\x01\x02", ""),
        ("set", {1, 2}, ""),
        ("datetime", datetime(2024, 1, 1, tzinfo=UTC), ""),
        ("int-key", {1: "a"}, ""),
        ("nul", "a\x00b", ""),
        ("int-over-64-bits", 2**64, ""),
        ("int-under-64-bits", -(2**63) - 1, ""),
        ("object", object(), ""),
        ("nested", {"deep": [1, {"z": math.nan}]}, ".deep[1].z"),
        ("lone-surrogate", "a\ud800b", ""),
        ("surrogate-key", {"k\udc00": 1}, ""),
        # 300 lists deep; the value sits one level under its row field, so the refusal names the
        # first list past MAX_JSON_DEPTH (256): 255 steps into it.
        ("too-deep", _nested(300), "[0]" * 255),
    ]


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


BAD_VALUES = bad_values()
BAD_IDS = [label for label, _, _ in BAD_VALUES]
