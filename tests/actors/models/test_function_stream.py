"""FunctionModel as a streaming model: a generator's pieces reach the text sink and make one reply."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from actors.lowlevel import text_sink
from actors.models import FunctionModel, Message, ModelError, ModelReply, ToolCall

pytestmark = pytest.mark.anyio
CALL = ToolCall("refund", {"order": "A-1"}, "c1")


async def test_sync_and_async_generators_stream_their_pieces() -> None:
    def sync_fn(messages: list[Message]) -> Iterator[str | ModelReply]:
        yield "Refunding "
        yield "now."
        yield ModelReply(" Calling:", [CALL])

    async def async_fn(messages: list[Message]) -> AsyncIterator[str | ModelReply]:
        yield "Hel"
        yield "lo"

    got: list[tuple[str, int]] = []
    with text_sink(lambda text, attempt: got.append((text, attempt))):
        streamed = await FunctionModel(sync_fn).complete([Message("user", "hi")])
        answered = await FunctionModel(async_fn).complete([Message("user", "hi")])
    assert streamed == ModelReply("Refunding now. Calling:", [CALL])
    assert answered == ModelReply("Hello")
    assert got == [("Refunding ", 1), ("now.", 1), (" Calling:", 1), ("Hel", 1), ("lo", 1)]
    # Without a sink the pieces go nowhere and the reply is the same.
    assert await FunctionModel(sync_fn).complete([]) == streamed


async def test_a_generator_yielding_something_else_is_a_model_error() -> None:
    def bad(messages: list[Message]) -> Iterator[object]:
        yield "ok"
        yield 42

    with pytest.raises(ModelError, match="yielded a int; yield a str or a ModelReply"):
        await FunctionModel(bad).complete([])  # type: ignore[arg-type]
