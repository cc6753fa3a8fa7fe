"""The row plan (stores._codec): its one-check fast path stores the bytes the value-by-value path does."""

from __future__ import annotations

from typing import Any

import pytest

from stores import Checkpoint, SerializationError, decode_json
from stores.lowlevel import MessageLogs, encode_one_by_one


def _row(seq: int, messages: Any, **fields: Any) -> Checkpoint:
    fields.setdefault("node_id", f"turn:{seq}")
    return Checkpoint(
        execution_id="run",
        seq=seq,
        runner="r",
        state_snapshot={"turn": seq, "messages": messages, "z": [1.5, None]},
        **fields,
    )


def test_the_plan_stores_what_encoding_value_by_value_stores() -> None:
    logs = MessageLogs()
    first = [{"role": "user", "content": "ünï ☃"}]
    grown = [*first, {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "arguments": {"n": 2}}]}]
    rows = [
        _row(0, first, node_input={"a": [1, {"b": "c"}]}),
        _row(1, grown, node_output={"ok": True}, interrupt_context={"why": "x"}),
        _row(2, grown),  # no new message: no chunk
    ]
    for row in rows:
        stored, append = logs.plan(row)
        messages = row.state_snapshot["messages"]
        rest = {k: v for k, v in row.state_snapshot.items() if k != "messages"}
        start = append.start if append is not None else len(messages)
        parts = encode_one_by_one(row, rest, messages, start)
        assert [
            stored.state_snapshot,
            stored.node_input,
            stored.node_output,
            stored.interrupt_context,
        ] == parts[:4]
        assert (append.chunk if append is not None else None) == (parts[4] if len(parts) > 4 else None)
        assert list(stored.state_snapshot) and decode_json(stored.state_snapshot) == rest
        assert stored.message_count == len(messages) and stored.created_at == row.created_at
    assert [logs.plan(_row(3, [*grown, {"m": 3}]))[1].start] == [2]  # type: ignore[union-attr]


def test_the_plan_normalises_and_refuses_as_encode_does() -> None:
    _, append = MessageLogs().plan(_row(0, ({"role": "user", "content": ("a", "b")},)))
    assert append is not None and decode_json(append.chunk) == [{"role": "user", "content": ["a", "b"]}]
    with pytest.raises(SerializationError) as info:
        MessageLogs().plan(_row(0, [{"ok": 1}, {"bad": float("nan")}]))
    assert info.value.path == "$.state_snapshot.messages[1].bad"
    with pytest.raises(SerializationError) as text:
        MessageLogs().plan(_row(0, [], agent_path="a\x00b"))
    assert text.value.path == "$.agent_path"
    with pytest.raises(SerializationError) as kind:
        MessageLogs().plan(_row(0, [], node_id=7))
    assert kind.value.path == "$.node_id"
