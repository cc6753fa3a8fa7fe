"""OpenAIChat(stream=True) against a loopback server of the tests' own that sends server-sent events.

The text and the tool calls arrive split over several chunks; the assembled reply equals the one the
same answer gives without streaming, and the text pieces reach the bound text sink as they arrive,
numbered by attempt (a stream cut mid-way is tried again, and its pieces come again with attempt 2).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from _chat_server import ChatServer, Reply, completion, serve

from actors.lowlevel import text_sink
from actors.models import Message, ModelError, ModelReply, OpenAIChat, Usage

pytestmark = pytest.mark.anyio
LIMIT = 20.0
HI = [Message("user", "refund A-1 and tell zoe")]
TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
    for n in ("refund", "notify")
]


@pytest.fixture
def server() -> Iterator[ChatServer]:
    yield from serve()


def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-s",
        "object": "chat.completion.chunk",
        "created": 1764590000,
        "model": "test-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }


def piece(index: int, arguments: str, call_id: str | None = None, name: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if call_id is not None:
        out.update(id=call_id, type="function")
        out["function"]["name"] = name
    return out


REFUND_ARGS = '{"order": "A-1", "amount": 5}'
NOTIFY_ARGS = '{"customer": "zoë"}'
#: The answer as one message (what a server sends without streaming)...
WHOLE = {
    "role": "assistant",
    "content": "Refunding, then telling Zoë.",
    "tool_calls": [
        {"id": "call_r", "type": "function", "function": {"name": "refund", "arguments": REFUND_ARGS}},
        {"id": "call_n", "type": "function", "function": {"name": "notify", "arguments": NOTIFY_ARGS}},
    ],
}
#: ...and the same answer as OpenAI streams it: text pieces, then each call's id and name, then its
#: arguments in fragments; a keep-alive comment, a usage chunk with no choices, [DONE].
PIECES: list[dict[str, Any] | str] = [
    chunk({"role": "assistant", "content": ""}),
    chunk({"content": "Refunding,"}),
    ": keep-alive",
    chunk({"content": " then telling"}),
    chunk({"content": " Zoë."}),
    chunk({"tool_calls": [piece(0, "", "call_r", "refund")]}),
    chunk({"tool_calls": [piece(0, '{"order": "A')]}),
    chunk({"tool_calls": [piece(0, '-1", "amount": 5}')]}),
    chunk({"tool_calls": [piece(1, "", "call_n", "notify")]}),
    chunk({"tool_calls": [piece(1, '{"customer": ')]}),
    chunk({"tool_calls": [piece(1, '"zoë"}')]}),
    chunk({}, "tool_calls"),
    {"id": "chatcmpl-s", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 30}},
    "[DONE]",
]


def collect() -> tuple[list[tuple[str, int]], Any]:
    got: list[tuple[str, int]] = []
    return got, lambda text, attempt: got.append((text, attempt))


async def test_a_streamed_reply_equals_the_one_without_streaming(server: ChatServer) -> None:
    usage = {"prompt_tokens": 9, "completion_tokens": 30, "total_tokens": 39}
    server.script = [Reply(body={**completion(WHOLE, "tool_calls"), "usage": usage}), Reply(chunks=PIECES)]
    got, sink = collect()
    with anyio.fail_after(LIMIT):
        async with OpenAIChat("m", base_url=server.base_url) as plain:
            whole = await plain.complete(HI, TOOLS)
        async with OpenAIChat("m", base_url=server.base_url, stream=True) as streaming:
            with text_sink(sink):
                streamed = await streaming.complete(HI, TOOLS)
    assert streamed == whole
    assert streamed.usage == Usage(input_tokens=9, output_tokens=30)
    assert [(c.id, c.name, c.arguments) for c in streamed.tool_calls] == [
        ("call_r", "refund", {"order": "A-1", "amount": 5}),
        ("call_n", "notify", {"customer": "zoë"}),
    ]
    assert streamed.tool_calls[0].arguments_text == REFUND_ARGS
    assert got == [("Refunding,", 1), (" then telling", 1), (" Zoë.", 1)]
    plain_body, stream_body = server.bodies()
    assert "stream" not in plain_body and stream_body.pop("stream") is True
    assert stream_body.pop("stream_options") == {"include_usage": True}  # the usage comes last
    assert stream_body == plain_body


async def test_text_goes_nowhere_without_a_sink_and_an_answer_streams_too(server: ChatServer) -> None:
    pieces: list[dict[str, Any] | str] = [
        chunk({"content": "Hel"}),
        chunk({"content": "lo"}, "stop"),
        "[DONE]",
    ]
    server.script = [Reply(chunks=pieces), Reply(chunks=pieces)]
    got, sink = collect()
    async with OpenAIChat("m", base_url=server.base_url, stream=True) as model:
        with anyio.fail_after(LIMIT):
            assert await model.complete(HI) == ModelReply("Hello")
            with text_sink(sink):
                assert await model.complete(HI) == ModelReply("Hello")
    assert got == [("Hel", 1), ("lo", 1)]


async def test_streamed_content_parts_calls_without_index_and_the_legacy_call(server: ChatServer) -> None:
    # Mistral-shaped: content as parts (thinking, then text), each call whole in one chunk, no index.
    mistral: list[dict[str, Any] | str] = [
        chunk({"content": [{"type": "thinking", "thinking": [{"type": "text", "text": "hmm"}]}]}),
        chunk({"content": [{"type": "text", "text": "Hello"}]}),
        chunk({"content": " there"}),
        chunk(
            {"tool_calls": [{"id": "aB3dE6gH9", "function": {"name": "refund", "arguments": REFUND_ARGS}}]}
        ),
        chunk(
            {"tool_calls": [{"id": "xY1zW2vU3", "function": {"name": "notify", "arguments": NOTIFY_ARGS}}]}
        ),
        chunk({}, "tool_calls"),
        "[DONE]",
    ]
    legacy: list[dict[str, Any] | str] = [
        chunk({"function_call": {"name": "refund", "arguments": '{"order": '}}),
        chunk({"function_call": {"arguments": '"A-1"}'}}, "function_call"),
        "[DONE]",
    ]
    server.script = [Reply(chunks=mistral), Reply(chunks=legacy)]
    got, sink = collect()
    async with OpenAIChat("m", base_url=server.base_url, stream=True) as model:
        with anyio.fail_after(LIMIT), text_sink(sink):
            parts = await model.complete(HI, TOOLS)
            old = await model.complete(HI, TOOLS)
    assert parts.text == "Hello there"
    assert [(c.id, c.name, c.arguments_text) for c in parts.tool_calls] == [
        ("aB3dE6gH9", "refund", REFUND_ARGS),
        ("xY1zW2vU3", "notify", NOTIFY_ARGS),
    ]
    assert got == [("Hello", 1), (" there", 1)]  # the thinking part is not answer text
    (call,) = old.tool_calls
    assert (call.name, call.arguments) == ("refund", {"order": "A-1"})


async def test_a_stream_cut_mid_way_is_tried_again_with_a_higher_attempt(server: ChatServer) -> None:
    server.script = [Reply(chunks=PIECES, cut_after=3), Reply(chunks=PIECES)]
    got, sink = collect()
    async with OpenAIChat("m", base_url=server.base_url, stream=True, backoff=0.01) as model:
        with anyio.fail_after(LIMIT), text_sink(sink):
            reply = await model.complete(HI, TOOLS)
    assert reply.text == "Refunding, then telling Zoë." and len(reply.tool_calls) == 2
    assert got == [
        ("Refunding,", 1),
        ("Refunding,", 2),
        (" then telling", 2),
        (" Zoë.", 2),
    ]
    assert len(server.requests) == 2


async def test_why_a_stream_ended_is_read_as_without_streaming(server: ChatServer) -> None:
    server.script = [
        Reply(chunks=[chunk({"refusal": "I can't"}), chunk({"refusal": " help."}, "stop"), "[DONE]"]),
        Reply(chunks=[chunk({"content": "The policy says"}, "length"), "[DONE]"]),
        Reply(chunks=[chunk({"content": "Half an ans"})]),  # the body ends: no finish, no [DONE]
        Reply(chunks=[chunk({"content": "Hi"}), {"error": {"message": "upstream overloaded"}}]),
    ]
    async with OpenAIChat("m", base_url=server.base_url, stream=True, max_retries=0) as model:
        with anyio.fail_after(LIMIT):
            with pytest.raises(ModelError, match=r"^the model refused to answer: I can't help\.$") as refused:
                await model.complete(HI)
            with pytest.raises(ModelError, match="cut off at the token limit") as cut:
                await model.complete(HI)
            with pytest.raises(ModelError, match=r"ended its stream before the answer was finished"):
                await model.complete(HI)
            with pytest.raises(ModelError, match="streamed an error: upstream overloaded"):
                await model.complete(HI)
    assert (refused.value.reason, cut.value.reason) == ("refusal", "length")


async def test_a_stalled_stream_is_a_read_timeout_not_retried(server: ChatServer) -> None:
    server.script = [Reply(chunks=PIECES, chunk_delay=1.0), Reply(chunks=PIECES)]
    got, sink = collect()
    async with OpenAIChat("m", base_url=server.base_url, stream=True, timeout=0.3) as model:
        with (
            anyio.fail_after(LIMIT),
            text_sink(sink),
            pytest.raises(ModelError, match=r"read timeout of 0\.3 s, after 1 attempt"),
        ):
            await model.complete(HI)
    assert got == [] and len(server.requests) == 1


async def test_text_reaches_the_sink_while_the_stream_goes_on(server: ChatServer) -> None:
    words = ["one ", "two ", "three ", "four"]
    pieces: list[dict[str, Any] | str] = [chunk({"content": w}) for w in words]
    server.script = [Reply(chunks=[*pieces, chunk({}, "stop"), "[DONE]"], chunk_delay=0.25)]
    arrivals: list[float] = []
    async with OpenAIChat("m", base_url=server.base_url, stream=True) as model:
        with anyio.fail_after(LIMIT), text_sink(lambda text, attempt: arrivals.append(anyio.current_time())):
            reply = await model.complete(HI)
        done = anyio.current_time()
    assert reply == ModelReply("one two three four")
    # The first word was handed on at least three chunk delays before the reply was complete.
    assert len(arrivals) == 4 and done - arrivals[0] >= 0.7
