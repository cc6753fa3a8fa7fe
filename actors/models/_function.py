""":class:`FunctionModel`: the offline, deterministic model, backed by a plain function."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any

from ._errors import ModelError
from ._stream import stream_text
from ._types import Message, ModelReply

__all__ = ["FunctionModel"]

#: What ``fn`` may give: an answer, a reply, or (streaming) an iterator of text chunks that may end
#: with a reply; sync or async.
ModelOutput = str | ModelReply | Iterator["str | ModelReply"] | AsyncIterator["str | ModelReply"]
ModelFn = Callable[[list[Message]], "ModelOutput | Awaitable[str | ModelReply]"]


class FunctionModel:
    """A model whose every turn is ``fn(messages)``, sync or async.

    ``fn`` returns a ``str`` (the final answer) or a :class:`ModelReply` (e.g. with tool calls). It
    gets its own copy of the message list, so it cannot change the run's conversation. Tests and
    examples use it to script a conversation with no network; an exception ``fn`` raises is the
    model failing (the run fails and can be resumed).

    A generator (sync or async) streams: each ``str`` it yields is a chunk of the answer, handed to
    the run's readers as it comes (``TextDelta`` events), and the reply's text is the chunks joined.
    It may yield one :class:`ModelReply` last, for tool calls (its text, if any, follows the chunks).
    """

    def __init__(self, fn: ModelFn, *, name: str | None = None) -> None:
        if not callable(fn):
            raise TypeError(f"FunctionModel needs a callable, not {type(fn).__name__}")
        self.fn = fn
        self.name = name or getattr(fn, "__qualname__", type(fn).__name__)

    async def complete(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] = ()) -> ModelReply:
        """Call ``fn`` with a copy of ``messages``; ``tools`` are not shown to it."""
        result: Any = self.fn(list(messages))
        if inspect.isawaitable(result):
            result = await result
        if inspect.isasyncgen(result) or inspect.isgenerator(result):
            return await self._streamed(result)
        if isinstance(result, str):
            return ModelReply(text=result)
        if isinstance(result, ModelReply):
            return result
        raise ModelError(
            f"FunctionModel {self.name!r} returned a {type(result).__name__}; return a str or a ModelReply"
        )

    async def _streamed(self, chunks: Any) -> ModelReply:
        """Read a generator's chunks, streaming each; the reply is the chunks and a final reply."""
        texts: list[str] = []
        final: ModelReply | None = None
        if inspect.isasyncgen(chunks):
            async for chunk in chunks:
                final = self._chunk(chunk, texts, final)
        else:
            for chunk in chunks:
                final = self._chunk(chunk, texts, final)
        if final is None:
            return ModelReply(text="".join(texts))
        return ModelReply(text="".join(texts) + final.text, tool_calls=list(final.tool_calls))

    def _chunk(self, chunk: object, texts: list[str], final: ModelReply | None) -> ModelReply | None:
        if final is not None:
            raise ModelError(
                f"FunctionModel {self.name!r} yielded after its ModelReply; yield the reply last"
            )
        if isinstance(chunk, ModelReply):
            return chunk
        if not isinstance(chunk, str):
            raise ModelError(
                f"FunctionModel {self.name!r} yielded a {type(chunk).__name__}; yield str chunks "
                "(and at most one ModelReply, last)"
            )
        texts.append(chunk)
        stream_text(chunk)
        return None

    def __repr__(self) -> str:
        return f"FunctionModel({self.name!r})"
