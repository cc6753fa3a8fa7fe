"""What each row of a run holds, for a reader: the messages it adds, a tool's arguments and result,
the ``Resume`` of a claim, a pause's reason, a run's output or error.

A row stores the state of its level (the agent at its ``agent_path``, tool segment left out)
before its step, so the messages a row adds are those its level's conversation gained since that
level's previous row: the user's input on a level's first row, the model's text and tool calls on
the row after a model call, a tool's result on the row after the tool. A tool's row also shows the
result its tool call got, wherever the conversation recorded it. Shared by ``tether show`` and the
inspector's run page, so both say the same.
"""

from __future__ import annotations

from typing import Any

import msgspec

from stores import HITL_PAUSE, RESUME, RUN_END, TOOL_CALL, Checkpoint, conversation_of, parse_path

__all__ = ["RowContent", "row_contents"]

_MESSAGES = "messages"


class RowContent(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    """What one row holds for a reader (every field empty when the row holds nothing of it)."""

    messages: list[dict[str, Any]] = []
    arguments: dict[str, Any] | None = None
    result: str | None = None
    resume: dict[str, Any] | None = None
    reason: str | None = None
    output: str | None = None
    error: str | None = None

    @property
    def summary(self) -> str:
        """What the row holds, in a few words (``2 messages · arguments · result``)."""
        count = len(self.messages)
        parts = [f"{count} message{'' if count == 1 else 's'}"] if count else []
        for name, value in (("arguments", self.arguments), ("result", self.result), ("resume", self.resume)):
            if value is not None:
                parts.append(name)
        parts += [
            name
            for name, value in (("paused", self.reason), ("output", self.output), ("error", self.error))
            if value
        ]
        return " · ".join(parts)

    @property
    def empty(self) -> bool:
        """Whether the row holds nothing to show."""
        return self == _NOTHING


_NOTHING = RowContent()


def _level(agent_path: str | None) -> str:
    """The level a row belongs to: its ``agent_path`` without a trailing ``tool:`` segment."""
    if not agent_path:
        return ""
    try:
        parse_path(agent_path)
    except ValueError:
        return agent_path
    return conversation_of(agent_path)


def _results(rows: list[Checkpoint]) -> dict[str, str]:
    """Every tool result the rows' conversations recorded, by tool call id."""
    found: dict[str, str] = {}
    for row in rows:
        for message in row.state_snapshot.get(_MESSAGES) or []:
            call_id = message.get("tool_call_id")
            if message.get("role") == "tool" and isinstance(call_id, str):
                found.setdefault(call_id, str(message.get("content", "")))
    return found


def _added(before: list[Any], after: list[Any]) -> list[dict[str, Any]]:
    """The messages ``after`` has past the prefix it shares with ``before``."""
    common = 0
    while common < min(len(before), len(after)) and before[common] == after[common]:
        common += 1
    return [m for m in after[common:] if isinstance(m, dict) and m.get("role") != "system"]


def row_contents(rows: list[Checkpoint]) -> dict[int, RowContent]:
    """Each row's content by ``seq`` (rows in ``seq`` order, as ``history`` gives them)."""
    results = _results(rows)
    seen: dict[str, list[Any]] = {}
    out: dict[int, RowContent] = {}
    for row in rows:
        snapshot = row.state_snapshot
        fields: dict[str, Any] = {}
        messages = snapshot.get(_MESSAGES)
        if isinstance(messages, list):
            level = _level(row.agent_path)
            fields["messages"] = _added(seen.get(level, []), messages)
            seen[level] = messages
        if row.step_type in (TOOL_CALL, HITL_PAUSE) and isinstance(row.node_input, dict):
            fields["arguments"] = row.node_input
            call_id = snapshot.get("tool_call_id")
            if row.step_type == TOOL_CALL and isinstance(call_id, str) and call_id in results:
                fields["result"] = results[call_id]
        if row.step_type == HITL_PAUSE:
            fields["reason"] = row.interrupt_reason
        if row.step_type == RESUME and isinstance(row.node_input.get("resume"), dict):
            fields["resume"] = row.node_input["resume"]
        if row.step_type == RUN_END:
            output, error = snapshot.get("output"), snapshot.get("run_error") or snapshot.get("run_reason")
            fields["output"] = output if isinstance(output, str) else None
            fields["error"] = str(error) if error is not None else None
        out[row.seq] = RowContent(**fields)
    return out
