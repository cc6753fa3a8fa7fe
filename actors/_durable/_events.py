"""A run's durable events, read from its rows: :class:`RowEvents` turns rows (in ``seq`` order)
into :mod:`actors.events`, writing nothing.

Each row gives one event by its ``step_type`` (``llm_call``/``tool_call``/``fork_origin``:
:class:`StepStarted`; ``hitl_pause``: :class:`Paused`; ``resume``: :class:`Resumed`; ``recover``:
:class:`Recovered`; ``handoff``: :class:`Handoff`; ``run_end``: :class:`RunEnded`), preceded by a
:class:`ToolFinished` for each open tool call whose result message the row's conversation now
ends with. So the deriver keeps the tool calls that have a row and no result yet; a reader that
starts at a later ``seq`` feeds it the earlier rows first (:meth:`RowEvents.seed`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from stores import (
    COMPLETED,
    HANDOFF,
    HITL_PAUSE,
    RECOVER,
    REENTRY_SEQ,
    RESUME,
    RESUME_KEY,
    RUN_END,
    SIGNAL,
    TOOL_CALL,
    WAIT,
    WAIT_NAME,
    WAKE,
    WAKE_AT,
    Checkpoint,
    PendingInterrupt,
)

from ..events import (
    DurableEvent,
    Handoff,
    Paused,
    Recovered,
    Resumed,
    RunEnded,
    SignalConsumed,
    StepStarted,
    ToolFinished,
    Waiting,
    Woken,
)
from ._tools import is_tool_error

__all__ = ["ATTEMPT_KEY", "RowEvents", "attempt_of", "is_resting"]

#: ``node_input`` key of a re-issued model call's row: how many times the call has been issued.
ATTEMPT_KEY = "attempt"


class _OpenCall(msgspec.Struct, frozen=True):
    seq: int
    node_id: str
    agent_path: str | None
    tool: str


def attempt_of(row: Checkpoint) -> int:
    """The attempt of a model call's row: 1, or what a re-issue recorded."""
    attempt = row.node_input.get(ATTEMPT_KEY, 1)
    return attempt if type(attempt) is int and attempt > 0 else 1


def is_resting(event: DurableEvent) -> bool:
    """Whether ``event`` is a resting row's: a pause, a wait, or the run's end."""
    return isinstance(event, Paused | Waiting | RunEnded)


class RowEvents:
    """The event deriver of one run (one per reader)."""

    __slots__ = ("_open",)

    def __init__(self) -> None:
        self._open: dict[str, _OpenCall] = {}

    def seed(self, row: Checkpoint) -> None:
        """Take in a row before the reader's start: its events are not wanted, its state is."""
        self.events(row)

    def events(self, row: Checkpoint) -> list[DurableEvent]:
        """The events of ``row``, the next row of the run."""
        found: list[DurableEvent] = self._finished(row) if self._open else []
        found.append(self._event(row))
        if row.step_type == TOOL_CALL:
            call_id = row.state_snapshot.get("tool_call_id")
            tool = row.state_snapshot.get("tool_name")
            if isinstance(call_id, str):
                name = tool if isinstance(tool, str) else row.node_id
                self._open[call_id] = _OpenCall(row.seq, row.node_id, row.agent_path, name)
        return found

    def _finished(self, row: Checkpoint) -> list[DurableEvent]:
        """ToolFinished for each open call answered by the tool messages that end the row's conversation."""
        messages = row.state_snapshot.get("messages")
        if not isinstance(messages, list):
            return []
        tail: list[dict[str, Any]] = []
        for message in reversed(messages):
            if not isinstance(message, dict) or message.get("role") != "tool":
                break
            tail.append(message)
        found: list[DurableEvent] = []
        for message in reversed(tail):
            call = self._open.pop(str(message.get("tool_call_id")), None)
            if call is None:
                continue
            content = message.get("content")
            text = content if isinstance(content, str) else ""
            ok = not is_tool_error(call.tool, text)
            found.append(
                ToolFinished(
                    execution_id=row.execution_id,
                    agent_path=call.agent_path,
                    seq=row.seq,
                    node_id=call.node_id,
                    created_at=row.created_at,
                    tool=call.tool,
                    tool_seq=call.seq,
                    ok=ok,
                    output=text if ok else None,
                    error=None if ok else text,
                )
            )
        return found

    def _event(self, row: Checkpoint) -> DurableEvent:
        common: dict[str, Any] = {
            "execution_id": row.execution_id,
            "agent_path": row.agent_path,
            "seq": row.seq,
            "node_id": row.node_id,
            "created_at": row.created_at,
        }
        snapshot, given = row.state_snapshot, row.node_input
        step = row.step_type
        if step == HITL_PAUSE:
            pending = PendingInterrupt(
                execution_id=row.execution_id,
                reason=row.interrupt_reason or "",
                context=row.interrupt_context,
                node_id=row.node_id,
                agent_path=row.agent_path,
                created_at=row.created_at,
            )
            return Paused(**common, pending=pending)
        if step == RESUME:
            decision = given.get(RESUME_KEY)
            return Resumed(
                **common,
                resume=decision if isinstance(decision, dict) else {},
                reentry_seq=_int_or_none(given.get(REENTRY_SEQ)),
            )
        if step == RECOVER:
            return Recovered(**common, reentry_seq=_int_or_none(given.get(REENTRY_SEQ)))
        if step == WAIT:
            found = snapshot.get(WAKE_AT)
            return Waiting(
                **common,
                name=_str_or_none(row.interrupt_context.get(WAIT_NAME)),
                wake_at=datetime.fromisoformat(found) if isinstance(found, str) else None,
            )
        if step == WAKE:
            return Woken(
                **common, name=_str_or_none(given.get(WAIT_NAME)), timed_out=given.get("timed_out") is True
            )
        if step == SIGNAL:
            return SignalConsumed(**common, name=str(given.get(WAIT_NAME)), payload=given.get("payload"))
        if step == HANDOFF:
            return Handoff(
                **common,
                source=_str_or_none(given.get("from")),
                target=_str_or_none(given.get("to")),
                reason=_str_or_none(given.get("reason")),
            )
        if step == RUN_END:
            if row.status == COMPLETED:
                return RunEnded(**common, status="completed", output=_str_or_none(snapshot.get("output")))
            return RunEnded(**common, status="failed", error=_str_or_none(snapshot.get("run_error")))
        tool = snapshot.get("tool_name") if row.step_type == TOOL_CALL else None
        return StepStarted(
            **common,
            step_type=row.step_type,
            step_index=row.step_index,
            attempt=attempt_of(row),
            tool=tool if isinstance(tool, str) else None,
            arguments=dict(given) if row.step_type == TOOL_CALL else None,
        )


def _int_or_none(value: object) -> int | None:
    return value if type(value) is int else None


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None
