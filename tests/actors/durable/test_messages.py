"""The run's messages still encode and decode now that their public classes report ``actors``.

msgspec resolves a Struct's string annotations in the module named by ``__module__``; these checks
fail if a public Struct's module postponed its annotations and ``actors`` lacks one of the names.
"""

from __future__ import annotations

import typing

import msgspec
import pytest

from actors import ActorInfo, Cancel, Recover, Resume, RunResult
from actors.lowlevel import ResumeRun, RunMessage, Spawn, SpawnFork
from actors.models import Message, ModelReply, ToolCall
from stores import Checkpoint, PendingInterrupt


def test_public_structs_report_actors() -> None:
    for cls in (Resume, Recover, Cancel, RunResult, ActorInfo):
        assert cls.__module__ == "actors"
    for cls in (Message, ModelReply, ToolCall):
        assert cls.__module__ == "actors.models"


def test_renamed_structs_still_resolve_their_annotations() -> None:
    """``typing.get_type_hints`` and msgspec's schema read annotations through ``__module__``."""
    assert typing.get_type_hints(RunResult)["pending"] == PendingInterrupt | None
    assert typing.get_type_hints(ToolCall)["arguments"] == dict[str, typing.Any]
    schema = msgspec.json.schema(Message)
    assert set(schema["$defs"]) == {"Message", "ToolCall"}
    assert "pending" in msgspec.json.schema(RunResult)["$defs"]["RunResult"]["properties"]


def test_model_messages_round_trip() -> None:
    message = Message("assistant", "hi", tool_calls=[ToolCall("refund", {"order": "1"}, "call_1")])
    assert msgspec.json.decode(msgspec.json.encode(message), type=Message) == message
    assert msgspec.convert({"role": "user", "content": "x"}, Message) == Message("user", "x")
    reply = ModelReply(text="done")
    assert msgspec.json.decode(msgspec.json.encode(reply), type=ModelReply) == reply


@pytest.mark.parametrize(
    "message",
    [
        Spawn([{"role": "user", "content": "hi"}]),
        SpawnFork(
            Checkpoint(execution_id="r", seq=3, runner="a", node_id="turn:1"),
            {"role": "user", "content": "x"},
        ),
        ResumeRun(Resume(approved=True, metadata={"approver": "alice"})),
        Recover(),
        Cancel("operator"),
    ],
)
def test_every_run_message_round_trips_through_the_tagged_union(message: RunMessage) -> None:
    decoded = msgspec.json.decode(msgspec.json.encode(message), type=RunMessage)
    assert type(decoded) is type(message)
    assert msgspec.json.encode(decoded) == msgspec.json.encode(message)


def test_tags_are_stable() -> None:
    assert msgspec.json.encode(Cancel()) == b'{"type":"cancel","reason":"cancelled"}'
    assert msgspec.json.decode(b'{"type":"recover"}', type=RunMessage) == Recover()
    resumed = msgspec.json.decode(b'{"type":"resume","resume":{"approved":false}}', type=RunMessage)
    assert resumed == ResumeRun(Resume(approved=False))


def test_resume_decodes_strictly() -> None:
    assert Resume.from_dict({"approved": True, "metadata": {"k": 1}}) == Resume(True, {"k": 1})
    with pytest.raises(msgspec.ValidationError):
        Resume.from_dict({"approved": True, "extra": 1})
    with pytest.raises(msgspec.ValidationError):
        Resume.from_dict({"approved": "yes"})


def test_run_result_and_actor_info_decode() -> None:
    pending = PendingInterrupt(execution_id="r", reason="why", context={"a": 1}, node_id="turn:0/tool:t")
    result = RunResult(execution_id="r", status="paused", pending=pending)
    assert msgspec.json.decode(msgspec.json.encode(result), type=RunResult) == result
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(b'{"execution_id":"r","status":"lost"}', type=RunResult)
    info = ActorInfo(id="a", alive=True, accepting=True, queued=0, capacity=8, received=2)
    assert msgspec.json.decode(msgspec.json.encode(info), type=ActorInfo) == info
