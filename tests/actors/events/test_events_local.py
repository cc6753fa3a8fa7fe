"""Events in one process: replay from any ``seq``, where an iterator starts and ends, streamed text
between its model call's row and the next row, bad input, and the union's stable tags."""

from __future__ import annotations

import anyio
import msgspec
import pytest
from conftest import Backend

from actors import ActorSystem, Agent, Resume, RunNotFound, interrupt, tool
from actors.events import (
    DURABLE_EVENTS,
    Event,
    Handoff,
    Paused,
    Recovered,
    Resumed,
    RunEnded,
    SignalConsumed,
    StepStarted,
    TextDelta,
    ToolFinished,
    Waiting,
    Woken,
    decode_event,
    encode_event,
)
from actors.models import FunctionModel, Message, ModelReply, ToolCall

pytestmark = pytest.mark.anyio
LIMIT = 30.0


def agent() -> Agent:
    @tool
    def refund(amount: int) -> str:
        """Refund, after approval."""
        return f"approved={interrupt('approve', {'amount': amount}).approved}"

    async def model(messages: list[Message]):  # type: ignore[no-untyped-def]
        for piece in ("Looking ", "into ", "it."):
            await anyio.sleep(0.01)
            yield piece
        if messages[-1].role == "user":
            yield ModelReply(tool_calls=[ToolCall("refund", {"amount": 5})])

    return Agent("refunder", FunctionModel(model), tools=[refund])


async def collect(stream: object) -> list[Event]:
    return [event async for event in stream]  # type: ignore[attr-defined]


async def test_text_sits_between_its_row_and_the_next_and_only_when_asked(store_backend: Backend) -> None:
    store, runner = store_backend.open(), agent()
    with anyio.fail_after(LIMIT):
        async with store, ActorSystem(store, runners=[runner]) as system:
            ref = await system.spawn(runner, "refund me", execution_id="r")
            leg = await collect(ref.events(tokens=True))
            quiet = await collect(system.ref("r").events(since=0, tokens=True))  # no model streams now
            after = await system.send("r", Resume(approved=True))
            plain = await collect(after.events())
    deltas = [e for e in leg if isinstance(e, TextDelta)]
    assert "".join(d.text for d in deltas) == "Looking into it." and {d.attempt for d in deltas} == {1}
    kinds = [(type(e).__name__, e.seq) for e in leg]
    assert kinds[0] == ("StepStarted", 0) and kinds[1:4] == [("TextDelta", 0)] * 3
    assert kinds[4:] == [("StepStarted", 1), ("Paused", 2)]
    assert not [e for e in quiet if isinstance(e, TextDelta)]
    assert [type(e) for e in plain] == [Resumed, ToolFinished, StepStarted, RunEnded]
    assert plain[-1].output == "Looking into it."  # type: ignore[union-attr]


async def test_replay_from_any_seq_and_where_an_iterator_ends(store_backend: Backend) -> None:
    store, runner = store_backend.open(), agent()
    with anyio.fail_after(LIMIT):
        async with store, ActorSystem(store, runners=[runner]) as system:
            await (await system.spawn(runner, "refund me", execution_id="r")).result()
            # Made while the run rests at its pause: it waits for the next leg and ends with it.
            async with system.ref("r").events() as waiting:
                async with anyio.create_task_group() as tg:
                    got: list[Event] = []

                    async def read() -> None:
                        got.extend(await collect(waiting))

                    tg.start_soon(read)
                    await anyio.sleep(0.3)
                    assert got == []  # nothing yet: the run is paused
                    await system.resume("r", Resume(approved=False))
            whole = await collect(system.ref("r").events(since=0))
            from_each = {seq: await collect(system.ref("r").events(since=seq)) for seq in range(7)}
            done = await collect(system.ref("r").events())  # past a completed run's end: nothing
            with pytest.raises(RunNotFound):
                await collect(system.ref("nobody").events())
            with pytest.raises(ValueError, match="since"):
                system.ref("r").events(since=-1)
    assert [type(e) for e in got] == [Resumed, ToolFinished, StepStarted, RunEnded]
    assert [encode_event(e) for e in got] == [encode_event(e) for e in whole if e.seq >= got[0].seq]
    for seq, events in from_each.items():
        assert events == [e for e in whole if e.seq >= seq], seq
    assert done == []
    assert isinstance(whole[2], Paused) and whole[2].pending.context == {"amount": 5}
    assert whole[-1].output == "Looking into it."  # type: ignore[union-attr]


def test_the_union_has_stable_tags_and_round_trips() -> None:
    tags = {cls: msgspec.inspect.type_info(cls).tag for cls in (*DURABLE_EVENTS, TextDelta)}  # type: ignore[attr-defined]
    assert tags == {
        StepStarted: "step_started",
        ToolFinished: "tool_finished",
        Handoff: "handoff",
        Paused: "paused",
        Resumed: "resumed",
        Recovered: "recovered",
        RunEnded: "run_ended",
        Waiting: "waiting",
        Woken: "woken",
        SignalConsumed: "signal_consumed",
        TextDelta: "text_delta",
    }
    delta = TextDelta(execution_id="e", agent_path="agent:a", seq=3, text="hi", attempt=2)
    assert (
        encode_event(delta)
        == b'{"type":"text_delta","execution_id":"e","agent_path":"agent:a","seq":3,"text":"hi","attempt":2}'
    )
    assert decode_event(encode_event(delta)) == delta
    with pytest.raises(msgspec.ValidationError):
        decode_event(b'{"type":"no_such_event"}')
