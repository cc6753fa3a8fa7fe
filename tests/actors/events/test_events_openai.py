"""OpenAIChat(stream=True) in a run, against a loopback server sending server-sent events (the
models tests' own server): text and a tool call arrive split over chunks; the deltas come before the
step's next row; a child killed (SIGKILL) in the middle of the stream leaves a run whose crash
recovery, in another process, re-issues the call with a higher ``attempt``. Both backends.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import Backend
from test_events_processes import LIMIT, Child, replay

from actors.events import Event, RunEnded, StepStarted, TextDelta, ToolFinished, decode_event

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from _chat_server import ChatServer, Reply, serve

pytestmark = pytest.mark.anyio

TEXT = ["Let ", "me ", "look ", "that ", "up."]


@pytest.fixture
def server() -> Iterator[ChatServer]:
    yield from serve()


def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "model": "test-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }


def call_piece(arguments: str, *, first: bool = False) -> dict[str, Any]:
    piece: dict[str, Any] = {"index": 0, "function": {"arguments": arguments}}
    if first:
        piece.update(id="call_1", type="function")
        piece["function"]["name"] = "lookup"
    return chunk({"tool_calls": [piece]})


#: Turn 0: text in five pieces, then the lookup call, its arguments in three fragments.
TURN0: list[dict[str, Any] | str] = [
    chunk({"role": "assistant", "content": ""}),
    *[chunk({"content": t}) for t in TEXT],
    call_piece("", first=True),
    call_piece('{"ord'),
    call_piece('er": "A'),
    call_piece('-1"}'),
    chunk({}, "tool_calls"),
    "[DONE]",
]
TURN1: list[dict[str, Any] | str] = [
    chunk({"content": "It is "}),
    chunk({"content": "30 EUR."}, "stop"),
    "[DONE]",
]


async def test_a_streamed_openai_call_killed_midway_is_reissued_with_a_higher_attempt(
    store_backend: Backend, server: ChatServer
) -> None:
    eid = "events-openai"
    # The first stream stalls after three text pieces (the child is killed there); the re-issued
    # call and the next turn stream in full.
    stalled = [*TURN0[:4], *[": keep-alive"] * 200]  # three text pieces, then nothing more
    server.script = [Reply(chunks=stalled, chunk_delay=0.2), Reply(chunks=TURN0), Reply(chunks=TURN1)]
    with anyio.fail_after(LIMIT):
        first = await Child.start("openai", store_backend, eid, server.base_url)
        seen: list[Event] = []
        while sum(isinstance(e, TextDelta) for e in seen) < 3:
            seen.append(decode_event(await first.line()))
        first.process.kill()  # mid-stream: the server is still sending the first reply
        await first.process.wait()
        second = await Child.start("openai-recover", store_backend, eid, server.base_url)
        recovered = [decode_event(line) for line in await second.events()]
        whole = [decode_event(line) for line in await replay(store_backend, eid)]

    before = [e for e in seen if isinstance(e, TextDelta)]
    assert [(d.text, d.attempt) for d in before] == [("Let ", 1), ("me ", 1), ("look ", 1)]
    again = [e for e in recovered if isinstance(e, TextDelta)]
    turn0 = [d for d in again if d.seq == again[0].seq]
    assert "".join(d.text for d in turn0) == "Let me look that up." and {d.attempt for d in turn0} == {2}
    # The deltas of each call come after its row and before the next row.
    order = [(type(e).__name__, e.seq) for e in recovered]
    call_row = order.index(("StepStarted", turn0[0].seq))
    last_delta = max(i for i, item in enumerate(order) if item == ("TextDelta", turn0[0].seq))
    assert all(kind == "TextDelta" for kind, _ in order[call_row + 1 : last_delta + 1])
    assert order[last_delta + 1] == ("StepStarted", turn0[0].seq + 1)  # the tool's row, after the text
    finished = [e for e in whole if isinstance(e, ToolFinished)]
    assert [(f.tool, f.ok, f.output) for f in finished] == [("lookup", True, "order A-1: 30 EUR")]
    calls = [
        (e.node_id, e.attempt) for e in whole if isinstance(e, StepStarted) and e.step_type == "llm_call"
    ]
    assert calls == [("turn:0", 1), ("turn:0", 2), ("turn:1", 1)]
    assert isinstance(whole[-1], RunEnded) and whole[-1].output == "It is 30 EUR."
    assert [d.text for d in again if d.seq != turn0[0].seq] == ["It is ", "30 EUR."]
