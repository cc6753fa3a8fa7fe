"""The conversation types and the offline FunctionModel."""

from __future__ import annotations

import subprocess
import sys

import msgspec
import pytest

from actors.lowlevel import Transcript
from actors.models import FunctionModel, Message, Model, ModelError, ModelReply, ToolCall


def test_message_positional_and_defaults() -> None:
    m = Message("user", "hi")
    assert (m.role, m.content, m.tool_calls, m.tool_call_id, m.name) == ("user", "hi", [], None, None)
    assert Message("tool", "42", tool_call_id="c1", name="add").name == "add"


def test_message_refuses_unknown_role_and_non_str_content() -> None:
    with pytest.raises(ValueError, match="role"):
        Message("robot", "hi")
    with pytest.raises(TypeError, match="content"):
        Message("user", None)  # type: ignore[arg-type]


def test_message_is_frozen() -> None:
    m = Message("user", "hi")
    with pytest.raises(AttributeError):
        m.content = "x"  # type: ignore[misc]


def test_message_dict_form_is_canonical_and_round_trips() -> None:
    call = ToolCall("refund", {"order": "1042", "amount": 5}, "call_1")
    messages = [
        Message("system", "be nice"),
        Message("user", "refund 1042"),
        Message("assistant", "", [call]),
        Message("tool", '{"ok":true}', tool_call_id="call_1", name="refund"),
    ]
    dicts = [m.to_dict() for m in messages]
    assert dicts[0] == {"role": "system", "content": "be nice"}
    assert list(dicts[2]) == ["role", "content", "tool_calls"]
    assert dicts[2]["tool_calls"] == [
        {"id": "call_1", "name": "refund", "arguments": {"order": "1042", "amount": 5}}
    ]
    assert dicts[3] == {"role": "tool", "content": '{"ok":true}', "tool_call_id": "call_1", "name": "refund"}
    assert [Message.from_dict(d) for d in dicts] == messages
    # Equal messages give equal dicts, and the JSON bytes are the same.
    again = [Message.from_dict(d).to_dict() for d in dicts]
    assert msgspec.json.encode(again) == msgspec.json.encode(dicts)


def test_message_from_dict_validates() -> None:
    with pytest.raises(msgspec.ValidationError):
        Message.from_dict({"role": "user", "content": 3})
    with pytest.raises(msgspec.ValidationError):
        Message.from_dict({"role": "user"})


def test_tool_call_ids_unique_within_and_across_processes() -> None:
    here = {ToolCall("t", {}).id for _ in range(1000)}
    assert len(here) == 1000
    assert all(i.startswith("call_") for i in here)
    code = "from actors.models import ToolCall\nfor _ in range(1000): print(ToolCall('t', {}).id)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    there = set(out.stdout.split())
    assert len(there) == 1000
    assert not here & there


def test_tool_call_from_dict_without_id_gets_one() -> None:
    call = ToolCall.from_dict({"name": "x", "arguments": {"a": 1}})
    assert call.id.startswith("call_")
    assert ToolCall.from_dict(call.to_dict()) == call


def test_model_reply_defaults_and_message() -> None:
    reply = ModelReply()
    assert reply.text == "" and reply.tool_calls == []
    call = ToolCall("t", {"x": 1})
    msg = ModelReply("thinking", [call]).to_message()
    assert msg == Message("assistant", "thinking", [call])


def test_transcript_shares_dict_objects_between_snapshots() -> None:
    t = Transcript([Message("user", "a")])
    first = t.snapshot()
    t.append(Message("assistant", "b"))
    second = t.snapshot()
    assert first is not second
    assert len(first) == 1 and len(second) == 2
    assert second[0] is first[0]
    back = Transcript.from_dicts(second)
    assert back.snapshot()[1] is second[1]
    assert back.messages == [Message("user", "a"), Message("assistant", "b")]
    assert len(back) == 2 and list(back) == back.messages


@pytest.mark.anyio
async def test_function_model_sync_and_async() -> None:
    seen: list[list[Message]] = []

    def sync_fn(messages: list[Message]) -> str:
        seen.append(messages)
        messages.append(Message("user", "mutated"))  # a copy: the caller's list is untouched
        return "done"

    async def async_fn(messages: list[Message]) -> ModelReply:
        return ModelReply(tool_calls=[ToolCall("t", {"n": len(messages)})])

    convo = [Message("user", "hi")]
    assert await FunctionModel(sync_fn).complete(convo, []) == ModelReply(text="done")
    assert convo == [Message("user", "hi")]
    reply = await FunctionModel(async_fn).complete(convo)
    assert reply.tool_calls[0].arguments == {"n": 1}
    assert isinstance(FunctionModel(sync_fn), Model)


@pytest.mark.anyio
async def test_function_model_bad_return_and_raise() -> None:
    with pytest.raises(ModelError, match="return a str or a ModelReply"):
        await FunctionModel(lambda m: 42).complete([])  # type: ignore[arg-type, return-value]

    def boom(messages: list[Message]) -> str:
        raise RuntimeError("model down")

    with pytest.raises(RuntimeError, match="model down"):
        await FunctionModel(boom).complete([])
    with pytest.raises(TypeError):
        FunctionModel("nope")  # type: ignore[arg-type]
