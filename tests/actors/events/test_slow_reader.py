"""A reader that does not read while a run streams: it loses text deltas, never durable events, and
what it holds meanwhile is bounded (measured with tracemalloc). Both backends.

The figure: at the end of the run, the memory still allocated by the event hub and the stream
(``actors/_durable/_follow.py``, the deltas) and by the model (the streamed strings), with a
reader that has not read yet, minus the same without a reader
(``pytest tests/actors/events/test_slow_reader.py -s`` prints it).
"""

from __future__ import annotations

import contextlib
import gc
import tracemalloc

import anyio
import anyio.lowlevel
import pytest
from conftest import Backend

from actors import ActorSystem, Agent, tool
from actors.events import DURABLE_EVENTS, Event, StepStarted, TextDelta, encode_event
from actors.models import FunctionModel, Message, ModelReply, ToolCall

pytestmark = pytest.mark.anyio

TURNS = 40  # 81 rows: more than a subscription holds
CHUNKS = 150  # per turn: 6,000 deltas of 256 bytes, about 1.5 MB of text
#: Where what a reader holds is allocated: the hub and the stream, and the model's chunks.
SOURCES = [tracemalloc.Filter(True, "*/actors/_durable/_follow.py"), tracemalloc.Filter(True, __file__)]
#: What the stalled reader may hold: its buffers are bounded far below the ~2 MB it was sent.
BOUND = 600_000


def streaming_agent() -> Agent:
    @tool
    def note(n: int) -> str:
        """Note a turn."""
        return f"noted {n}"

    async def model(messages: list[Message]):  # type: ignore[no-untyped-def]
        turn = sum(1 for m in messages if m.role == "assistant")
        for i in range(CHUNKS):
            await anyio.lowlevel.checkpoint()
            yield f"{turn:03}:{i:03} " + "x" * 247  # a new string each: held text costs memory
        if turn < TURNS:
            yield ModelReply(tool_calls=[ToolCall("note", {"n": turn})])

    return Agent("streamer", FunctionModel(model), tools=[note], max_turns=TURNS + 1)


async def retained(backend: Backend, name: str, *, reader: bool) -> tuple[int, list[Event], int]:
    """Run the streaming agent once; the traced memory retained at its end (with a reader that has
    not read yet, or without one), then the reader's events and its dropped count."""
    store = backend.open()
    async with store, ActorSystem(store) as system:
        agent = streaming_agent()
        ref = await system.spawn(agent, "go", execution_id=name)
        events: list[Event] = []
        async with contextlib.AsyncExitStack() as stack:
            stream = await stack.enter_async_context(ref.events(tokens=True)) if reader else None
            result = await ref.result(timeout=120)
            assert result.status == "completed", result
            gc.collect()
            held = sum(
                stat.size
                for stat in tracemalloc.take_snapshot().filter_traces(SOURCES).statistics("filename")
            )
            if stream is not None:
                events = [event async for event in stream]
        return held, events, stream.dropped_text if stream is not None else 0


async def test_a_stalled_reader_loses_text_not_rows_and_holds_bounded_memory(store_backend: Backend) -> None:
    tracemalloc.start()
    try:
        with anyio.fail_after(240):
            without, _, _ = await retained(store_backend, "no-reader", reader=False)
            with_reader, events, dropped = await retained(store_backend, "stalled", reader=True)
    finally:
        tracemalloc.stop()
    held = with_reader - without
    print(f"\n{store_backend.name}: a stalled reader held {held / 1000:.0f} kB more than no reader")
    assert held < BOUND

    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert dropped > 0 and len(deltas) + dropped <= TURNS * CHUNKS + CHUNKS
    assert len(deltas) < (TURNS + 1) * CHUNKS  # text was lost...
    store = store_backend.open()
    async with store, ActorSystem(store) as system:
        replay = [e async for e in system.ref("stalled").events(since=0)]
    durable = [e for e in events if isinstance(e, DURABLE_EVENTS)]
    assert [encode_event(e) for e in durable] == [encode_event(e) for e in replay]  # ...rows never
    assert len(durable) == 2 * TURNS + 1 + TURNS + 1  # a row each, and each tool's result
    # What text it kept still sits between its model call's row and the next row.
    last_row = -1
    for event in events:
        if isinstance(event, TextDelta):
            assert event.seq == last_row
        elif isinstance(event, StepStarted):
            last_row = event.seq
